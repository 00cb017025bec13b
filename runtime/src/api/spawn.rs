//! Spawning: [`spawn`], [`spawn_link`], [`spawn_monitor`] and the options of
//! [`spawn_opts`].

use super::*;
use crate::context::{current, node, self_pid};
use crate::error::Error;
use crate::exit::ExitReason;
use crate::node::SpawnSpec;
use crate::pid::{MonitorRef, Pid};

/// Options for one spawn; see [`spawn_opts`].
#[derive(Debug, Default, Clone)]
pub struct SpawnOpts {
    spec: SpawnSpec,
}

/// Starts building a spawn with options.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let ok = node.run(|| {
///     let parent = self_pid();
///     spawn_opts().stack_size(256 * 1024).pinned().spawn(move || send(parent, 1u8)).unwrap();
///     expect::<u8>()
/// }).unwrap();
/// assert_eq!(ok, 1);
/// ```
pub fn spawn_opts() -> SpawnOpts {
    SpawnOpts::default()
}

impl SpawnOpts {
    /// Stack size for this process (virtual; default the node's).
    pub fn stack_size(mut self, bytes: usize) -> SpawnOpts {
        self.spec.stack_size = Some(bytes);
        self
    }
    /// Keep the process on the worker that spawns it: it never migrates, so
    /// it may hold thread-local state across yields.
    pub fn pinned(mut self) -> SpawnOpts {
        self.spec.pinned = true;
        self
    }
    /// Link the new process to the caller (atomically with the spawn).
    pub fn link(mut self) -> SpawnOpts {
        self.spec.link = Some(self_pid());
        self
    }
    /// Start the process with exits trapped.
    pub fn trap_exits(mut self) -> SpawnOpts {
        self.spec.trap_exits = true;
        self
    }
    /// Bound the process's mailbox to `n` messages: past that, `policy`
    /// kills it (reason `mailbox_overflow`) or drops the new message. Exit
    /// signals and monitor notifications are never dropped nor counted.
    /// Default: unbounded, as in Erlang. See [`Overflow`](crate::Overflow).
    pub fn max_mailbox(mut self, n: usize, policy: crate::limits::Overflow) -> SpawnOpts {
        self.spec.max_mailbox = Some((n, policy));
        self
    }
    /// Spawns `f` and monitors it, the monitor made before `f` can run
    /// (with [`SpawnOpts::link`], the link too).
    ///
    /// # Errors
    ///
    /// As [`SpawnOpts::spawn`].
    #[track_caller]
    pub fn spawn_monitor<F: FnOnce() + Send + 'static>(
        mut self,
        f: F,
    ) -> Result<(Pid, MonitorRef), Error> {
        let me = current("spawn_monitor");
        let r = node().make_ref();
        self.spec.monitor = Some((r, me.pid));
        let pid = self.spawn(f)?;
        // SAFETY: `me` is the running process.
        unsafe { me.local() }.monitors.push((r, pid));
        Ok((pid, r))
    }

    /// Spawns `f`.
    ///
    /// # Errors
    ///
    /// `Error::NodeDown` when the node stops; `Error::Resource` when no stack
    /// can be had (see [`ensure_map_count`](crate::ensure_map_count)).
    #[track_caller]
    pub fn spawn<F: FnOnce() + Send + 'static>(self, f: F) -> Result<Pid, Error> {
        let linked = self.spec.link.is_some();
        let pid = node().spawn(self.spec, f)?;
        if linked {
            // The child already lists us (before it could run); list the child.
            current("spawn").meta.lock().links.push(pid);
        }
        Ok(pid)
    }
}

/// A spawn's result, or the caller ends with the reason (Erlang raises
/// `system_limit` in the caller the same way).
pub(crate) fn or_exit<T>(spawned: Result<T, Error>) -> T {
    match spawned {
        Ok(v) => v,
        Err(e) => exit_now(ExitReason::Other(format!("spawn failed: {e}"))),
    }
}

/// Spawns a process on this node running `f`.
///
/// If the process cannot be started (node stopping, no stack) the caller
/// exits with reason `Other("spawn failed: ...")`, as an Erlang process gets
/// `system_limit`; use [`SpawnOpts::spawn`] to handle the error instead.
///
/// # Panics
///
/// Outside a process (use [`Node::spawn`](crate::Node::spawn)).
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let v = node.run(|| {
///     let me = self_pid();
///     spawn(move || send(me, 42u32));
///     expect::<u32>()
/// }).unwrap();
/// assert_eq!(v, 42);
/// ```
#[track_caller]
pub fn spawn<F: FnOnce() + Send + 'static>(f: F) -> Pid {
    or_exit(SpawnOpts::default().spawn(f))
}

/// Spawns and links in one step (Erlang's `spawn_link`).
#[track_caller]
pub fn spawn_link<F: FnOnce() + Send + 'static>(f: F) -> Pid {
    or_exit(SpawnOpts::default().link().spawn(f))
}

/// Spawns and monitors in one step (Erlang's `spawn_monitor`): the monitor
/// exists before the child runs, so even a child that dies at once is
/// reported with its real reason, never `NoProc`.
///
/// If the process cannot be started the caller exits, as with [`spawn`].
#[track_caller]
pub fn spawn_monitor<F: FnOnce() + Send + 'static>(f: F) -> (Pid, MonitorRef) {
    or_exit(SpawnOpts::default().spawn_monitor(f))
}
