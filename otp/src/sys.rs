//! OTP's `sys` for graft's behaviours: look at and change a running
//! gen_server or supervisor, on this node or another.
//!
//! * [`get_state`]: the server's state as text. A server opts in by
//!   implementing [`GenServer::format_status`] (a `Debug` one returns
//!   [`debug`]`(self)`); otherwise only its type's name is shown.
//!   A supervisor shows its children.
//! * [`replace_state`]: runs a closure on the state, inside the server (this
//!   node's servers only: a closure cannot travel).
//! * [`suspend`] / [`resume`]: while suspended the server answers sys
//!   requests only; other messages wait in its mailbox.
//! * [`trace`]: logs every message the process takes and sends (target
//!   `graft::trace`, shown by the default logger).
//! * [`statistics`]: its run count, run time, mailbox, stack.
//!
//! ```
//! use graft_otp::prelude::*;
//!
//! #[derive(Debug, Default)]
//! struct Counter { n: u64 }
//! impl GenServer for Counter {
//!     type Call = ();
//!     type Cast = u64;
//!     type Reply = u64;
//!     fn handle_call(&mut self, _: (), _: &ReplyTo<u64>) -> CallResult<u64> {
//!         CallResult::Reply(self.n)
//!     }
//!     fn handle_cast(&mut self, k: u64) -> Flow { self.n += k; Flow::Continue }
//!     fn format_status(&self) -> Option<String> { sys::debug(self) }
//! }
//!
//! let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
//! node.run(|| {
//!     let c = gen_server::start(Counter::default()).unwrap();
//!     c.cast(5);
//!     assert!(sys::get_state(c.pid()).unwrap().contains("n: 5"));
//!     sys::replace_state(c, |s: &mut Counter| s.n = 42).unwrap();
//!     assert_eq!(c.call(()).unwrap(), 42);
//! }).unwrap();
//! node.shutdown();
//! ```
//!
//! The protocol ([`graft::observe::SysRequest`]) lives in graft,
//! so that the web observer can ask too.
//!
//! [`GenServer::format_status`]: crate::gen_server::GenServer::format_status

use crate::gen_server::{GenServer, Server};
use graft::observe::{self, SysOp, SysReply, SysRequest};
use graft::{Error, MonitorRef, Pid};
use std::any::Any;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// How long the calls here wait for an answer.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// A state replacement waiting for its server (by request tag).
type Replacer = Box<dyn FnOnce(&mut dyn Any) -> Result<(), String> + Send>;

fn replacers() -> &'static Mutex<HashMap<MonitorRef, Replacer>> {
    static R: std::sync::OnceLock<Mutex<HashMap<MonitorRef, Replacer>>> =
        std::sync::OnceLock::new();
    R.get_or_init(Default::default)
}

/// `Some(format!("{t:#?}"))`: a `Debug` server's
/// [`format_status`](crate::gen_server::GenServer::format_status).
pub fn debug<T: std::fmt::Debug + ?Sized>(t: &T) -> Option<String> {
    Some(format!("{t:#?}"))
}

/// The state of the gen_server or supervisor `pid` (on any node), as text.
///
/// # Errors
///
/// `Error::Timeout` if it does not answer within [`TIMEOUT`] (not a
/// behaviour, or busy); `Error::Exited` if it is not alive.
pub fn get_state(pid: Pid) -> Result<String, Error> {
    observe::sys_call(pid, SysOp::GetState, TIMEOUT)
}

/// Runs `f` on the state of `server` (a process of this node), inside the
/// server, between two messages. Returns the new state as
/// [`get_state`] shows it.
///
/// # Errors
///
/// As [`get_state`]; `Error::Remote` if the server is of another type or on
/// another node, or `f` panicked (the server goes on with its state as `f`
/// left it).
pub fn replace_state<S: GenServer>(
    server: Server<S>,
    f: impl FnOnce(&mut S) + Send + 'static,
) -> Result<String, Error> {
    let tag = graft::make_ref();
    let boxed: Replacer = Box::new(move |any: &mut dyn Any| match any.downcast_mut::<S>() {
        Some(s) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(s)))
            .map_err(|_| "the replacement panicked".to_string()),
        None => Err(format!(
            "the server's state is not a {}",
            std::any::type_name::<S>()
        )),
    });
    replacers().lock().expect("replacers").insert(tag, boxed);
    let r = observe::sys_call_tagged(server.pid(), SysOp::Replace, tag, TIMEOUT);
    replacers().lock().expect("replacers").remove(&tag);
    r
}

/// Suspends the behaviour `pid`: it answers sys requests only until
/// [`resume`].
///
/// # Errors
///
/// As [`get_state`].
pub fn suspend(pid: Pid) -> Result<(), Error> {
    observe::sys_call(pid, SysOp::Suspend, TIMEOUT).map(drop)
}

/// Resumes a suspended behaviour.
///
/// # Errors
///
/// As [`get_state`].
pub fn resume(pid: Pid) -> Result<(), Error> {
    observe::sys_call(pid, SysOp::Resume, TIMEOUT).map(drop)
}

/// Turns message tracing of `pid` (any process, on any node) on or off;
/// see [`graft::observe::trace`]. `Ok(false)` if it is not alive.
///
/// # Errors
///
/// For a remote pid, as [`graft::call_on`].
pub fn trace(pid: Pid, on: bool) -> Result<bool, Error> {
    if pid.node() == graft::this_node() {
        return Ok(observe::trace(pid, on));
    }
    graft::call_on(pid.node(), (pid, on), |(pid, on)| observe::trace(pid, on))
}

/// What [`statistics`] tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statistics {
    /// Times it ran (graft's reductions).
    pub runs: u64,
    /// Time it ran, in nanoseconds.
    pub run_time_ns: u64,
    /// Messages waiting.
    pub mailbox_len: usize,
    /// Stack bytes at its deepest.
    pub stack_high_water: u64,
}

/// The run statistics of `pid` (any process, on any node); `Ok(None)` if
/// it is not alive.
///
/// # Errors
///
/// For a remote pid, as [`graft::call_on`].
pub fn statistics(pid: Pid) -> Result<Option<Statistics>, Error> {
    Ok(observe::process_info_full(pid)?.map(|i| Statistics {
        runs: i.runs,
        run_time_ns: i.run_time_ns,
        mailbox_len: i.mailbox_len,
        stack_high_water: i.stack_high_water,
    }))
}

/// The server loop starts: label the process with the server's type (its
/// initial call), unless its init gave it a label already.
pub(crate) fn enter<S: GenServer>() {
    observe::default_initial_call(|| format!("gen_server {}", std::any::type_name::<S>()));
}

/// A supervisor's state as text: its strategy and each child's id, pid
/// and kind, one a line (`id <pid> worker`; the observer reads them).
pub(crate) fn supervisor_status<'a>(
    strategy: crate::supervisor::Strategy,
    children: impl Iterator<Item = (&'a str, Option<Pid>, crate::supervisor::ChildKind)>,
) -> Option<String> {
    use std::fmt::Write as _;
    let mut s = format!("supervisor {strategy:?}\n");
    for (id, pid, kind) in children {
        let pid = pid.map_or_else(|| "(not running)".to_string(), |p| p.to_string());
        let _ = writeln!(s, "  child {id:?} {pid} {kind:?}");
    }
    Some(s)
}

fn answer(req: &SysRequest, result: Result<String, String>) {
    graft::send(
        req.from,
        SysReply {
            tag: req.tag,
            result,
        },
    );
}

fn state_of<S: GenServer>(server: &S) -> String {
    server.format_status().unwrap_or_else(|| {
        format!(
            "<{}: implement GenServer::format_status to show it>",
            std::any::type_name::<S>()
        )
    })
}

/// One sys request, in the server loop of `server` (the gen_server's hook).
pub(crate) fn handle<S: GenServer>(server: &mut S, req: SysRequest) {
    log::debug!(target: "graft_otp::sys", "{}: sys {:?}", graft::self_pid(), req.op);
    match req.op {
        SysOp::GetState => answer(&req, Ok(state_of(server))),
        SysOp::Replace => {
            // Only from this node (several nodes may share an OS process,
            // and the map with it).
            let f = if req.from.node() == graft::this_node() {
                replacers().lock().expect("replacers").remove(&req.tag)
            } else {
                None
            };
            let r = match f {
                Some(f) => f(server as &mut dyn Any).map(|()| state_of(server)),
                None => Err("no replacement (replace_state works on this node only)".into()),
            };
            answer(&req, r);
        }
        SysOp::Resume => answer(&req, Ok("ok".into())),
        SysOp::Suspend => {
            answer(&req, Ok("ok".into()));
            log::info!(target: "graft_otp::sys", "{} suspended", graft::self_pid());
            loop {
                let r = graft::expect::<SysRequest>();
                match r.op {
                    SysOp::Resume => {
                        answer(&r, Ok("ok".into()));
                        break;
                    }
                    SysOp::Suspend => answer(&r, Ok("ok".into())),
                    _ => handle(server, r),
                }
            }
            log::info!(target: "graft_otp::sys", "{} resumed", graft::self_pid());
        }
    }
}
