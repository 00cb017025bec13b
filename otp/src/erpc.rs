//! `erpc`: run a function on other nodes and get its result (OTP's `erpc`:
//! `call`, `cast`, `multicall`), built on remote spawn of mobile functions.
//!
//! # The protocol
//!
//! A call is a process spawned on the target node ([`graft::spawn_on`])
//! whose body is a [`MobileFnOnce`] returning
//! its value encoded. The body runs the function and sends the caller one
//! `ErpcAnswer { tag, value }`: the encoded value, or the reason it
//! panicked; then it ends. The caller's side monitors the remote process,
//! so a node lost mid-call (`NoConnection`) or a process killed there is
//! seen too; the answer always arrives before the `ProcessDied` (messages
//! from one process keep their order).
//!
//! Each call runs in a short-lived local **helper** process, so that the
//! caller's timeout holds even while the spawn request itself waits for a
//! slow node, and so that [`multicall`] runs all its calls at once. The
//! caller waits until one deadline for the helpers' results; on a timeout
//! it tells each unfinished helper to give up, and the helper kills the
//! remote process (as OTP's erpc does) and drops any late answer. Nothing
//! of a timed-out call ever reaches the caller's mailbox.
//!
//! What comes back is a `Result<R, `[`ErpcError`]`>` per call: the value,
//! or [`ErpcError::Timeout`], [`ErpcError::NoConnection`],
//! [`ErpcError::Exception`] (the function panicked, or its process was
//! ended, with this reason), [`ErpcError::Refused`] (the node would not
//! run it: another build without this function, a resource limit), or
//! [`ErpcError::Decode`].
//!
//! # Examples
//!
//! ```
//! use graft_otp::prelude::*;
//! use graft_otp::erpc;
//! use std::time::Duration;
//!
//! let a = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
//! let b = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
//! let b_id = a.connect(b.addr()).unwrap();
//! let got = a.run(move || {
//!     let one = erpc::call(b_id, 20u64, |n| (1..=n).sum::<u64>(), Duration::from_secs(5));
//!     let all = erpc::multicall(&[this_node(), b_id], (), |()| this_node(), Duration::from_secs(5));
//!     (one, all)
//! }).unwrap();
//! assert_eq!(got.0, Ok(210));
//! assert_eq!(got.1, [Ok(a.id()), Ok(b_id)]);
//! ```

use graft::graph::{Encoded, MobileFnOnce};
use graft::{
    demonitor_flush, exit, make_ref, monitor, receive, self_pid, send, spawn, spawn_on, Error,
    ExitReason, Mobile, MonitorRef, NodeId, Pid, ProcessDied,
};
use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why a remote call gave no value (OTP's `{erpc, Reason}` and
/// `{exception, ...}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErpcError {
    /// No answer before the deadline (the remote process is killed).
    Timeout,
    /// The node is not connected, or was lost during the call.
    NoConnection,
    /// The function panicked (`Other(message)`) or its process was ended
    /// with this reason.
    Exception(ExitReason),
    /// The node would not run the function (the runtime's reason).
    Refused(String),
    /// The answer did not decode as the expected type.
    Decode(String),
}

impl fmt::Display for ErpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErpcError::Timeout => f.write_str("erpc: timeout"),
            ErpcError::NoConnection => f.write_str("erpc: noconnection"),
            ErpcError::Exception(r) => write!(f, "erpc: the call raised: {r}"),
            ErpcError::Refused(why) => write!(f, "erpc: refused: {why}"),
            ErpcError::Decode(why) => write!(f, "erpc: bad answer: {why}"),
        }
    }
}

impl std::error::Error for ErpcError {}

/// The remote body's answer.
#[derive(Debug, Mobile)]
struct ErpcAnswer {
    tag: MonitorRef,
    value: Result<Encoded, ExitReason>,
}

/// A helper's result for call number `index` of the request `tag`.
struct HelperResult {
    tag: MonitorRef,
    index: usize,
    result: Result<Encoded, ErpcError>,
}
impl graft::Message for HelperResult {}

/// Lets helpers report to a caller only while it still waits: a helper
/// sends while holding the lock and only if the gate is open; the caller
/// closes it (under the same lock) when it stops waiting, then drops what
/// got in before. So no late result ever lands in the caller's mailbox.
#[derive(Debug, Default)]
pub(crate) struct Gate(Mutex<bool>);

impl Gate {
    pub(crate) fn open() -> Arc<Gate> {
        Arc::new(Gate(Mutex::new(true)))
    }

    /// Runs `send` (which must not yield: a local send) if still open.
    pub(crate) fn send_if_open(&self, send: impl FnOnce()) {
        let open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if *open {
            send();
        }
    }

    pub(crate) fn close(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = false;
    }
}

/// The caller gave up on the request `tag`.
struct GiveUp(MonitorRef);
impl graft::Message for GiveUp {}

/// Calls `f(env)` on `node` (this node included) and waits up to `timeout`
/// for its value (OTP's `erpc:call/4`).
///
/// # Errors
///
/// See [`ErpcError`].
///
/// # Panics
///
/// Outside a graft process.
pub fn call<E, R, F>(node: NodeId, env: E, f: F, timeout: Duration) -> Result<R, ErpcError>
where
    E: Mobile,
    R: Mobile,
    F: FnOnce(E) -> R + Copy + Send + Sync + 'static,
{
    let tag = make_ref();
    let gate = Gate::open();
    let helper = start_helper(
        self_pid(),
        (tag, gate.clone()),
        0,
        node,
        MobileFnOnce::returning(env, f),
    );
    let mut got = collect(tag, &gate, &[helper], Instant::now() + timeout);
    decode(got.pop().unwrap_or(Err(ErpcError::Timeout)))
}

/// Calls `f(env)` on every node of `nodes` at once and waits until
/// `timeout` for all of them (OTP's `erpc:multicall/4`): one result per
/// node, in the order of `nodes`.
///
/// # Panics
///
/// Outside a graft process.
///
/// ```
/// use graft_otp::prelude::*;
/// use graft_otp::erpc::{self, ErpcError};
/// use std::time::Duration;
///
/// let a = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let r = a.run(|| {
///     // A node that was never connected.
///     erpc::multicall(&[this_node(), NodeId(7)], 2u32, |n| n + 1, Duration::from_secs(5))
/// }).unwrap();
/// assert_eq!(r, [Ok(3), Err(ErpcError::NoConnection)]);
/// ```
pub fn multicall<E, R, F>(
    nodes: &[NodeId],
    env: E,
    f: F,
    timeout: Duration,
) -> Vec<Result<R, ErpcError>>
where
    E: Mobile + Clone,
    R: Mobile,
    F: FnOnce(E) -> R + Copy + Send + Sync + 'static,
{
    let deadline = Instant::now() + timeout;
    let me = self_pid();
    let tag = make_ref();
    let gate = Gate::open();
    let helpers: Vec<Pid> = nodes
        .iter()
        .enumerate()
        .map(|(i, &node)| {
            let f = MobileFnOnce::returning(env.clone(), f);
            start_helper(me, (tag, gate.clone()), i, node, f)
        })
        .collect();
    collect(tag, &gate, &helpers, deadline)
        .into_iter()
        .map(decode)
        .collect()
}

/// Runs `f(env)` on `node` without waiting for anything (OTP's
/// `erpc:cast/4`): errors (no connection, a refusal, a panic there) are
/// only logged.
///
/// # Panics
///
/// Outside a graft process.
///
/// ```
/// use graft_otp::prelude::*;
/// use graft_otp::erpc;
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let v = node.run(|| {
///     erpc::cast(this_node(), self_pid(), |to| send(to, 99u8));
///     expect::<u8>()
/// }).unwrap();
/// assert_eq!(v, 99);
/// ```
pub fn cast<E, F>(node: NodeId, env: E, f: F)
where
    E: Mobile,
    F: FnOnce(E) + Copy + Send + Sync + 'static,
{
    spawn(move || {
        if let Err(e) = spawn_on(node, env, f) {
            log::warn!("erpc: cast to {node} failed: {e}");
        }
    });
}

fn decode<R: Mobile>(r: Result<Encoded, ErpcError>) -> Result<R, ErpcError> {
    r.and_then(|e| {
        e.decode::<R>()
            .map_err(|e| ErpcError::Decode(e.to_string()))
    })
}

/// Waits until `deadline` for the results of `helpers` (index order);
/// tells the unfinished ones to give up.
fn collect(
    tag: MonitorRef,
    gate: &Gate,
    helpers: &[Pid],
    deadline: Instant,
) -> Vec<Result<Encoded, ErpcError>> {
    let mut out: Vec<Option<Result<Encoded, ErpcError>>> = helpers.iter().map(|_| None).collect();
    let mut left = helpers.len();
    while left > 0 {
        let Some(r) = receive()
            .when(move |r: &HelperResult| r.tag == tag, |r: HelperResult| r)
            .deadline(deadline)
        else {
            break;
        };
        if let Some(slot) = out.get_mut(r.index) {
            if slot.is_none() {
                left -= 1;
            }
            *slot = Some(r.result);
        }
    }
    gate.close();
    for (slot, &helper) in out.iter().zip(helpers) {
        if slot.is_none() {
            send(helper, GiveUp(tag));
        }
    }
    // A result sent before the gate closed is dropped here.
    while receive()
        .when(move |r: &HelperResult| r.tag == tag, |_: HelperResult| ())
        .timeout(Duration::ZERO)
        .is_some()
    {}
    out.into_iter()
        .map(|r| r.unwrap_or(Err(ErpcError::Timeout)))
        .collect()
}

/// The text of a panic payload, or the reason the process ended itself;
/// `None` for the runtime's own unwind of an exit signal.
fn panic_reason(payload: &(dyn std::any::Any + Send)) -> Option<ExitReason> {
    if let Some(r) = graft::self_exit_reason(payload) {
        Some(r)
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        Some(ExitReason::Other((*s).to_string()))
    } else {
        payload
            .downcast_ref::<String>()
            .map(|s| ExitReason::Other(s.clone()))
    }
}

/// The remote body: run, answer, end.
fn remote_body((caller, tag, f): (Pid, MonitorRef, MobileFnOnce<Encoded>)) {
    match catch_unwind(AssertUnwindSafe(|| f.call())) {
        Ok(v) => send(caller, ErpcAnswer { tag, value: Ok(v) }),
        Err(payload) => {
            if let Some(reason) = panic_reason(&*payload) {
                send(
                    caller,
                    ErpcAnswer {
                        tag,
                        value: Err(reason),
                    },
                );
            }
            resume_unwind(payload);
        }
    }
}

/// Starts the local helper that runs call `index` of `tag` on `node` and
/// reports to `caller`.
fn start_helper(
    caller: Pid,
    (tag, gate): (MonitorRef, Arc<Gate>),
    index: usize,
    node: NodeId,
    f: MobileFnOnce<Encoded>,
) -> Pid {
    spawn(move || {
        let answer_tag = make_ref();
        let me = self_pid();
        let result = match spawn_on(node, (me, answer_tag, f), remote_body) {
            Err(Error::NoConnection(_)) => Err(ErpcError::NoConnection),
            Err(Error::Timeout) => Err(ErpcError::Timeout),
            Err(e) => Err(ErpcError::Refused(e.to_string())),
            Ok(pid) => {
                let m = monitor(pid);
                enum Got {
                    Answer(Result<Encoded, ExitReason>),
                    Died(ExitReason),
                    GaveUp,
                }
                let got = receive()
                    .when(
                        move |a: &ErpcAnswer| a.tag == answer_tag,
                        |a: ErpcAnswer| Got::Answer(a.value),
                    )
                    .when(
                        move |d: &ProcessDied| d.monitor == m,
                        |d: ProcessDied| Got::Died(d.reason),
                    )
                    .when(move |g: &GiveUp| g.0 == tag, |_: GiveUp| Got::GaveUp)
                    .wait();
                demonitor_flush(m);
                match got {
                    Got::Answer(Ok(v)) => Ok(v),
                    Got::Answer(Err(reason)) => Err(ErpcError::Exception(reason)),
                    Got::Died(ExitReason::NoConnection) => Err(ErpcError::NoConnection),
                    Got::Died(reason) => Err(ErpcError::Exception(reason)),
                    Got::GaveUp => {
                        exit(pid, ExitReason::Kill);
                        return;
                    }
                }
            }
        };
        gate.send_if_open(|| send(caller, HelperResult { tag, index, result }));
    })
}
