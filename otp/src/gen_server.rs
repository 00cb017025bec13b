//! `gen_server`: a process that serves synchronous calls and asynchronous
//! casts against a piece of state, with OTP's start, stop and crash rules.
//!
//! # The protocol
//!
//! A server is an ordinary graft process running [`run`]'s loop. It receives
//! three kinds of mail:
//!
//! * `Request::Call { req, from }`: handled by [`GenServer::handle_call`]; the
//!   answer goes back as a `Reply { tag, value }` message to `from`.
//! * `Request::Cast(msg)` and `Request::Stop(reason)`.
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
//! monitor with `demonitor_flush`. So a call to a dead server fails with
//! [`CallError::NoProc`], a server dying mid-call with
//! [`CallError::ServerDied`], and nothing hangs past the timeout.
//!
//! ## No late replies
//!
//! OTP ≥ 24 sends the reply to an *alias* of the caller that the caller
//! deactivates when it gives up, so the runtime drops a late reply. graft has
//! no aliases in its public API yet, so graft-otp builds the local
//! equivalent: every calling process owns one `CallGuard` (kept in process
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
//! When calls cross nodes, the guard becomes the runtime's alias.

use graft::{
    demonitor_flush, exit_self, monitor, receive, register, self_pid, send, spawn_opts, unlink,
    whereis, Error, ExitReason, ExitSignal, Message, MonitorRef, Pid, ProcessDied, Unknown,
};
use std::fmt;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long [`Server::call`] waits for a reply (OTP's default, 5 s).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);

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

    /// Handles any other message (monitor notifications, exit signals from
    /// non-parents when trapping, plain sends). The default logs and drops
    /// it, as OTP does.
    fn handle_info(&mut self, msg: Unknown) -> Flow {
        log::warn!("gen_server {}: unexpected message {msg:?}", self_pid());
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
#[derive(Debug, Clone, PartialEq, Eq, graft::Mobile)]
pub enum CallError {
    /// No reply within the timeout (the server may still be working; its
    /// reply, if any, is dropped).
    Timeout,
    /// The server ended before replying.
    ServerDied(ExitReason),
    /// The server was not alive when the call started (or the name is not
    /// registered).
    NoProc,
    /// The server is on another node and the call could not go there: its
    /// node is not connected or was lost, or the server's types are not
    /// `Mobile` (use [`Server::call_remote`]). The text says which.
    Remote(String),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Timeout => f.write_str("gen_server call timed out"),
            CallError::ServerDied(r) => write!(f, "gen_server died during the call: {r}"),
            CallError::NoProc => f.write_str("no such gen_server"),
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
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Init(r) => write!(f, "init failed: {r}"),
            StartError::Exited(r) => write!(f, "exited during init: {r}"),
            StartError::AlreadyStarted(p) => write!(f, "already started as {p}"),
            StartError::Spawn(e) => write!(f, "spawn failed: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// The guard a calling process shares with every [`ReplyTo`] it hands out:
/// the tag of the call it is waiting for, if any (see the module docs).
#[derive(Debug, Default)]
struct CallGuard {
    /// Written by the caller (start and end of a call), read by repliers,
    /// always under the lock; a replier sends while holding it.
    active: Mutex<Option<MonitorRef>>,
}

impl CallGuard {
    fn set(&self, tag: Option<MonitorRef>) {
        *self.active.lock().unwrap_or_else(|e| e.into_inner()) = tag;
    }
}

/// The process-local handle on the calling process's guard.
#[derive(Debug, Clone)]
struct CallerGuard(Arc<CallGuard>);

/// The running process's guard (made on its first call).
fn caller_guard() -> Arc<CallGuard> {
    if let Some(g) = graft::local::get::<CallerGuard>() {
        return g.0;
    }
    let g = Arc::new(CallGuard::default());
    graft::local::set(CallerGuard(g.clone()));
    g
}

/// Where to send the answer to one call (OTP's `From`).
///
/// Clone it to answer later ([`CallResult::NoReply`]); only the first reply
/// for a call that is still waiting is delivered, every other one (a second
/// reply, a reply after the caller timed out or died) is dropped.
pub struct ReplyTo<R> {
    pid: Pid,
    tag: MonitorRef,
    guard: Arc<CallGuard>,
    /// The caller is on another node: the reply travels encoded.
    remote: bool,
    _r: PhantomData<fn(R)>,
}

impl<R> Clone for ReplyTo<R> {
    fn clone(&self) -> Self {
        ReplyTo {
            pid: self.pid,
            tag: self.tag,
            guard: self.guard.clone(),
            remote: self.remote,
            _r: PhantomData,
        }
    }
}

impl<R> fmt::Debug for ReplyTo<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplyTo")
            .field("pid", &self.pid)
            .field("tag", &self.tag)
            .finish()
    }
}

impl<R: Message> ReplyTo<R> {
    /// The calling process.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Answers the call (OTP's `gen_server:reply`). Returns `false` when the
    /// reply was dropped because the caller no longer waits for it.
    ///
    /// ```
    /// use graft_otp::prelude::*;
    ///
    /// /// Answers each call when the next cast arrives.
    /// #[derive(Default)]
    /// struct Later(Vec<ReplyTo<u32>>);
    /// impl GenServer for Later {
    ///     type Call = ();
    ///     type Cast = u32;
    ///     type Reply = u32;
    ///     fn handle_call(&mut self, _: (), from: &ReplyTo<u32>) -> CallResult<u32> {
    ///         self.0.push(from.clone());
    ///         CallResult::NoReply
    ///     }
    ///     fn handle_cast(&mut self, n: u32) -> Flow {
    ///         for from in self.0.drain(..) {
    ///             from.reply(n);
    ///         }
    ///         Flow::Continue
    ///     }
    /// }
    ///
    /// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
    /// let v = node.run(|| {
    ///     let s = gen_server::start(Later::default()).unwrap();
    ///     spawn(move || { sleep(std::time::Duration::from_millis(10)); s.cast(7) });
    ///     s.call(()).unwrap()
    /// }).unwrap();
    /// assert_eq!(v, 7);
    /// node.shutdown();
    /// ```
    pub fn reply(self, value: R) -> bool {
        let mut active = self.guard.active.lock().unwrap_or_else(|e| e.into_inner());
        if *active != Some(self.tag) {
            return false;
        }
        // A send never yields: the lock is not held across a switch.
        if self.remote {
            let bytes = value
                .encode_remote()
                .map(|(_, b)| b)
                .map_err(|e| e.to_string());
            send(
                self.pid,
                RemoteReply {
                    tag: self.tag,
                    bytes,
                },
            );
        } else {
            send(
                self.pid,
                Reply {
                    tag: self.tag,
                    value,
                },
            );
        }
        // One reply per call: the next one through a clone is dropped.
        *active = None;
        true
    }
}

/// What a caller sends a server.
#[derive(Debug, Clone)]
enum Request<C, K, R> {
    Call { req: C, from: ReplyTo<R> },
    Cast(K),
    Stop(ExitReason),
}

/// A server's answer, tagged with the caller's monitor reference.
#[derive(Debug, Clone)]
struct Reply<R> {
    tag: MonitorRef,
    value: R,
}

/// The acknowledgement a new server sends its starter after `init`.
#[derive(Debug, Clone)]
struct InitAck {
    tag: MonitorRef,
    result: Result<(), StartError>,
}

/// What a caller on another node sends a server: the request encoded (the
/// server decodes it as its `Call`/`Cast` type; a mismatch is dropped with a
/// log line).
#[derive(Debug, graft::Mobile)]
enum RemoteRequest {
    Call {
        bytes: Vec<u8>,
        from: Pid,
        tag: MonitorRef,
    },
    Cast {
        bytes: Vec<u8>,
    },
    Stop(ExitReason),
}

/// A server's answer to a remote caller: the encoded reply, or why it could
/// not be encoded.
#[derive(Debug, graft::Mobile)]
struct RemoteReply {
    tag: MonitorRef,
    bytes: Result<Vec<u8>, String>,
}

// The local envelopes stay on their node: a `ReplyTo` holds the caller's
// late-reply guard, and the values travel by pointer.
impl<C: Send + 'static, K: Send + 'static, R: Send + 'static> graft::Message for Request<C, K, R> {}
impl<R: Send + 'static> graft::Message for Reply<R> {}
impl graft::Message for InitAck {}

type RequestOf<S> =
    Request<<S as GenServer>::Call, <S as GenServer>::Cast, <S as GenServer>::Reply>;

/// A typed handle on a running server: a [`Pid`] that knows which requests
/// the server takes. `Copy`; compare and hash like the pid.
pub struct Server<S> {
    pid: Pid,
    _s: PhantomData<fn() -> S>,
}

impl<S> Clone for Server<S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for Server<S> {}
impl<S> PartialEq for Server<S> {
    fn eq(&self, other: &Self) -> bool {
        self.pid == other.pid
    }
}
impl<S> Eq for Server<S> {}
impl<S> std::hash::Hash for Server<S> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.pid.hash(h);
    }
}
/// A server handle travels as its pid (it can be sent to other processes,
/// on this node or another).
impl<S: GenServer + Sync> graft::Mobile for Server<S> {
    const WIRE_MIN: usize = <Pid as graft::Mobile>::WIRE_MIN;
    fn describe(d: &mut graft::graph::Describer) {
        d.write("Server<");
        d.write(std::any::type_name::<S>());
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

impl<S> fmt::Debug for Server<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Server({})", self.pid)
    }
}

impl<S: GenServer> Server<S> {
    /// A handle on the server running as `pid` (unchecked: if `pid` is not
    /// an `S` server, calls time out and casts are ignored as unexpected
    /// messages).
    pub fn from_pid(pid: Pid) -> Server<S> {
        Server {
            pid,
            _s: PhantomData,
        }
    }

    /// The server registered under `name` on this node.
    pub fn whereis(name: &str) -> Option<Server<S>> {
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
    pub fn call(&self, req: S::Call) -> Result<S::Reply, CallError> {
        self.call_timeout(req, DEFAULT_CALL_TIMEOUT)
    }

    /// Calls the server and waits up to `timeout` for the reply.
    ///
    /// # Errors
    ///
    /// [`CallError::NoProc`] if the server is not alive,
    /// [`CallError::ServerDied`] if it ends before replying,
    /// [`CallError::Timeout`] if no reply came in time (a later reply is
    /// dropped, never delivered to the caller).
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
    pub fn call_timeout(&self, req: S::Call, timeout: Duration) -> Result<S::Reply, CallError> {
        self.call_inner(req, Some(timeout))
    }

    /// Calls the server and waits for the reply with no time limit (OTP's
    /// `infinity`): it still fails when the server dies.
    ///
    /// # Errors
    ///
    /// [`CallError::NoProc`] or [`CallError::ServerDied`], as
    /// [`Server::call_timeout`].
    ///
    /// # Panics
    ///
    /// Outside a graft process, and when a server calls itself.
    pub fn call_infinity(&self, req: S::Call) -> Result<S::Reply, CallError> {
        self.call_inner(req, None)
    }

    #[inline]
    fn call_inner(&self, req: S::Call, timeout: Option<Duration>) -> Result<S::Reply, CallError> {
        let me = self_pid();
        if me == self.pid {
            calling_self(me);
        }
        if self.pid.node() != graft::this_node() {
            return self.call_on_other_node(req, timeout);
        }
        let guard = caller_guard();
        // The monitor reference is the call's tag (as in OTP): unique, and
        // its `ProcessDied` is the failure path.
        let tag = monitor(self.pid);
        guard.set(Some(tag));
        let from = ReplyTo {
            pid: me,
            tag,
            guard: guard.clone(),
            remote: false,
            _r: PhantomData,
        };
        send(self.pid, RequestOf::<S>::Call { req, from });
        let got = receive()
            .when(
                move |r: &Reply<S::Reply>| r.tag == tag,
                |r: Reply<S::Reply>| Ok(r.value),
            )
            .when(
                move |d: &ProcessDied| d.monitor == tag,
                |d: ProcessDied| Err(d.reason),
            );
        let got = match timeout {
            Some(t) => got.timeout(t),
            None => Some(got.wait()),
        };
        match got {
            Some(Ok(v)) => {
                // The replier has cleared the guard.
                demonitor_flush(tag);
                Ok(v)
            }
            Some(Err(reason)) => {
                // A process the server handed the `ReplyTo` to may have
                // replied just as the server died: take that reply too.
                guard.set(None);
                take_reply::<S::Reply>(tag).ok_or(match reason {
                    ExitReason::NoProc => CallError::NoProc,
                    reason => CallError::ServerDied(reason),
                })
            }
            None => {
                guard.set(None);
                demonitor_flush(tag);
                // A reply sent before the guard was cleared is already here.
                take_reply::<S::Reply>(tag).ok_or(CallError::Timeout)
            }
        }
    }

    /// A call to a server on another node: the request travels encoded with
    /// the monitor's reference as its tag, and the reply comes back the same
    /// way (one round trip). A reply that arrives after a timeout is dropped
    /// at this process's next remote call.
    fn call_on_other_node(
        &self,
        req: S::Call,
        timeout: Option<Duration>,
    ) -> Result<S::Reply, CallError> {
        // Late replies of earlier calls that timed out.
        while receive()
            .on(|_: RemoteReply| ())
            .timeout(Duration::ZERO)
            .is_some()
        {}
        let bytes = req
            .encode_remote()
            .map_err(|e| CallError::Remote(e.to_string()))?
            .1;
        let tag = monitor(self.pid);
        send(
            self.pid,
            RemoteRequest::Call {
                bytes,
                from: self_pid(),
                tag,
            },
        );
        let got = receive()
            .when(
                move |r: &RemoteReply| r.tag == tag,
                |r: RemoteReply| Ok(r.bytes),
            )
            .when(
                move |d: &ProcessDied| d.monitor == tag,
                |d: ProcessDied| Err(d.reason),
            );
        let got = match timeout {
            Some(t) => got.timeout(t),
            None => Some(got.wait()),
        };
        demonitor_flush(tag);
        match got {
            Some(Ok(Ok(bytes))) => {
                S::Reply::decode_remote(&bytes).map_err(|e| CallError::Remote(e.to_string()))
            }
            Some(Ok(Err(why))) => Err(CallError::Remote(why)),
            Some(Err(ExitReason::NoProc)) => Err(CallError::NoProc),
            Some(Err(ExitReason::NoConnection)) => Err(CallError::Remote(format!(
                "lost the connection to {}",
                self.pid.node()
            ))),
            Some(Err(reason)) => Err(CallError::ServerDied(reason)),
            None => Err(CallError::Timeout),
        }
    }

    /// Sends the server a cast (never blocks, never fails: a cast to a dead
    /// server is dropped).
    pub fn cast(&self, msg: S::Cast) {
        if self.pid.node() != graft::this_node() {
            match msg.encode_remote() {
                Ok((_, bytes)) => send(self.pid, RemoteRequest::Cast { bytes }),
                Err(e) => log::error!("gen_server: cast to {} dropped: {e}", self.pid),
            }
            return;
        }
        send(self.pid, RequestOf::<S>::Cast(msg));
    }

    /// Stops the server with `reason` (its `terminate` runs) and waits until
    /// it has ended (OTP's `gen_server:stop`). Note that a reason other than
    /// `Normal` also reaches the processes linked to the server, the caller
    /// of [`start`] included.
    ///
    /// # Errors
    ///
    /// [`CallError::NoProc`] if it was not alive; [`CallError::ServerDied`]
    /// if it ended with another reason (e.g. `terminate` panicked).
    ///
    /// # Panics
    ///
    /// When a server stops itself this way (it would wait for itself; OTP
    /// exits with `calling_self`): return [`Flow::Stop`] instead.
    pub fn stop(&self, reason: ExitReason) -> Result<(), CallError> {
        let me = self_pid();
        if me == self.pid {
            calling_self(me);
        }
        let m = monitor(self.pid);
        if self.pid.node() != graft::this_node() {
            send(self.pid, RemoteRequest::Stop(reason.clone()));
        } else {
            send(self.pid, RequestOf::<S>::Stop(reason.clone()));
        }
        let died = receive()
            .when(move |d: &ProcessDied| d.monitor == m, |d: ProcessDied| d)
            .wait();
        match died.reason {
            ExitReason::NoProc => Err(CallError::NoProc),
            r if r == reason => Ok(()),
            r => Err(CallError::ServerDied(r)),
        }
    }
}

/// The reply tagged `tag` if it is in the mailbox now (the guard is
/// cleared: no other can come).
#[cold]
fn take_reply<R: Message>(tag: MonitorRef) -> Option<R> {
    receive()
        .when(move |r: &Reply<R>| r.tag == tag, |r: Reply<R>| r.value)
        .timeout(Duration::ZERO)
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
/// A remote call is one round trip: the request travels encoded, tagged with
/// the monitor's reference, and the reply comes back the same way. A reply
/// that arrives after a timeout is dropped at the caller's next remote call.
impl<S: GenServer> Server<S>
where
    S::Call: graft::Mobile,
    S::Cast: graft::Mobile,
    S::Reply: graft::Mobile,
{
    /// [`Server::call`] for a server on any node.
    ///
    /// # Errors
    ///
    /// As [`Server::call_timeout`], plus [`CallError::Remote`] when the
    /// server's node is unreachable or lost.
    pub fn call_remote(&self, req: S::Call) -> Result<S::Reply, CallError> {
        self.call(req)
    }

    /// [`Server::call_timeout`] for a server on any node.
    ///
    /// # Errors
    ///
    /// As [`Server::call_remote`].
    pub fn call_remote_timeout(
        &self,
        req: S::Call,
        timeout: Duration,
    ) -> Result<S::Reply, CallError> {
        self.call_timeout(req, timeout)
    }

    /// [`Server::cast`] for a server on any node (never blocks, never
    /// fails; casts and calls from one process arrive in order).
    pub fn cast_remote(&self, msg: S::Cast) {
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
    start_inner(server, None)
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
    start_inner(server, Some(name.to_string()))
}

fn start_inner<S: GenServer>(server: S, name: Option<String>) -> Result<Server<S>, StartError> {
    let parent = self_pid();
    let tag = graft::make_ref();
    let (pid, m) = spawn_opts()
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
                if let Err(e) = register(name, self_pid()) {
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
                    let reason = serve(&mut server, Some(parent));
                    if !reason.is_normal() {
                        exit_self(reason);
                    }
                }
                Err(reason) => {
                    fail(StartError::Init(reason.clone()));
                    if !reason.is_normal() {
                        exit_self(reason);
                    }
                }
            }
        })
        .map_err(|e| StartError::Spawn(e.to_string()))?;
    let result = receive()
        .when(move |a: &InitAck| a.tag == tag, |a: InitAck| a.result)
        .when(
            move |d: &ProcessDied| d.monitor == m,
            |d: ProcessDied| Err(StartError::Exited(d.reason)),
        )
        .wait();
    demonitor_flush(m);
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
        Ok(()) => serve(&mut server, None),
        Err(reason) => reason,
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
    Remote(RemoteRequest),
    ParentExit(ExitReason),
    Info(Unknown),
    Sys(graft::observe::SysRequest),
}

/// Turns a request from another node into the local envelope (decoding its
/// payload as the server's types); `None` (logged) if it does not decode.
fn remote_to_local<S: GenServer>(r: RemoteRequest) -> Option<RequestOf<S>> {
    let decoded = match r {
        RemoteRequest::Call { bytes, from, tag } => S::Call::decode_remote(&bytes).map(|req| {
            let guard = Arc::new(CallGuard::default());
            guard.set(Some(tag));
            Request::Call {
                req,
                from: ReplyTo {
                    pid: from,
                    tag,
                    guard,
                    remote: true,
                    _r: PhantomData,
                },
            }
        }),
        RemoteRequest::Cast { bytes } => S::Cast::decode_remote(&bytes).map(Request::Cast),
        RemoteRequest::Stop(reason) => Ok(Request::Stop(reason)),
    };
    match decoded {
        Ok(req) => Some(req),
        Err(e) => {
            log::warn!("gen_server {}: dropping a remote request: {e}", self_pid());
            None
        }
    }
}

/// The server loop: receive, dispatch, until a callback stops it; then
/// `terminate` and the pending reply. Returns the exit reason.
fn serve<S: GenServer>(server: &mut S, parent: Option<Pid>) -> ExitReason {
    crate::sys::enter::<S>();
    let (reason, pending) = loop {
        let event = receive()
            .on(|m: RequestOf<S>| Event::<S>::Request(m))
            .on(|m: graft::observe::SysRequest| Event::Sys(m))
            .on(|m: RemoteRequest| Event::Remote(m))
            .when(
                move |s: &ExitSignal| Some(s.from) == parent,
                |s: ExitSignal| Event::ParentExit(s.reason),
            )
            .any(Event::Info)
            .wait();
        let event = match event {
            Event::Remote(r) => match remote_to_local::<S>(r) {
                Some(local) => Event::Request(local),
                None => continue,
            },
            other => other,
        };
        let flow = match event {
            Event::Remote(_) => continue,
            Event::Sys(m) => {
                crate::sys::handle(server, m);
                continue;
            }
            Event::Request(Request::Call { req, from }) => {
                match guarded(|| server.handle_call(req, &from)) {
                    Ok(CallResult::Reply(r)) => {
                        from.reply(r);
                        continue;
                    }
                    Ok(CallResult::NoReply) => continue,
                    Ok(CallResult::Stop(reason, reply)) => {
                        break (reason, reply.map(|r| (from, r)));
                    }
                    Err(reason) => Flow::Stop(reason),
                }
            }
            Event::Request(Request::Cast(msg)) => {
                guarded(|| server.handle_cast(msg)).unwrap_or_else(Flow::Stop)
            }
            Event::Request(Request::Stop(reason)) => Flow::Stop(reason),
            Event::ParentExit(reason) => Flow::Stop(reason),
            Event::Info(msg) => guarded(|| server.handle_info(msg)).unwrap_or_else(Flow::Stop),
        };
        if let Flow::Stop(reason) = flow {
            break (reason, None);
        }
    };
    let reason = match guarded(|| server.terminate(&reason)) {
        Ok(()) => reason,
        Err(crash) => {
            log::error!("gen_server {}: terminate panicked: {crash}", self_pid());
            crash
        }
    };
    if let Some((from, r)) = pending {
        from.reply(r);
    }
    if !matches!(reason, ExitReason::Normal | ExitReason::Shutdown) {
        log::error!("gen_server {} terminating: {reason}", self_pid());
    }
    reason
}
