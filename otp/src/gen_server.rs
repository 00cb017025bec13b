//! `gen_server`: a process that serves synchronous calls and asynchronous
//! casts against a piece of state, with OTP's start, stop and crash rules.
//!
//! # The protocol
//!
//! A server is an ordinary graft process running [`run`]'s loop. It receives
//! three kinds of mail:
//!
//! * a call envelope (the request, the caller, its tag): handled by
//!   [`GenServer::handle_call`]; the answer goes back as a `Reply { tag,
//!   value }` message to the caller. Every server takes the same envelope
//!   type, so a server that finds a request of another type in it answers
//!   at once with [`CallError::TypeMismatch`] (a request from another node
//!   is checked by its type descriptor, before decoding);
//! * a cast envelope, and a stop request;
//! * anything else: [`GenServer::handle_info`] gets it as an [`Unknown`];
//!   except an [`ExitSignal`] from the parent (the process that started the
//!   server, when the server traps exits), which stops the server with the
//!   signal's reason, running [`GenServer::terminate`] (OTP's rule; this is
//!   how a supervisor's `Shutdown` reaches `terminate`).
//!
//! A call (see [`Server::call_timeout`]) is OTP's: the caller **monitors**
//! the server and uses the monitor reference as the call's tag, sends the
//! request, then waits (selective receive) for either the `Reply` carrying
//! the tag or the `ProcessDied` of the monitor, and finally removes the
//! monitor with `demonitor_flush_after`. The caller takes a mailbox
//! [`mark`] before it makes the monitor, and every wait of the
//! call skips the mail that was queued before the mark (Erlang's ref
//! trick): a call costs the same whatever waits in the caller's mailbox. So a call to a dead server fails with
//! [`CallError::NoProc`], a server dying mid-call with
//! [`CallError::Exited`], a lost node with [`CallError::NoConnection`], and
//! nothing hangs past the timeout.
//!
//! The call protocol itself (guard, reply handle, local wait, remote
//! request) lives in `call.rs`, shared with gen_statem.
//!
//! ## No late replies
//!
//! OTP ≥ 24 sends the reply to an *alias* of the caller that the caller
//! deactivates when it gives up, so the runtime drops a late reply. A remote
//! call does exactly that (below); a local call uses a cheaper local
//! equivalent (a server that finds a request of other types must be able to
//! refuse it at once, which a typed alias reply cannot carry): every calling process owns one `CallGuard` (kept in process
//! local storage, made once per process, shared through an `Arc`) holding
//! the tag of the one call it is waiting for. A [`ReplyTo`] carries the guard;
//! replying takes the guard's lock, sends only if the tag is still the
//! active one, and clears it (one reply per call). The caller clears the tag (under the same lock) when it stops
//! waiting, then polls its mailbox once for a reply that got in before that
//! (a local send has landed in the mailbox by the time it returns), exactly
//! as OTP's `gen:call` does after `unalias`. A reply therefore either reaches
//! the caller while it waits, or is dropped by the replier: it never sits in
//! the caller's mailbox as a stray message, and a second reply through a
//! cloned [`ReplyTo`] is dropped too.
//!
//! Rejected: a reply proxy process per call (a spawn per call, several times
//! the cost of the call itself); dropping stale tagged replies when the
//! caller next receives (needs a hook in every receive of the caller,
//! including user code, and the replies would sit in the mailbox meanwhile).
//! When calls cross nodes, the guard becomes the runtime's alias: a remote
//! call is [`graft::send_request`] / [`graft::receive_response`], one
//! request frame carrying the monitor and one reply frame through a
//! one-shot alias, and a late reply is dropped at the alias on the caller's
//! node.

use crate::call::{self, Caller, RemoteFail, RemoteReply};
use graft::{
    demonitor_flush_after, exit_self, mark, receive, register, send, unlink, whereis, Alias, Error,
    ExitReason, ExitSignal, Message, MonitorRef, NodeId, Pid, ProcessDied, SpawnOpts, Unknown,
};
use std::any::{Any, TypeId};
use std::fmt;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// `multi_call` and `abcast` over a set of nodes (OTP's
/// `gen_server:multi_call/4` and `abcast/3`), from [`gen_server_multi`](crate::gen_server_multi).
pub use crate::gen_server_multi::{abcast, multi_call};

/// How long [`Server::call`] waits for a reply (OTP's default, 5 s).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The pid of the running process, or a panic naming the gen_server call
/// the user made outside a process.
#[inline]
pub(crate) fn me(call: &'static str) -> Pid {
    match graft::try_self_pid() {
        Some(p) => p,
        None => outside_process(call),
    }
}

#[cold]
#[inline(never)]
fn outside_process(call: &'static str) -> ! {
    panic!("graft-otp: {call} called outside a graft process (use Node::run, spawn, or graft_otp::application)")
}

/// The messages a server takes: what a client needs to know to talk to it,
/// and nothing more.
///
/// Every [`GenServer`] is a `Protocol` (with its own `Call`, `Cast` and
/// `Reply`). A client that does not have the server's code names the
/// protocol instead, with a marker type of its own (or one a shared crate
/// defines), and gets a typed [`Server`] handle without any server impl:
///
/// ```
/// use graft_otp::prelude::*;
///
/// /// What the "kv" server takes (shared by the server and its clients).
/// struct KvProtocol;
/// impl Protocol for KvProtocol {
///     type Call = String;          // get
///     type Cast = (String, String); // put
///     type Reply = Option<String>;
/// }
///
/// # #[derive(Default)] struct Kv(std::collections::HashMap<String, String>);
/// # impl GenServer for Kv {
/// #     type Call = String; type Cast = (String, String); type Reply = Option<String>;
/// #     fn handle_call(&mut self, k: String, _: &ReplyTo<Option<String>>) -> CallResult<Option<String>> {
/// #         CallResult::Reply(self.0.get(&k).cloned())
/// #     }
/// #     fn handle_cast(&mut self, (k, v): (String, String)) -> Flow { self.0.insert(k, v); Flow::Continue }
/// # }
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let got = node.run(|| {
///     gen_server::start_named("kv", Kv::default()).unwrap();
///     // The client side names only the protocol.
///     let kv = Server::<KvProtocol>::at("kv").unwrap();
///     kv.cast(("a".into(), "1".into()));
///     kv.call("a".into()).unwrap()
/// }).unwrap();
/// assert_eq!(got.as_deref(), Some("1"));
/// node.shutdown();
/// ```
///
/// A call whose types do not match the server's fails at once with
/// [`CallError::TypeMismatch`], on this node and across nodes.
pub trait Protocol: 'static {
    /// Requests that expect a reply.
    type Call: Message;
    /// Requests that do not.
    type Cast: Message;
    /// The answer to a `Call`.
    type Reply: Message;
}

impl<S: GenServer> Protocol for S {
    type Call = S::Call;
    type Cast = S::Cast;
    type Reply = S::Reply;
}

/// The argument of a [`GenServer::handle_continue`] (OTP's
/// `{continue, Arg}`): any value, taken back with
/// [`downcast`](Continue::downcast).
pub struct Continue(Box<dyn Any + Send>);

impl Continue {
    /// Wraps `arg`.
    pub fn new<T: Send + 'static>(arg: T) -> Continue {
        Continue(Box::new(arg))
    }

    /// The argument as a `T`, or `self` back.
    ///
    /// # Errors
    ///
    /// `Err(self)` when the argument is not a `T`.
    pub fn downcast<T: 'static>(self) -> Result<T, Continue> {
        self.0.downcast::<T>().map(|b| *b).map_err(Continue)
    }

    /// `true` if the argument is a `T`.
    pub fn is<T: 'static>(&self) -> bool {
        self.0.is::<T>()
    }
}

impl fmt::Debug for Continue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Continue(..)")
    }
}

/// The continuation asked for by the callback running now.
#[derive(Debug)]
struct PendingContinue(Continue);

/// How many processes have a continuation waiting: lets the loop skip the
/// process-local lookup after each callback when nobody uses continues.
static PENDING_CONTINUES: AtomicUsize = AtomicUsize::new(0);

/// Asks that [`GenServer::handle_continue`]`(Continue::new(arg))` run as
/// soon as the callback running now returns, before any other message is
/// handled (OTP's `{continue, Arg}` in a callback's result). Call it from
/// [`GenServer::init`] (OTP's `{ok, State, {continue, Arg}}`: `start`
/// returns, then the continuation runs first), `handle_call`,
/// `handle_cast`, `handle_info` or `handle_continue` itself. A second call
/// in one callback replaces the first.
///
/// ```
/// use graft_otp::prelude::*;
///
/// #[derive(Default)]
/// struct Cache(Vec<u32>);
/// impl GenServer for Cache {
///     type Call = ();
///     type Cast = ();
///     type Reply = usize;
///     fn init(&mut self) -> Result<(), ExitReason> {
///         gen_server::continue_with("warm up"); // start returns at once
///         Ok(())
///     }
///     fn handle_continue(&mut self, _: Continue) -> Flow {
///         self.0 = (0..100).collect(); // the slow part
///         Flow::Continue
///     }
///     fn handle_call(&mut self, _: (), _: &ReplyTo<usize>) -> CallResult<usize> {
///         CallResult::Reply(self.0.len())
///     }
/// }
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let n = node.run(|| gen_server::start(Cache::default()).unwrap().call(()).unwrap()).unwrap();
/// assert_eq!(n, 100); // the continuation ran before the call
/// node.shutdown();
/// ```
///
/// # Panics
///
/// Outside a graft process.
pub fn continue_with<T: Send + 'static>(arg: T) {
    me("gen_server::continue_with");
    if graft::local::take::<PendingContinue>().is_none() {
        PENDING_CONTINUES.fetch_add(1, Ordering::Relaxed);
    }
    graft::local::set(PendingContinue(Continue::new(arg)));
}

/// The continuation the last callback asked for, if any.
#[inline]
fn take_continue() -> Option<Continue> {
    if PENDING_CONTINUES.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let c = graft::local::take::<PendingContinue>()?;
    PENDING_CONTINUES.fetch_sub(1, Ordering::Relaxed);
    Some(c.0)
}

/// The callbacks of a server; the server's state is `self`.
///
/// Messages are typed: [`Call`](GenServer::Call) requests are answered with a
/// [`Reply`](GenServer::Reply), [`Cast`](GenServer::Cast) messages are not
/// answered, and any other message goes to
/// [`handle_info`](GenServer::handle_info).
///
/// A panic in any callback stops the server with
/// `ExitReason::Other(panic message)` (after calling `terminate`).
///
/// # Examples
///
/// ```
/// use graft_otp::prelude::*;
///
/// #[derive(Default)]
/// struct Counter(u64);
///
/// impl GenServer for Counter {
///     type Call = ();
///     type Cast = u64;
///     type Reply = u64;
///     fn handle_call(&mut self, _: (), _from: &ReplyTo<u64>) -> CallResult<u64> {
///         CallResult::Reply(self.0)
///     }
///     fn handle_cast(&mut self, n: u64) -> Flow {
///         self.0 += n;
///         Flow::Continue
///     }
/// }
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let n = node.run(|| {
///     let counter = gen_server::start(Counter::default()).unwrap();
///     counter.cast(2);
///     counter.cast(3);
///     counter.call(()).unwrap()
/// }).unwrap();
/// assert_eq!(n, 5);
/// node.shutdown();
/// ```
pub trait GenServer: Send + 'static {
    /// Requests that expect a reply.
    type Call: Message;
    /// Requests that do not.
    type Cast: Message;
    /// The answer to a [`Call`](GenServer::Call).
    type Reply: Message;

    /// Runs in the new process before [`start`] returns. An `Err` (or a
    /// panic) makes `start` fail with [`StartError::Init`] and the process
    /// exit with that reason. Call [`graft::trap_exits`]`(true)` here to have
    /// `terminate` run when the parent (a supervisor) shuts the server down.
    ///
    /// # Errors
    ///
    /// The reason the server cannot start.
    fn init(&mut self) -> Result<(), ExitReason> {
        Ok(())
    }

    /// Handles a call. Return [`CallResult::Reply`] to answer now, or keep a
    /// clone of `from` and return [`CallResult::NoReply`] to answer later
    /// (from this or any other process) with [`ReplyTo::reply`].
    fn handle_call(
        &mut self,
        req: Self::Call,
        from: &ReplyTo<Self::Reply>,
    ) -> CallResult<Self::Reply>;

    /// Handles a cast. The default ignores it.
    fn handle_cast(&mut self, msg: Self::Cast) -> Flow {
        let _ = msg;
        Flow::Continue
    }

    /// Runs the continuation a callback (or `init`) asked for with
    /// [`continue_with`], before any other message. The default logs and
    /// goes on.
    fn handle_continue(&mut self, arg: Continue) -> Flow {
        log::warn!(
            "gen_server {}: continue_with was called but handle_continue is not implemented ({arg:?})",
            me("handle_continue")
        );
        Flow::Continue
    }

    /// Handles any other message (monitor notifications, exit signals from
    /// non-parents when trapping, plain sends). The default logs and drops
    /// it, as OTP does.
    fn handle_info(&mut self, msg: Unknown) -> Flow {
        log::warn!(
            "gen_server {}: unexpected message {msg:?}",
            me("handle_info")
        );
        Flow::Continue
    }

    /// Runs once when the server stops: after a callback asked to stop,
    /// panicked or called `exit_self`, on [`Server::stop`], and on an exit
    /// signal from the parent while trapping exits. It does not run when the
    /// process is killed by a signal it does not trap (OTP's rule).
    fn terminate(&mut self, reason: &ExitReason) {
        let _ = reason;
    }

    /// The state as [`sys::get_state`](crate::sys::get_state) and the
    /// observer show it. The default shows nothing (only the type's name);
    /// a `Debug` server returns [`sys::debug`](crate::sys::debug)`(self)`.
    fn format_status(&self) -> Option<String> {
        None
    }
}

/// What [`GenServer::handle_call`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallResult<R> {
    /// Answer the caller now and go on.
    Reply(R),
    /// Go on without answering now: the callback kept a clone of the
    /// [`ReplyTo`] and answers later.
    NoReply,
    /// Stop the server with a reason; `terminate` runs, then the reply (if
    /// any) is sent.
    Stop(ExitReason, Option<R>),
}

/// What a cast or info callback decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flow {
    /// Go on serving.
    Continue,
    /// Stop the server with this reason (`terminate` runs).
    Stop(ExitReason),
}

/// Why a call failed.
///
/// Each variant is one situation a caller may want to act on; none of them
/// needs its text parsed.
#[derive(Debug, Clone, PartialEq, Eq, graft::Mobile)]
pub enum CallError {
    /// No reply within the timeout (the server may still be working; its
    /// reply, if any, is dropped).
    Timeout,
    /// The server was not alive when the call started (or the name is not
    /// registered).
    NoProc,
    /// The server's node is not connected, or the connection was lost
    /// during the call.
    NoConnection,
    /// The server does not take this call: its request or reply type is not
    /// the caller's (the client and server builds drifted apart, or the
    /// pid runs another server type). Reported at once, before the server
    /// handles anything.
    TypeMismatch {
        /// The type the server takes (its request, or its reply).
        expected: String,
        /// The type the caller used.
        found: String,
        /// Where they first differ: the server type, and the field or
        /// variant with both sides when both types are `Mobile`.
        detail: String,
    },
    /// The server ended before replying, with this reason.
    Exited(ExitReason),
    /// The request or the reply could not cross to the other node (a
    /// local-only type, or data that did not decode): the text says which.
    Remote(String),
}

impl CallError {
    /// The error for a call that ended with its monitor's `reason`.
    pub(crate) fn from_exit(reason: ExitReason) -> CallError {
        match reason {
            ExitReason::NoProc => CallError::NoProc,
            ExitReason::NoConnection => CallError::NoConnection,
            r => CallError::Exited(r),
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Timeout => f.write_str("gen_server call timed out"),
            CallError::NoProc => f.write_str("no such gen_server"),
            CallError::NoConnection => f.write_str("no connection to the gen_server's node"),
            CallError::TypeMismatch {
                expected,
                found,
                detail,
            } => write!(
                f,
                "type mismatch: the server takes `{expected}`, the call used `{found}` ({detail})"
            ),
            CallError::Exited(r) => write!(f, "gen_server died during the call: {r}"),
            CallError::Remote(why) => write!(f, "remote gen_server call failed: {why}"),
        }
    }
}

impl std::error::Error for CallError {}

/// Why a server (or a supervisor) did not start.
#[derive(Debug, Clone, PartialEq, Eq, graft::Mobile)]
pub enum StartError {
    /// `init` returned this reason, or panicked with it.
    Init(ExitReason),
    /// The process ended before `init` finished (killed, or a linked
    /// process took it down).
    Exited(ExitReason),
    /// The name is held by this process (OTP's `already_started`).
    AlreadyStarted(Pid),
    /// The process could not be spawned (the runtime's error, as text).
    Spawn(String),
    /// `init` did not finish within the start timeout
    /// ([`StartOpts::timeout`]); the process was killed.
    Timeout,
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Init(r) => write!(f, "init failed: {r}"),
            StartError::Exited(r) => write!(f, "exited during init: {r}"),
            StartError::AlreadyStarted(p) => write!(f, "already started as {p}"),
            StartError::Spawn(e) => write!(f, "spawn failed: {e}"),
            StartError::Timeout => f.write_str("init did not finish in time"),
        }
    }
}

impl std::error::Error for StartError {}

/// Where to send the answer to one call (OTP's `From`): one type for every
/// behaviour, from the shared call protocol (`call.rs`).
pub use crate::call::ReplyTo;

/// What the serve loop works on: a request opened from its envelope.
enum Request<C, K, R> {
    Call { req: C, from: ReplyTo<R> },
    Cast(K),
    Stop(ExitReason),
}

type RequestOf<S> =
    Request<<S as GenServer>::Call, <S as GenServer>::Cast, <S as GenServer>::Reply>;

/// The Rust types a request was sent with, for the error when they are not
/// the server's (computed only then).
struct Types {
    call: TypeId,
    call_name: &'static str,
    call_desc: Option<&'static graft::graph::Descriptor>,
    reply_name: &'static str,
    reply_desc: Option<&'static graft::graph::Descriptor>,
}

fn types_of<C: Message, R: Message>() -> Types {
    Types {
        call: TypeId::of::<C>(),
        call_name: std::any::type_name::<C>(),
        call_desc: C::full_descriptor(),
        reply_name: std::any::type_name::<R>(),
        reply_desc: R::full_descriptor(),
    }
}

/// The one envelope every local request travels in, whatever the server
/// type: a server that finds a payload of another type answers the caller
/// at once with [`CallError::TypeMismatch`] instead of ignoring it. One
/// allocation, as the typed envelope before it had.
struct Body<T: ?Sized> {
    /// `Some` for a call.
    caller: Option<Caller>,
    types: fn() -> Types,
    /// `Option<(Call, PhantomData<Reply>)>` for a call, `Option<Cast>` for
    /// a cast; taken by the server.
    payload: T,
}

struct Envelope(Box<Body<dyn Any + Send>>);

type CallPayload<C, R> = Option<(C, PhantomData<fn() -> R>)>;

impl Envelope {
    fn call<P: Protocol>(req: P::Call, caller: Caller) -> Envelope {
        let body: Box<Body<CallPayload<P::Call, P::Reply>>> = Box::new(Body {
            caller: Some(caller),
            types: types_of::<P::Call, P::Reply>,
            payload: Some((req, PhantomData)),
        });
        Envelope(body)
    }

    fn cast<P: Protocol>(msg: P::Cast) -> Envelope {
        let body: Box<Body<Option<P::Cast>>> = Box::new(Body {
            caller: None,
            types: types_of::<P::Cast, P::Reply>,
            payload: Some(msg),
        });
        Envelope(body)
    }
}

impl fmt::Debug for Envelope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = (self.0.types)();
        f.debug_struct("Envelope")
            .field("call", &self.0.caller.is_some())
            .field("type", &t.call_name)
            .finish()
    }
}

/// A request to stop (OTP's `gen_server:stop`), whatever the server type.
#[derive(Debug, Clone)]
struct StopRequest(ExitReason);

/// The acknowledgement a new server sends its starter after `init`.
#[derive(Debug, Clone)]
struct InitAck {
    tag: MonitorRef,
    result: Result<(), StartError>,
}

/// What a caller on another node sends a server: the request encoded. The
/// server checks the request's descriptor and the caller's reply
/// descriptor (`reply`) against its own before it decodes anything.
#[derive(Debug, graft::Mobile)]
enum RemoteRequest {
    Call {
        bytes: Vec<u8>,
        /// The caller's request alias (answered with [`graft::reply`]).
        from: Alias,
        reply: u64,
    },
    Cast {
        bytes: Vec<u8>,
    },
    Stop(ExitReason),
}

// The local envelopes stay on their node: a call holds the caller's
// late-reply guard, and the values travel by pointer.
impl graft::Message for Envelope {}
impl graft::Message for StopRequest {}
impl graft::Message for InitAck {}

/// The error for a call of types `found` to a server `S`.
fn mismatch_of<S: GenServer>(found: &Types) -> CallError {
    let server = types_of::<S::Call, S::Reply>();
    let reply = found.call == server.call;
    let (expected, got, e, f) = if reply {
        (
            server.reply_name,
            found.reply_name,
            server.reply_desc,
            found.reply_desc,
        )
    } else {
        (
            server.call_name,
            found.call_name,
            server.call_desc,
            found.call_desc,
        )
    };
    let diff = match (e, f) {
        (Some(e), Some(f)) => e.first_difference(f),
        _ => None,
    };
    mismatch_error(std::any::type_name::<S>(), reply, expected, got, diff)
}

pub(crate) fn mismatch_error(
    server: &str,
    reply: bool,
    expected: &str,
    found: &str,
    diff: Option<String>,
) -> CallError {
    let which = if reply { "reply" } else { "request" };
    let mut detail = format!("the server is a `{server}`; its {which} type differs");
    match diff {
        Some(d) => {
            detail.push_str(": ");
            detail.push_str(&d);
        }
        None => detail.push_str(" (a different Rust type)"),
    }
    CallError::TypeMismatch {
        expected: expected.to_string(),
        found: found.to_string(),
        detail,
    }
}

/// A typed handle on a running server: a [`Pid`] that knows which requests
/// the server takes (its [`Protocol`]: the server type itself, or a
/// protocol marker a client names). `Copy`; compare and hash like the pid.
pub struct Server<P> {
    pid: Pid,
    _s: PhantomData<fn() -> P>,
}

impl<P> Clone for Server<P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P> Copy for Server<P> {}
impl<P> PartialEq for Server<P> {
    fn eq(&self, other: &Self) -> bool {
        self.pid == other.pid
    }
}
impl<P> Eq for Server<P> {}
impl<P> std::hash::Hash for Server<P> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.pid.hash(h);
    }
}
/// A server handle travels as its pid (it can be sent to other processes,
/// on this node or another).
impl<P: Protocol + Sync> graft::Mobile for Server<P> {
    const WIRE_MIN: usize = <Pid as graft::Mobile>::WIRE_MIN;
    fn describe(d: &mut graft::graph::Describer) {
        d.write("Server<");
        d.write(std::any::type_name::<P>());
        d.write(">");
    }
    fn encode<F: graft::graph::Format>(&self, e: &mut graft::graph::Encoder<'_, F>) {
        graft::Mobile::encode(&self.pid, e);
    }
    fn decode<D: graft::graph::Source>(
        d: &mut graft::graph::Decoder<'_, D>,
    ) -> Result<Self, graft::graph::DecodeError> {
        Ok(Server::from_pid(<Pid as graft::Mobile>::decode(d)?))
    }
}

impl<P> fmt::Debug for Server<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Server({})", self.pid)
    }
}

/// Where a server is: what [`Server::at`] takes. A registered name on this
/// node (`"kv"`), a name on a node (`("kv", node)`), or a pid.
pub trait ServerName {
    /// The server's pid.
    ///
    /// # Errors
    ///
    /// [`CallError::NoProc`] when nothing is registered under the name,
    /// [`CallError::NoConnection`] when the node cannot be reached.
    fn resolve(&self) -> Result<Pid, CallError>;
}

impl ServerName for Pid {
    fn resolve(&self) -> Result<Pid, CallError> {
        Ok(*self)
    }
}
impl ServerName for &str {
    fn resolve(&self) -> Result<Pid, CallError> {
        whereis(self).ok_or(CallError::NoProc)
    }
}
impl ServerName for String {
    fn resolve(&self) -> Result<Pid, CallError> {
        self.as_str().resolve()
    }
}
impl ServerName for (&str, NodeId) {
    fn resolve(&self) -> Result<Pid, CallError> {
        me("Server::at");
        match graft::whereis_on(self.0, self.1) {
            Ok(Some(pid)) => Ok(pid),
            Ok(None) => Err(CallError::NoProc),
            Err(Error::NoConnection(_)) => Err(CallError::NoConnection),
            Err(Error::Timeout) => Err(CallError::Timeout),
            Err(e) => Err(CallError::Remote(e.to_string())),
        }
    }
}
impl ServerName for (String, NodeId) {
    fn resolve(&self) -> Result<Pid, CallError> {
        (self.0.as_str(), self.1).resolve()
    }
}

impl<P: Protocol> Server<P> {
    /// A handle on the server running as `pid` (unchecked here: a call to
    /// a pid that runs another server type fails with
    /// [`CallError::TypeMismatch`]).
    pub fn from_pid(pid: Pid) -> Server<P> {
        Server {
            pid,
            _s: PhantomData,
        }
    }

    /// The server registered under a name, on this node (`"kv"`) or on any
    /// node (`("kv", node)`), or at a pid (OTP's `{Name, Node}` server
    /// reference). The name is looked up once, now: the handle keeps the
    /// pid (a restarted server has a new one; look it up again).
    ///
    /// # Errors
    ///
    /// [`CallError::NoProc`] when nothing is registered under the name,
    /// [`CallError::NoConnection`] when its node cannot be reached.
    ///
    /// # Panics
    ///
    /// Outside a graft process (for a remote name).
    ///
    /// ```
    /// use graft_otp::prelude::*;
    ///
    /// struct Echo;
    /// impl GenServer for Echo {
    ///     type Call = String;
    ///     type Cast = ();
    ///     type Reply = String;
    ///     fn handle_call(&mut self, s: String, _: &ReplyTo<String>) -> CallResult<String> {
    ///         CallResult::Reply(s)
    ///     }
    /// }
    ///
    /// let a = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
    /// let b = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
    /// let b_id = a.connect(b.addr()).unwrap();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// b.spawn(move || {
    ///     gen_server::start_named("echo", Echo).unwrap();
    ///     tx.send(()).unwrap();
    ///     expect::<()>(); // keep the server's parent alive
    /// }).unwrap();
    /// rx.recv().unwrap();
    /// let got = a.run(move || {
    ///     let echo = Server::<Echo>::at(("echo", b_id)).unwrap();
    ///     echo.call("hi".to_string()).unwrap()
    /// }).unwrap();
    /// assert_eq!(got, "hi");
    /// ```
    pub fn at(name: impl ServerName) -> Result<Server<P>, CallError> {
        name.resolve().map(Server::from_pid)
    }

    /// The server registered under `name` on this node.
    pub fn whereis(name: &str) -> Option<Server<P>> {
        whereis(name).map(Server::from_pid)
    }

    /// The server's pid.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Calls the server and waits up to [`DEFAULT_CALL_TIMEOUT`] for the
    /// reply.
    ///
    /// # Errors
    ///
    /// See [`Server::call_timeout`].
    ///
    /// # Panics
    ///
    /// Outside a graft process, and when a server calls itself (it would
    /// wait for itself; OTP exits with `calling_self`).
    pub fn call(&self, req: P::Call) -> Result<P::Reply, CallError> {
        self.call_inner(req, Some(DEFAULT_CALL_TIMEOUT), "Server::call")
    }

    /// Calls the server and waits up to `timeout` for the reply.
    ///
    /// # Errors
    ///
    /// [`CallError::NoProc`] if the server is not alive,
    /// [`CallError::Exited`] if it ends before replying,
    /// [`CallError::NoConnection`] if its node is (or gets) disconnected,
    /// [`CallError::TypeMismatch`] if the server does not take this
    /// protocol's types (at once), [`CallError::Timeout`] if no reply came
    /// in time (a later reply is dropped, never delivered to the caller).
    ///
    /// # Panics
    ///
    /// Outside a graft process, and when a server calls itself.
    ///
    /// ```
    /// use graft_otp::prelude::*;
    /// use std::time::Duration;
    ///
    /// struct Slow;
    /// impl GenServer for Slow {
    ///     type Call = ();
    ///     type Cast = ();
    ///     type Reply = ();
    ///     fn handle_call(&mut self, _: (), _: &ReplyTo<()>) -> CallResult<()> {
    ///         sleep(Duration::from_millis(50));
    ///         CallResult::Reply(())
    ///     }
    /// }
    ///
    /// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
    /// let r = node.run(|| {
    ///     let s = gen_server::start(Slow).unwrap();
    ///     s.call_timeout((), Duration::from_millis(1))
    /// }).unwrap();
    /// assert_eq!(r, Err(CallError::Timeout));
    /// node.shutdown();
    /// ```
    pub fn call_timeout(&self, req: P::Call, timeout: Duration) -> Result<P::Reply, CallError> {
        self.call_inner(req, Some(timeout), "Server::call_timeout")
    }

    /// Calls the server and waits for the reply with no time limit (OTP's
    /// `infinity`): it still fails when the server dies.
    ///
    /// # Errors
    ///
    /// As [`Server::call_timeout`], never `Timeout`.
    ///
    /// # Panics
    ///
    /// Outside a graft process, and when a server calls itself.
    pub fn call_infinity(&self, req: P::Call) -> Result<P::Reply, CallError> {
        self.call_inner(req, None, "Server::call_infinity")
    }

    /// Every call goes through here (one wait, one place to change it).
    #[inline]
    fn call_inner(
        &self,
        req: P::Call,
        timeout: Option<Duration>,
        call: &'static str,
    ) -> Result<P::Reply, CallError> {
        let me = me(call);
        if me == self.pid {
            calling_self(me);
        }
        if self.pid.node() != graft::this_node() {
            return self.call_on_other_node(me, req, timeout);
        }
        call::call_local(me, self.pid, timeout, |caller| {
            send(self.pid, Envelope::call::<P>(req, caller))
        })
    }

    /// A call to a server on another node, on the runtime's request
    /// primitive ([`graft::send_request`]): the request travels encoded in
    /// one request frame that carries the monitor with it, the reply comes
    /// back in one alias frame (no monitor or demonitor frames), and a
    /// reply that arrives after a timeout is dropped at the alias.
    #[cold]
    fn call_on_other_node(
        &self,
        _me: Pid,
        req: P::Call,
        timeout: Option<Duration>,
    ) -> Result<P::Reply, CallError> {
        call::call_remote::<P::Call, P::Reply, _>(self.pid, req, timeout, |bytes, from, reply| {
            RemoteRequest::Call { bytes, from, reply }
        })
    }

    /// Sends the server a cast (never blocks, never fails: a cast to a dead
    /// server is dropped; one the server does not take is logged there).
    pub fn cast(&self, msg: P::Cast) {
        if self.pid.node() != graft::this_node() {
            match msg.encode_remote() {
                Ok((_, bytes)) => send(self.pid, RemoteRequest::Cast { bytes }),
                Err(e) => log::error!("gen_server: cast to {} dropped: {e}", self.pid),
            }
            return;
        }
        send(self.pid, Envelope::cast::<P>(msg));
    }

    /// Stops the server with `reason` (its `terminate` runs) and waits until
    /// it has ended (OTP's `gen_server:stop`).
    ///
    /// **Any reason but `Normal` also reaches the processes linked to the
    /// server** as an exit signal, and the caller of [`start`] is linked to
    /// it: a caller that started the server (and does not trap exits) is
    /// taken down too when it stops it with, say, `Shutdown`. Stop with
    /// `Normal`, or unlink first, to stay alive.
    ///
    /// # Errors
    ///
    /// [`CallError::NoProc`] if it was not alive; [`CallError::Exited`]
    /// if it ended with another reason (e.g. `terminate` panicked).
    ///
    /// # Panics
    ///
    /// When a server stops itself this way (it would wait for itself; OTP
    /// exits with `calling_self`): return [`Flow::Stop`] instead.
    pub fn stop(&self, reason: ExitReason) -> Result<(), CallError> {
        let me = me("Server::stop");
        if me == self.pid {
            calling_self(me);
        }
        let remote = self.pid.node() != graft::this_node();
        let pid = self.pid;
        call::stop_and_wait(pid, reason, |reason| {
            if remote {
                send(pid, RemoteRequest::Stop(reason));
            } else {
                send(pid, StopRequest(reason));
            }
        })
    }
}

#[cold]
#[inline(never)]
fn calling_self(me: Pid) -> ! {
    panic!("gen_server {me} called itself (calling_self)")
}

/// Calls and casts that say at compile time that the server's messages are
/// [`Mobile`](graft::Mobile), so they work wherever the server lives.
/// ([`Server::call`] and [`Server::cast`] also reach a server on another
/// node; with local-only message types they fail with [`CallError::Remote`].)
///
/// A remote call is one round trip, one frame each way: the request travels
/// encoded with its monitor and the caller's one-shot alias, and the reply
/// comes back through the alias. A reply that arrives after a timeout is
/// dropped at the alias (it never reaches the caller's mailbox).
impl<P: Protocol> Server<P>
where
    P::Call: graft::Mobile,
    P::Cast: graft::Mobile,
    P::Reply: graft::Mobile,
{
    /// [`Server::call`] for a server on any node.
    ///
    /// # Errors
    ///
    /// As [`Server::call_timeout`].
    pub fn call_remote(&self, req: P::Call) -> Result<P::Reply, CallError> {
        self.call_inner(req, Some(DEFAULT_CALL_TIMEOUT), "Server::call_remote")
    }

    /// [`Server::call_timeout`] for a server on any node.
    ///
    /// # Errors
    ///
    /// As [`Server::call_timeout`].
    pub fn call_remote_timeout(
        &self,
        req: P::Call,
        timeout: Duration,
    ) -> Result<P::Reply, CallError> {
        self.call_inner(req, Some(timeout), "Server::call_remote_timeout")
    }

    /// [`Server::cast`] for a server on any node (never blocks, never
    /// fails; casts and calls from one process arrive in order).
    pub fn cast_remote(&self, msg: P::Cast) {
        self.cast(msg)
    }
}

/// Starts `server` on `node` (this node included), linked to the caller like
/// [`start`], and waits until its `init` has run there.
///
/// The server value itself travels to the other node, so it is `Mobile`;
/// talk to it with [`Server::call_remote`] and [`Server::cast_remote`].
///
/// # Errors
///
/// As [`start`]; [`StartError::Spawn`] when `node` is unreachable.
///
/// ```
/// use graft_otp::prelude::*;
///
/// #[derive(Default, Mobile)]
/// struct Total(u64);
///
/// impl GenServer for Total {
///     type Call = u64;
///     type Cast = u64;
///     type Reply = u64;
///     fn handle_call(&mut self, add: u64, _: &ReplyTo<u64>) -> CallResult<u64> {
///         self.0 += add;
///         CallResult::Reply(self.0)
///     }
///     fn handle_cast(&mut self, add: u64) -> Flow {
///         self.0 += add;
///         Flow::Continue
///     }
/// }
///
/// let a = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b_id = a.connect(b.addr()).unwrap();
/// let n = a.run(move || {
///     let total = gen_server::start_on(b_id, Total(10)).unwrap();
///     assert_eq!(total.pid().node(), b_id);
///     total.cast_remote(5);
///     total.call_remote(1).unwrap()
/// }).unwrap();
/// assert_eq!(n, 16);
/// ```
pub fn start_on<S>(node: graft::NodeId, server: S) -> Result<Server<S>, StartError>
where
    S: GenServer + graft::Mobile,
{
    if node == graft::this_node() {
        return start(server);
    }
    let started = graft::call_on(node, server, |server: S| {
        // Started by a short-lived process: unlink it from the server, the
        // real parent (the caller) links below.
        start(server).map(|s| {
            graft::unlink(s.pid());
            s.pid()
        })
    });
    match started {
        Ok(Ok(pid)) => {
            graft::link(pid);
            Ok(Server::from_pid(pid))
        }
        Ok(Err(e)) => Err(e),
        Err(e) => Err(StartError::Spawn(e.to_string())),
    }
}

/// How to start a server: OTP's `start_link` options.
///
/// ```
/// use graft_otp::prelude::*;
/// use std::time::Duration;
///
/// struct Stuck;
/// impl GenServer for Stuck {
///     type Call = ();
///     type Cast = ();
///     type Reply = ();
///     fn init(&mut self) -> Result<(), ExitReason> {
///         sleep(Duration::from_secs(3600)); // waits for a resource that never comes
///         Ok(())
///     }
///     fn handle_call(&mut self, _: (), _: &ReplyTo<()>) -> CallResult<()> {
///         CallResult::Reply(())
///     }
/// }
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let r = node.run(|| {
///     let opts = StartOpts::new().name("stuck").timeout(Duration::from_millis(20));
///     gen_server::start_with(Stuck, opts).map(|s| s.pid())
/// }).unwrap();
/// assert_eq!(r, Err(StartError::Timeout));
/// node.shutdown();
/// ```
#[derive(Debug, Clone, Default)]
pub struct StartOpts {
    name: Option<String>,
    timeout: Option<Duration>,
    spawn: Option<SpawnOpts>,
    hibernate_after: Option<Duration>,
}

impl StartOpts {
    /// No name, no timeout (wait for `init` as long as it takes, OTP's
    /// `infinity`), default spawn options.
    pub fn new() -> StartOpts {
        StartOpts::default()
    }

    /// Registers the server under `name` before `init` runs.
    pub fn name(mut self, name: &str) -> StartOpts {
        self.name = Some(name.to_string());
        self
    }

    /// Gives `init` at most `timeout`: past it the new process is killed
    /// and the start fails with [`StartError::Timeout`] (OTP's
    /// `{timeout, T}`).
    pub fn timeout(mut self, timeout: Duration) -> StartOpts {
        self.timeout = Some(timeout);
        self
    }

    /// Spawns the server's process with these options (stack size,
    /// pinning, ...; OTP's `spawn_opt`). The process is always linked to
    /// the caller.
    pub fn spawn_opts(mut self, opts: SpawnOpts) -> StartOpts {
        self.spawn = Some(opts);
        self
    }

    /// Hibernates the server after `idle` without a message (OTP's
    /// `{hibernate_after, T}`): the unused part of its stack is given back
    /// to the system ([`graft::hibernate`]) until the next message
    /// arrives. For servers that sit idle most of the time, many of them.
    ///
    /// ```
    /// use graft_otp::gen_server::StartOpts;
    /// let opts = StartOpts::new().hibernate_after(std::time::Duration::from_secs(1));
    /// # let _ = opts;
    /// ```
    pub fn hibernate_after(mut self, idle: Duration) -> StartOpts {
        self.hibernate_after = Some(idle);
        self
    }
}

/// Starts `server` in a new process linked to the caller (OTP's
/// `start_link`) and returns once its `init` has succeeded.
///
/// # Errors
///
/// [`StartError::Init`] if `init` failed or panicked (the new process is
/// unlinked first, so the caller is not taken down by it);
/// [`StartError::Exited`] if the process was killed during `init`;
/// [`StartError::Spawn`] if no process could be spawned.
///
/// # Panics
///
/// Outside a graft process.
///
/// ```
/// use graft_otp::prelude::*;
///
/// struct Fails;
/// impl GenServer for Fails {
///     type Call = ();
///     type Cast = ();
///     type Reply = ();
///     fn init(&mut self) -> Result<(), ExitReason> {
///         Err(ExitReason::Other("no config".into()))
///     }
///     fn handle_call(&mut self, _: (), _: &ReplyTo<()>) -> CallResult<()> {
///         CallResult::Reply(())
///     }
/// }
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let r = node.run(|| gen_server::start(Fails).map(|s| s.pid())).unwrap();
/// assert_eq!(r, Err(StartError::Init(ExitReason::Other("no config".into()))));
/// node.shutdown();
/// ```
pub fn start<S: GenServer>(server: S) -> Result<Server<S>, StartError> {
    start_with(server, StartOpts::new())
}

/// Like [`start`], registering the server under `name` before `init` runs.
///
/// # Errors
///
/// As [`start`], and [`StartError::AlreadyStarted`] when another process
/// holds the name.
///
/// ```
/// use graft_otp::prelude::*;
///
/// struct Echo;
/// impl GenServer for Echo {
///     type Call = String;
///     type Cast = ();
///     type Reply = String;
///     fn handle_call(&mut self, s: String, _: &ReplyTo<String>) -> CallResult<String> {
///         CallResult::Reply(s)
///     }
/// }
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     let s = gen_server::start_named("echo", Echo).unwrap();
///     assert_eq!(Server::<Echo>::whereis("echo"), Some(s));
///     assert_eq!(gen_server::start_named("echo", Echo), Err(StartError::AlreadyStarted(s.pid())));
///     assert_eq!(s.call("hi".to_string()).unwrap(), "hi");
/// }).unwrap();
/// node.shutdown();
/// ```
pub fn start_named<S: GenServer>(name: &str, server: S) -> Result<Server<S>, StartError> {
    start_with(server, StartOpts::new().name(name))
}

/// [`start`] with options: a name, a timeout on `init`, spawn options (see
/// [`StartOpts`]).
///
/// # Errors
///
/// As [`start_named`], and [`StartError::Timeout`] when `init` takes longer
/// than the timeout.
///
/// # Panics
///
/// Outside a graft process.
pub fn start_with<S: GenServer>(server: S, opts: StartOpts) -> Result<Server<S>, StartError> {
    let parent = me("gen_server::start");
    // The ack and the monitor's `ProcessDied` come after this mark.
    let mk = mark();
    let tag = graft::make_ref();
    let StartOpts {
        name,
        timeout,
        spawn,
        hibernate_after,
    } = opts;
    let (pid, m) = spawn
        .unwrap_or_default()
        .link()
        .spawn_monitor(move || {
            let mut server = server;
            let fail = |error: StartError| {
                // Unlink first: the starter hears about the failure from
                // the reply, not by being taken down.
                unlink(parent);
                send(
                    parent,
                    InitAck {
                        tag,
                        result: Err(error),
                    },
                );
            };
            if let Some(name) = &name {
                if let Err(e) = register(name, me("gen_server::start")) {
                    let error = match (e, whereis(name)) {
                        (Error::NameTaken(_), Some(holder)) => StartError::AlreadyStarted(holder),
                        (e, _) => StartError::Init(ExitReason::Other(e.to_string())),
                    };
                    return fail(error);
                }
            }
            match guarded(|| server.init()).and_then(|r| r) {
                Ok(()) => {
                    send(
                        parent,
                        InitAck {
                            tag,
                            result: Ok(()),
                        },
                    );
                    let first = take_continue();
                    let reason = serve(&mut server, Some(parent), first, hibernate_after);
                    if !reason.is_normal() {
                        exit_self(reason);
                    }
                }
                Err(reason) => {
                    // A continuation asked for by a failed init is dropped.
                    let _ = take_continue();
                    fail(StartError::Init(reason.clone()));
                    if !reason.is_normal() {
                        exit_self(reason);
                    }
                }
            }
        })
        .map_err(|e| StartError::Spawn(e.to_string()))?;
    let result = receive()
        .after(mk)
        .when(move |a: &InitAck| a.tag == tag, |a: InitAck| a.result)
        .when(
            move |d: &ProcessDied| d.monitor == m,
            |d: ProcessDied| Err(StartError::Exited(d.reason)),
        );
    let result = match timeout {
        None => result.wait(),
        Some(t) => match result.timeout(t) {
            Some(r) => r,
            None => {
                // OTP: the starter kills the process stuck in init.
                unlink(pid);
                graft::exit(pid, ExitReason::Kill);
                receive()
                    .after(mk)
                    .when(move |d: &ProcessDied| d.monitor == m, |_: ProcessDied| ())
                    .wait();
                // An ack or exit signal that raced the kill is dropped.
                let _ = receive()
                    .after(mk)
                    .when(move |a: &InitAck| a.tag == tag, |_: InitAck| ())
                    .timeout(Duration::ZERO);
                return Err(StartError::Timeout);
            }
        },
    };
    demonitor_flush_after(m, mk);
    result.map(|()| Server::from_pid(pid))
}

/// Runs `server` in the calling process (OTP's `enter_loop`): `init`, then
/// the loop, then `terminate`; returns the reason it stopped with (the
/// caller decides whether to exit with it). An `init` failure returns its
/// reason without running the loop. With no parent, every exit signal (when
/// trapping) goes to `handle_info`.
///
/// # Panics
///
/// Outside a graft process.
///
/// ```
/// use graft_otp::prelude::*;
///
/// struct Once;
/// impl GenServer for Once {
///     type Call = u8;
///     type Cast = ();
///     type Reply = u8;
///     fn handle_call(&mut self, n: u8, _: &ReplyTo<u8>) -> CallResult<u8> {
///         CallResult::Stop(ExitReason::Normal, Some(n + 1))
///     }
/// }
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let got = node.run(|| {
///     let me = self_pid();
///     let pid = spawn(move || {
///         let reason = gen_server::run(Once);
///         send(me, reason);
///     });
///     let answer = Server::<Once>::from_pid(pid).call(1).unwrap();
///     (answer, expect::<ExitReason>())
/// }).unwrap();
/// assert_eq!(got, (2, ExitReason::Normal));
/// node.shutdown();
/// ```
pub fn run<S: GenServer>(mut server: S) -> ExitReason {
    match guarded(|| server.init()).and_then(|r| r) {
        Ok(()) => {
            let first = take_continue();
            serve(&mut server, None, first, None)
        }
        Err(reason) => {
            let _ = take_continue();
            reason
        }
    }
}

/// Runs `f`, turning a panic into `Err(Other(message))` and the process
/// ending itself into `Err(its reason)`. Other unwinds (the runtime ending
/// the process on an exit signal, or node shutdown) pass through untouched.
pub(crate) fn guarded<R>(f: impl FnOnce() -> R) -> Result<R, ExitReason> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Ok(r),
        Err(payload) => {
            // The process ending itself (`exit_self`) is caught as in OTP,
            // where `exit/1` in a callback still runs `terminate`; an exit
            // signal acted on goes on unwinding.
            if let Some(reason) = graft::self_exit_reason(&*payload) {
                Err(reason)
            } else if let Some(s) = payload.downcast_ref::<&str>() {
                Err(ExitReason::Other((*s).to_string()))
            } else if let Some(s) = payload.downcast_ref::<String>() {
                Err(ExitReason::Other(s.clone()))
            } else {
                resume_unwind(payload)
            }
        }
    }
}

/// One thing the loop received.
enum Event<S: GenServer> {
    Request(RequestOf<S>),
    Envelope(Envelope),
    Remote(RemoteRequest),
    Stop(ExitReason),
    ParentExit(ExitReason),
    Info(Unknown),
    Sys(graft::observe::SysRequest),
    Continue(Continue),
}

/// Opens a local envelope as the server's request; a call of other types is
/// answered with [`CallError::TypeMismatch`] (`None`), a cast of another
/// type logged and dropped.
fn open<S: GenServer>(mut e: Envelope) -> Option<RequestOf<S>> {
    match e.0.caller.take() {
        Some(caller) => {
            let slot = e.0.payload.downcast_mut::<CallPayload<S::Call, S::Reply>>();
            match slot.and_then(Option::take) {
                Some((req, _)) => Some(Request::Call {
                    req,
                    from: ReplyTo::local(caller),
                }),
                None => {
                    let error = mismatch_of::<S>(&(e.0.types)());
                    log::warn!(
                        "gen_server {}: refused a call from {}: {error}",
                        me("gen_server"),
                        caller.pid
                    );
                    ReplyTo::<S::Reply>::local(caller).fail(error);
                    None
                }
            }
        }
        None => match e.0.payload.downcast_mut::<Option<S::Cast>>() {
            Some(slot) => slot.take().map(Request::Cast),
            None => {
                log::warn!(
                    "gen_server {} ({}): dropped a cast of type {} (it takes {})",
                    me("gen_server"),
                    std::any::type_name::<S>(),
                    (e.0.types)().call_name,
                    std::any::type_name::<S::Cast>()
                );
                None
            }
        },
    }
}

/// Turns a request from another node into the local envelope (decoding its
/// payload as the server's types). A call whose types are not the server's
/// is answered with the mismatch; other failures are answered (calls) or
/// logged (casts).
fn remote_to_local<S: GenServer>(r: RemoteRequest) -> Option<RequestOf<S>> {
    let fail = |from: Alias, why: RemoteFail| {
        graft::reply(from, RemoteReply { result: Err(why) });
    };
    match r {
        RemoteRequest::Call { bytes, from, reply } => {
            let found = graft::graph::peek_descriptor(&bytes).ok();
            let checks = [
                (
                    false,
                    found,
                    S::Call::remote_descriptor(),
                    S::Call::full_descriptor(),
                    std::any::type_name::<S::Call>(),
                ),
                (
                    true,
                    Some(reply),
                    S::Reply::remote_descriptor(),
                    S::Reply::full_descriptor(),
                    std::any::type_name::<S::Reply>(),
                ),
            ];
            for (is_reply, theirs, ours, desc, name) in checks {
                if theirs != ours {
                    let why = match desc {
                        Some(d) => RemoteFail::Mismatch {
                            reply: is_reply,
                            server: std::any::type_name::<S>().to_string(),
                            expected: name.to_string(),
                            form: d.readable().to_string(),
                        },
                        None => RemoteFail::Error(CallError::Remote(format!(
                            "the server's {} type {name} is local-only",
                            if is_reply { "reply" } else { "request" }
                        ))),
                    };
                    log::warn!(
                        "gen_server {}: refused a call from {}: {why:?}",
                        me("gen_server"),
                        from.owner()
                    );
                    fail(from, why);
                    return None;
                }
            }
            match S::Call::decode_remote(&bytes) {
                Ok(req) => Some(Request::Call {
                    req,
                    from: ReplyTo::remote(from),
                }),
                Err(e) => {
                    fail(from, RemoteFail::Error(CallError::Remote(e.to_string())));
                    None
                }
            }
        }
        RemoteRequest::Cast { bytes } => match S::Cast::decode_remote(&bytes) {
            Ok(msg) => Some(Request::Cast(msg)),
            Err(e) => {
                log::warn!(
                    "gen_server {}: dropping a remote cast: {e}",
                    me("gen_server")
                );
                None
            }
        },
        RemoteRequest::Stop(reason) => Some(Request::Stop(reason)),
    }
}

/// The server loop: receive, dispatch, until a callback stops it; then
/// `terminate` and the pending reply. Returns the exit reason.
fn serve<S: GenServer>(
    server: &mut S,
    parent: Option<Pid>,
    first: Option<Continue>,
    hibernate_after: Option<Duration>,
) -> ExitReason {
    crate::sys::enter::<S>();
    // The next event; with `idle`, `None` once that long passed without one.
    let next_event = |idle: Option<Duration>| {
        let r = receive()
            .on(|m: Envelope| Event::<S>::Envelope(m))
            .on(|m: graft::observe::SysRequest| Event::Sys(m))
            .on(|m: RemoteRequest| Event::Remote(m))
            .on(|m: StopRequest| Event::Stop(m.0))
            .when(
                move |s: &ExitSignal| Some(s.from) == parent,
                |s: ExitSignal| Event::ParentExit(s.reason),
            )
            .any(Event::Info);
        match idle {
            Some(d) => r.timeout(d),
            None => Some(r.wait()),
        }
    };
    let mut next = first;
    let (reason, pending) = loop {
        let event = match next.take() {
            Some(c) => Event::Continue(c),
            None => match next_event(hibernate_after) {
                Some(e) => e,
                None => {
                    // Idle for `hibernate_after`: give the stack back and
                    // wait without a deadline.
                    graft::hibernate();
                    match next_event(None) {
                        Some(e) => e,
                        None => continue,
                    }
                }
            },
        };
        let event = match event {
            Event::Envelope(e) => match open::<S>(e) {
                Some(local) => Event::Request(local),
                None => continue,
            },
            Event::Remote(r) => match remote_to_local::<S>(r) {
                Some(local) => Event::Request(local),
                None => continue,
            },
            other => other,
        };
        let flow = match event {
            Event::Envelope(_) | Event::Remote(_) => continue,
            Event::Sys(m) => {
                crate::sys::handle(server, m);
                continue;
            }
            Event::Request(Request::Call { req, from }) => {
                match guarded(|| server.handle_call(req, &from)) {
                    Ok(CallResult::Reply(r)) => {
                        from.reply(r);
                        next = take_continue();
                        continue;
                    }
                    Ok(CallResult::NoReply) => {
                        next = take_continue();
                        continue;
                    }
                    Ok(CallResult::Stop(reason, reply)) => {
                        let _ = take_continue();
                        break (reason, reply.map(|r| (from, r)));
                    }
                    Err(reason) => Flow::Stop(reason),
                }
            }
            Event::Request(Request::Cast(msg)) => {
                guarded(|| server.handle_cast(msg)).unwrap_or_else(Flow::Stop)
            }
            Event::Request(Request::Stop(reason)) | Event::Stop(reason) => Flow::Stop(reason),
            Event::ParentExit(reason) => Flow::Stop(reason),
            Event::Info(msg) => guarded(|| server.handle_info(msg)).unwrap_or_else(Flow::Stop),
            Event::Continue(c) => guarded(|| server.handle_continue(c)).unwrap_or_else(Flow::Stop),
        };
        // A continuation asked for by this callback runs next (or is
        // dropped when the server stops).
        next = take_continue();
        if let Flow::Stop(reason) = flow {
            break (reason, None);
        }
    };
    let reason = match guarded(|| server.terminate(&reason)) {
        Ok(()) => reason,
        Err(crash) => {
            log::error!(
                "gen_server {}: terminate panicked: {crash}",
                me("gen_server")
            );
            crash
        }
    };
    let _ = take_continue();
    if let Some((from, r)) = pending {
        from.reply(r);
    }
    if !matches!(reason, ExitReason::Normal | ExitReason::Shutdown) {
        log::error!("gen_server {} terminating: {reason}", me("gen_server"));
    }
    reason
}
