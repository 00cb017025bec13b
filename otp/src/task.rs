//! `Task`, as Elixir's: run one function in its own process and collect its
//! result later; fan a function out over many items with a concurrency
//! limit; supervise such tasks.
//!
//! # The protocol
//!
//! A task is a process that runs `f`, sends its owner (the process that
//! made the task) one `TaskReply { tag, value }` and ends. The owner
//! **monitors** the task (before it can run) and waits in
//! [`Task::await_timeout`] for either the reply carrying the task's tag or
//! the monitor's `ProcessDied`; since a process's messages arrive before
//! its death notice, a reply is never lost to the death. So:
//!
//! * the value: `Ok(value)`;
//! * a crash (a panic, an exit signal): `Err(TaskError::Exited(reason))`;
//! * no answer in time: the task is killed (after unlinking, so the owner
//!   survives) and `Err(TaskError::Timeout)` comes back (Elixir's
//!   `Task.await` exits the caller instead; here the error is a value).
//!   [`Task::yield_timeout`] waits without killing (Elixir's `Task.yield`).
//!
//! [`spawn`] links the task to its owner, as `Task.async`: a crash of the
//! task takes the owner down too unless the owner traps exits (then
//! `await` reports the crash). [`spawn_unlinked`] only monitors (as
//! `Task.Supervisor.async_nolink`): a crash is always reported as a value.
//!
//! [`async_stream`] keeps at most `max_concurrency` unlinked tasks running
//! over the items and yields their results in the order of the items; a
//! task that takes longer than the timeout is killed and yields
//! `Err(Timeout)` (`on_timeout: :kill_task`). Dropping the stream kills the
//! tasks still running.
//!
//! [`TaskSupervisor`] is a [`DynamicSupervisor`]
//! of temporary children: [`TaskSupervisor::async_task`] starts the task
//! *as a child of the supervisor* and links it to the owner; the child
//! waits for a go message from its owner, sent once the owner's monitor
//! (and link) are in place, so even a task that crashes at once reports its
//! own reason.
//!
//! # Examples
//!
//! ```
//! use graft_otp::prelude::*;
//! use graft_otp::task;
//! use std::time::Duration;
//!
//! let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
//! let (sum, squares) = node.run(|| {
//!     let t = task::spawn(|| (1..=10u64).sum::<u64>());
//!     let sum = t.await_timeout(Duration::from_secs(5)).unwrap();
//!     let squares: Vec<u64> = task::async_stream(1..=5u64, 2, Duration::from_secs(5), |n| n * n)
//!         .map(|r| r.unwrap())
//!         .collect();
//!     (sum, squares)
//! }).unwrap();
//! assert_eq!(sum, 55);
//! assert_eq!(squares, [1, 4, 9, 16, 25]);
//! node.shutdown();
//! ```

use crate::gen_server::{CallError, StartError};
use crate::supervisor::{DynamicHandle, DynamicSupervisor, Restart, SupervisorError};
use graft::{
    demonitor_flush, exit, exit_self, expect, link, make_ref, monitor, receive, self_pid, send,
    spawn_link, spawn_opts, unlink, ExitReason, MonitorRef, Pid, ProcessDied,
};
use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Elixir's default task timeout (5 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a task gave no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskError {
    /// No answer within the timeout.
    Timeout,
    /// The task ended without answering (a panic's message, an exit
    /// signal's reason; `NoProc` if it could not be watched).
    Exited(ExitReason),
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskError::Timeout => f.write_str("task timed out"),
            TaskError::Exited(r) => write!(f, "task exited: {r}"),
        }
    }
}

impl std::error::Error for TaskError {}

/// A task's answer to its owner.
struct TaskReply<T> {
    tag: MonitorRef,
    value: T,
}
impl<T: Send + 'static> graft::Message for TaskReply<T> {}

/// A supervised task's go-ahead (the owner watches it now).
struct TaskGo(MonitorRef);
impl graft::Message for TaskGo {}

/// A running task of the calling process; its value is collected with
/// [`Task::await_timeout`] (only by the process that made it). As in
/// Elixir, a task that is never awaited, yielded to the end or shut down
/// leaves its reply and its monitor's `ProcessDied` in the owner's mailbox.
pub struct Task<T> {
    pid: Pid,
    monitor: MonitorRef,
    tag: MonitorRef,
    linked: bool,
    _t: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for Task<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Task")
            .field("pid", &self.pid)
            .field("linked", &self.linked)
            .finish()
    }
}

/// Runs `f` in a new process linked to and monitored by the caller
/// (Elixir's `Task.async`).
///
/// # Panics
///
/// Outside a graft process. If no process can be spawned the caller exits
/// (as [`graft::spawn`]).
pub fn spawn<T, F>(f: F) -> Task<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    spawn_task(f, true)
}

/// Runs `f` in a new process monitored (not linked) by the caller: a crash
/// never reaches the caller except as [`TaskError::Exited`].
///
/// ```
/// use graft_otp::prelude::*;
/// use graft_otp::task::{self, TaskError};
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let r = node.run(|| {
///     task::spawn_unlinked(|| -> u8 { panic!("bad input") }).await_timeout(task::DEFAULT_TIMEOUT)
/// }).unwrap();
/// assert_eq!(r, Err(TaskError::Exited(ExitReason::Other("bad input".into()))));
/// node.shutdown();
/// ```
///
/// # Panics
///
/// As [`spawn`].
pub fn spawn_unlinked<T, F>(f: F) -> Task<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    spawn_task(f, false)
}

fn spawn_task<T, F>(f: F, linked: bool) -> Task<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let owner = self_pid();
    let tag = make_ref();
    let opts = if linked {
        spawn_opts().link()
    } else {
        spawn_opts()
    };
    match opts.spawn_monitor(move || send(owner, TaskReply { tag, value: f() })) {
        Ok((pid, monitor)) => Task {
            pid,
            monitor,
            tag,
            linked,
            _t: PhantomData,
        },
        Err(e) => exit_self(ExitReason::Other(format!("spawn failed: {e}"))),
    }
}

impl<T: Send + 'static> Task<T> {
    /// The task's process.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Waits up to `timeout` for the value (Elixir's `Task.await`, the
    /// timeout as an error instead of an exit).
    ///
    /// # Errors
    ///
    /// [`TaskError::Exited`] if the task ended without a value,
    /// [`TaskError::Timeout`] if it did not answer in time (it is killed).
    ///
    /// ```
    /// use graft_otp::prelude::*;
    /// use graft_otp::task::{self, TaskError};
    /// use std::time::Duration;
    ///
    /// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
    /// let r = node.run(|| {
    ///     let slow = task::spawn(|| sleep(Duration::from_secs(60)));
    ///     slow.await_timeout(Duration::from_millis(10))
    /// }).unwrap();
    /// assert_eq!(r, Err(TaskError::Timeout));
    /// node.shutdown();
    /// ```
    pub fn await_timeout(mut self, timeout: Duration) -> Result<T, TaskError> {
        match self.wait(Some(timeout)) {
            Some(r) => r,
            None => {
                self.kill();
                Err(TaskError::Timeout)
            }
        }
    }

    /// Waits for the value with no time limit (`:infinity`).
    ///
    /// # Errors
    ///
    /// [`TaskError::Exited`].
    pub fn await_infinity(mut self) -> Result<T, TaskError> {
        match self.wait(None) {
            Some(r) => r,
            None => unreachable!("a wait without a deadline ended without a result"),
        }
    }

    /// Waits up to `timeout`; `None` if the task is still running (it
    /// goes on, and can be waited for again: Elixir's `Task.yield`).
    pub fn yield_timeout(&mut self, timeout: Duration) -> Option<Result<T, TaskError>> {
        let tag = self.tag;
        let m = self.monitor;
        let got = receive()
            .when(
                move |r: &TaskReply<T>| r.tag == tag,
                |r: TaskReply<T>| Ok(r.value),
            )
            .when(
                move |d: &ProcessDied| d.monitor == m,
                |d: ProcessDied| Err(TaskError::Exited(d.reason)),
            )
            .timeout(timeout)?;
        if got.is_ok() {
            demonitor_flush(m);
        }
        Some(got)
    }

    /// Stops the task (Elixir's `Task.shutdown(task, :brutal_kill)`),
    /// returning its value if it had already answered.
    pub fn shutdown(mut self) -> Option<T> {
        match self.wait(Some(Duration::ZERO)) {
            Some(Ok(v)) => Some(v),
            Some(Err(_)) => None,
            None => {
                self.kill();
                None
            }
        }
    }

    fn wait(&mut self, timeout: Option<Duration>) -> Option<Result<T, TaskError>> {
        match timeout {
            Some(t) => self.yield_timeout(t),
            None => {
                let tag = self.tag;
                let m = self.monitor;
                let got = receive()
                    .when(
                        move |r: &TaskReply<T>| r.tag == tag,
                        |r: TaskReply<T>| Ok(r.value),
                    )
                    .when(
                        move |d: &ProcessDied| d.monitor == m,
                        |d: ProcessDied| Err(TaskError::Exited(d.reason)),
                    )
                    .wait();
                if got.is_ok() {
                    demonitor_flush(m);
                }
                Some(got)
            }
        }
    }

    /// Kills the task without taking the owner down, and forgets it (its
    /// reply too, should it have slipped in).
    fn kill(&mut self) {
        if self.linked {
            unlink(self.pid);
        }
        exit(self.pid, ExitReason::Kill);
        demonitor_flush(self.monitor);
        let tag = self.tag;
        let _ = receive()
            .when(move |r: &TaskReply<T>| r.tag == tag, |_: TaskReply<T>| ())
            .timeout(Duration::ZERO);
    }
}

/// Waits for every task (Elixir's `Task.await_many`): the results in the
/// order of `tasks`, all within one `timeout` (the ones not done by then
/// are killed and give [`TaskError::Timeout`]).
///
/// ```
/// use graft_otp::prelude::*;
/// use graft_otp::task;
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let v = node.run(|| {
///     let tasks: Vec<_> = (0..4u32).map(|i| task::spawn(move || i * 2)).collect();
///     task::await_many(tasks, task::DEFAULT_TIMEOUT)
/// }).unwrap();
/// assert_eq!(v, [Ok(0), Ok(2), Ok(4), Ok(6)]);
/// node.shutdown();
/// ```
pub fn await_many<T: Send + 'static>(
    tasks: Vec<Task<T>>,
    timeout: Duration,
) -> Vec<Result<T, TaskError>> {
    let deadline = std::time::Instant::now() + timeout;
    tasks
        .into_iter()
        .map(|t| t.await_timeout(deadline.saturating_duration_since(std::time::Instant::now())))
        .collect()
}

/// `f` over `items` in tasks, at most `max_concurrency` at a time (at
/// least one), each given `timeout`; the results come in the order of the
/// items (Elixir's `Task.async_stream(items, f, max_concurrency: n,
/// timeout: t, on_timeout: :kill_task)`). Lazy: tasks start as the stream
/// is read.
///
/// # Panics
///
/// The iterator panics when read outside a graft process.
pub fn async_stream<I, T, R, F>(
    items: I,
    max_concurrency: usize,
    timeout: Duration,
    f: F,
) -> AsyncStream<I::IntoIter, R, F>
where
    I: IntoIterator<Item = T>,
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> R + Send + Sync + 'static,
{
    AsyncStream {
        items: items.into_iter(),
        f: Arc::new(f),
        running: VecDeque::new(),
        max: max_concurrency.max(1),
        timeout,
    }
}

/// The iterator [`async_stream`] returns: `Result<R, TaskError>` per item.
pub struct AsyncStream<I, R, F> {
    items: I,
    f: Arc<F>,
    running: VecDeque<Task<R>>,
    max: usize,
    timeout: Duration,
}

impl<I, R, F> fmt::Debug for AsyncStream<I, R, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncStream")
            .field("running", &self.running.len())
            .field("max", &self.max)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl<I, T, R, F> Iterator for AsyncStream<I, R, F>
where
    I: Iterator<Item = T>,
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> R + Send + Sync + 'static,
{
    type Item = Result<R, TaskError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.running.len() < self.max {
            let Some(item) = self.items.next() else { break };
            let f = self.f.clone();
            self.running.push_back(spawn_unlinked(move || f(item)));
        }
        let task = self.running.pop_front()?;
        let r = task.await_timeout(self.timeout);
        // Start the next one at once, so `max` stay busy while the caller
        // looks at this result.
        if let Some(item) = self.items.next() {
            let f = self.f.clone();
            self.running.push_back(spawn_unlinked(move || f(item)));
        }
        Some(r)
    }
}

impl<I, R, F> Drop for AsyncStream<I, R, F> {
    fn drop(&mut self) {
        for t in self.running.drain(..) {
            // Only a process can signal; a stream is only ever read in one.
            if graft::try_self_pid().is_some() {
                exit(t.pid, ExitReason::Kill);
                demonitor_flush(t.monitor);
            }
        }
    }
}

/// The one-shot body a [`TaskSupervisor`] child runs.
type Job = Arc<Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// A supervisor of tasks (Elixir's `Task.Supervisor`): a dynamic
/// supervisor of temporary children. Tasks started through it are its
/// children (so they are stopped with it, and listed by
/// [`supervisor::which_children`](crate::supervisor::which_children)).
///
/// ```
/// use graft_otp::prelude::*;
/// use graft_otp::task::{TaskError, TaskSupervisor};
/// use std::time::Duration;
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let got = node.run(|| {
///     let sup = TaskSupervisor::start().unwrap();
///     let ok = sup.async_task(|| 6 * 7).unwrap();
///     let bad = sup.async_nolink(|| -> u8 { panic!("oops") }).unwrap();
///     (ok.await_timeout(Duration::from_secs(5)), bad.await_timeout(Duration::from_secs(5)))
/// }).unwrap();
/// assert_eq!(got.0, Ok(42));
/// assert_eq!(got.1, Err(TaskError::Exited(ExitReason::Other("oops".into()))));
/// node.shutdown();
/// ```
#[derive(Debug, Clone)]
pub struct TaskSupervisor {
    handle: DynamicHandle<Job>,
}

impl TaskSupervisor {
    /// Starts a task supervisor linked to the caller.
    ///
    /// # Errors
    ///
    /// As [`DynamicSupervisor::start`].
    pub fn start() -> Result<TaskSupervisor, StartError> {
        Self::builder()
            .start()
            .map(|handle| TaskSupervisor { handle })
    }

    /// Starts one registered under `name`.
    ///
    /// # Errors
    ///
    /// As [`DynamicSupervisor::start`] ([`StartError::AlreadyStarted`]).
    pub fn start_named(name: &str) -> Result<TaskSupervisor, StartError> {
        Self::builder()
            .name(name)
            .start()
            .map(|handle| TaskSupervisor { handle })
    }

    fn builder() -> DynamicSupervisor<Job> {
        DynamicSupervisor::new(|job: Job| {
            let body = job.lock().unwrap_or_else(|e| e.into_inner()).take();
            Ok(spawn_link(move || {
                if let Some(body) = body {
                    body();
                }
            }))
        })
        .restart(Restart::Temporary)
    }

    /// The supervisor's pid.
    pub fn pid(&self) -> Pid {
        self.handle.pid()
    }

    /// Starts `f` as a child that nobody waits for (`start_child`).
    ///
    /// # Errors
    ///
    /// [`SupervisorError`] if the supervisor is gone.
    pub fn start_child<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<Pid, SupervisorError> {
        self.handle
            .start_child(Arc::new(Mutex::new(Some(Box::new(f)))))
    }

    /// Starts `f` as a child, linked to and monitored by the caller
    /// (`Task.Supervisor.async`).
    ///
    /// # Errors
    ///
    /// [`SupervisorError`] if the supervisor is gone.
    pub fn async_task<T, F>(&self, f: F) -> Result<Task<T>, SupervisorError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.supervised(f, true)
    }

    /// Starts `f` as a child monitored (not linked) by the caller
    /// (`Task.Supervisor.async_nolink`).
    ///
    /// # Errors
    ///
    /// [`SupervisorError`] if the supervisor is gone.
    pub fn async_nolink<T, F>(&self, f: F) -> Result<Task<T>, SupervisorError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.supervised(f, false)
    }

    fn supervised<T, F>(&self, f: F, linked: bool) -> Result<Task<T>, SupervisorError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let owner = self_pid();
        let tag = make_ref();
        let pid = self.start_child(move || {
            let TaskGo(go) = expect::<TaskGo>();
            debug_assert_eq!(go, tag);
            send(owner, TaskReply { tag, value: f() });
        })?;
        let monitor = monitor(pid);
        if linked {
            link(pid);
        }
        send(pid, TaskGo(tag));
        Ok(Task {
            pid,
            monitor,
            tag,
            linked,
            _t: PhantomData,
        })
    }

    /// The running tasks.
    ///
    /// # Errors
    ///
    /// [`CallError`] if the supervisor is gone.
    pub fn children(&self) -> Result<Vec<Pid>, CallError> {
        crate::supervisor::which_children(self.pid())
            .map(|c| c.into_iter().filter_map(|c| c.pid).collect())
    }
}
