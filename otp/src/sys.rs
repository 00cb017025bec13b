//! OTP's `sys` for graft's behaviours: look at and change a running
//! gen_server or supervisor, on this node or another.
//!
//! * [`get_state`]: the server's state as text. A server opts in by
//!   implementing [`GenServer::format_status`] (a `Debug` one returns
//!   [`debug`]`(self)`); otherwise only its type's name is shown.
//!   A supervisor shows its children.
//! * [`replace_state`]: runs a closure on the state, inside the server (this
//!   node's servers only: a closure cannot travel).
//! * [`replace_state_with`]: the same with a mobile function
//!   ([`MobileFn`]), on a server of any node; typed errors
//!   ([`ReplaceError`]) when the state is of another type, the function is
//!   not in the server's executable, or it panicked.
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
use graft::graph::{DecodeError, MobileFn, MobileFnOnce};
use graft::observe::{self, SysOp, SysReply, SysRequest};
use graft::{Error, Mobile, MonitorRef, Pid};
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
/// another node (see [`replace_state_with`]), or `f` panicked (the server goes on with its state as `f`
/// left it).
pub fn replace_state<S: GenServer>(
    server: Server<S>,
    f: impl FnOnce(&mut S) + Send + 'static,
) -> Result<String, Error> {
    if server.pid().node() != graft::this_node() {
        return Err(Error::Remote(
            "replace_state: a closure cannot travel to another node; use replace_state_with and a MobileFn".into(),
        ));
    }
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

/// Why [`replace_state_with`] did not replace a state.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReplaceError {
    /// The server's state is not the type the function is for.
    TypeMismatch {
        /// The function's state type.
        expected: String,
        /// The server's state type, where the server could tell.
        found: String,
    },
    /// The server's executable has no such mobile function (another build
    /// of the program, or forged bytes); nothing ran.
    NotRegistered(String),
    /// The function panicked; the state is as it was.
    Panicked(String),
    /// The sys call itself failed: `Error::Timeout` (not a behaviour, or
    /// busy), `Error::Exited` (not alive), `Error::Remote` (refused).
    Call(Error),
}

impl std::fmt::Display for ReplaceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplaceError::TypeMismatch { expected, found } => write!(
                f,
                "replace_state: the server's state is a {found}, the function takes a {expected}"
            ),
            ReplaceError::NotRegistered(why) => write!(
                f,
                "replace_state: the server's node cannot run the function: {why}"
            ),
            ReplaceError::Panicked(why) => write!(
                f,
                "replace_state: the function panicked ({why}); the state is unchanged"
            ),
            ReplaceError::Call(e) => write!(f, "replace_state: {e}"),
        }
    }
}

impl std::error::Error for ReplaceError {}

// Typed failures travel in the sys reply's text, behind these prefixes.
const TYPE: &str = "type:";
const CODE: &str = "code:";
const PANIC: &str = "panic:";

/// Runs the mobile function `f` on the state of `server`, on any node:
/// the server gives `f` its state and goes on with what `f` returns. The
/// state must be [`Mobile`] (`f` gets a copy of it, so that a panic in `f`
/// leaves the state as it was). Returns the new state as [`get_state`]
/// shows it.
///
/// ```
/// use graft_otp::prelude::*;
/// use graft::graph::MobileFn;
///
/// #[derive(Debug, Default, graft::Mobile)]
/// struct Counter { n: u64 }
/// impl GenServer for Counter {
///     type Call = ();
///     type Cast = ();
///     type Reply = u64;
///     fn handle_call(&mut self, _: (), _: &ReplyTo<u64>) -> CallResult<u64> {
///         CallResult::Reply(self.n)
///     }
///     fn handle_cast(&mut self, _: ()) -> Flow { Flow::Continue }
/// }
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     let c = gen_server::start(Counter::default()).unwrap();
///     let set = MobileFn::new(42u64, |n: &u64, mut s: Counter| { s.n = *n; s });
///     sys::replace_state_with(c, set).unwrap();
///     assert_eq!(c.call(()).unwrap(), 42);
/// }).unwrap();
/// node.shutdown();
/// ```
///
/// # Errors
///
/// [`ReplaceError`]: the state is of another type, the server's node
/// lacks the function, it panicked, or the call failed.
pub fn replace_state_with<S: GenServer + Mobile>(
    server: Server<S>,
    f: MobileFn<S, S>,
) -> Result<String, ReplaceError> {
    replace_state_encoded(server.pid(), encode_replacement(f).0)
}

/// The request [`replace_state_with`] sends, encoded, and its code id; for
/// tests of forged requests.
#[doc(hidden)]
pub fn encode_replacement<S: GenServer + Mobile>(f: MobileFn<S, S>) -> (Vec<u8>, u64) {
    // The server knows its state only as a `GenServer`; what needs `S:
    // Mobile` (the copy) is built here, into a mobile function the server
    // calls to get its replacer.
    let job: MobileFnOnce<Replacer> = MobileFnOnce::new(f, |f: MobileFn<S, S>| replacer::<S>(f));
    (graft::graph::encode(&job), job.code_id())
}

/// [`replace_state_with`] from the encoded function (a
/// `MobileFnOnce<Replacer>`); for tests of forged requests.
#[doc(hidden)]
pub fn replace_state_encoded(pid: Pid, job: Vec<u8>) -> Result<String, ReplaceError> {
    match observe::sys_call(pid, SysOp::ReplaceWith(job), TIMEOUT) {
        Ok(s) => Ok(s),
        Err(Error::Remote(why)) => Err(if let Some(w) = why.strip_prefix(TYPE) {
            let (expected, found) = w.split_once('\n').unwrap_or((w, "?"));
            ReplaceError::TypeMismatch {
                expected: expected.to_string(),
                found: found.to_string(),
            }
        } else if let Some(w) = why.strip_prefix(CODE) {
            ReplaceError::NotRegistered(w.to_string())
        } else if let Some(w) = why.strip_prefix(PANIC) {
            ReplaceError::Panicked(w.to_string())
        } else {
            ReplaceError::Call(Error::Remote(why))
        }),
        Err(e) => Err(ReplaceError::Call(e)),
    }
}

/// The server side of [`replace_state_with`] for state type `S`.
fn replacer<S: GenServer + Mobile>(f: MobileFn<S, S>) -> Replacer {
    Box::new(move |any: &mut dyn Any| {
        let Some(s) = any.downcast_mut::<S>() else {
            return Err(format!("{TYPE}{}", std::any::type_name::<S>()));
        };
        let copy: S = graft::graph::decode(&graft::graph::encode(&*s))
            .map_err(|e| format!("the state does not copy: {e}"))?;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.call(copy))) {
            Ok(new) => {
                *s = new;
                Ok(())
            }
            Err(p) => Err(format!("{PANIC}{}", panic_text(&*p))),
        }
    })
}

fn panic_text(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
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
        SysOp::ReplaceWith(ref bytes) => {
            let r = match graft::graph::decode::<MobileFnOnce<Replacer>>(bytes) {
                Ok(job) => {
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.call())) {
                        Ok(f) => match f(server as &mut dyn Any) {
                            Ok(()) => Ok(state_of(server)),
                            Err(e) if e.starts_with(TYPE) => {
                                Err(format!("{e}\n{}", std::any::type_name::<S>()))
                            }
                            Err(e) => Err(e),
                        },
                        Err(p) => Err(format!("{PANIC}{}", panic_text(&*p))),
                    }
                }
                Err(e @ DecodeError::NotRegistered { .. }) => Err(format!("{CODE}{e}")),
                Err(e) => Err(format!("the replacement does not decode: {e}")),
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
