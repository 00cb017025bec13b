//! `gen_statem`: a process that is a state machine, as OTP's `gen_statem`:
//! events (calls, casts, other messages, timeouts, events the machine makes
//! itself) are handled against the current state, and each handler returns
//! a [`Transition`] (the next state and a list of [`Action`]s).
//!
//! # Callback modes
//!
//! OTP has two; both are here.
//!
//! * **handle-event** (`handle_event_function`): one function gets every
//!   event with the state; in Rust, `State` is an enum (or any
//!   `Clone + PartialEq` value) and [`GenStatem::handle_event`] matches on
//!   `(state, event)`.
//! * **state-functions** (`state_functions`): each state is a function. Set
//!   `type State = `[`StateFn<Self>`] (a named function pointer; two states
//!   are equal when their names are) and forward:
//!   `fn handle_event(&mut self, s: &StateFn<Self>, e: Event<Self>) -> Transition<Self> { s.call(self, e) }`.
//!
//! `const STATE_ENTER: bool = true` is OTP's `state_enter`: after every
//! state change (and for the initial state, and on
//! [`Transition::repeat`]) the machine gets [`Event::Enter`]`(old_state)`
//! before any other event. An enter call may keep the state, set timeouts
//! and reply; it may not change the state, postpone or insert events (the
//! machine stops with an error reason if it does, as OTP's does).
//!
//! The machine's data is `self` (as in [`GenServer`](crate::gen_server::GenServer)).
//!
//! # The protocol
//!
//! A machine is an ordinary graft process running the loop in [`run`]. Its
//! mailbox gets `call` requests (with a [`ReplyTo`]), casts, `stop`
//! requests, timer tokens (local `send_after`s the loop made itself), and
//! anything else, which becomes [`Event::Info`]. Calls are OTP's: the caller
//! monitors the machine, uses the monitor reference as the call's tag, and
//! waits for the tagged reply or the `ProcessDied` (see
//! [`Statem::call_timeout`]). As in graft's gen_server, each calling process
//! owns a late-reply guard: a reply that comes after the caller gave up is
//! dropped by the replier and never lands in the caller's mailbox.
//!
//! Between receives, the loop keeps an internal **event queue** that is
//! drained before the mailbox is looked at:
//!
//! 1. a handler's result is applied in this order: replies are sent (in the
//!    order of the actions); on a **state change** the running state timeout
//!    is cancelled and the enter call (if `STATE_ENTER`) runs;
//! 2. a postponed event is kept (oldest first); on a state change every
//!    postponed event goes back to the front of the queue, oldest first;
//! 3. [`Action::NextEvent`]s are inserted before everything queued, in the
//!    order they were given (so they run next, before retried postponed
//!    events);
//! 4. timeouts start: an **event timeout** is cancelled by any event (it is
//!    not started at all when events are queued), a **state timeout** by a
//!    state change, a **generic timeout** (named) only by its own
//!    cancellation or restart. A zero time puts the timeout event at the end
//!    of the queue at once (an event timeout only when the queue is empty).
//!
//! A timeout's payload stays in the machine; the timer carries only a
//! sequence number, so a timer that fired after it was cancelled or
//! restarted is recognised and dropped.
//!
//! Supervision is gen_server's: [`start`] links the machine to its starter
//! and waits for `init`; a machine that traps exits stops (running
//! [`GenStatem::terminate`]) on an exit signal from its parent. Use
//! [`child_spec`] in a [`Supervisor`](crate::supervisor::Supervisor).
//!
//! Across nodes: [`start_on`] starts a `Mobile` machine on another node and
//! [`Statem::call`], [`Statem::cast`] and [`Statem::stop`] reach it there
//! (the request and the reply travel encoded, one frame each way: the
//! request carries the call's monitor, the reply comes back through the
//! caller's alias). Calls speak gen_server's protocol (`call.rs`): the same
//! [`ReplyTo`], the same ref-trick wait, the same late-reply guard.
//!
//! [`Action::Hibernate`] makes the loop call [`graft::hibernate`] before
//! its next receive: the dead part of the machine's stack is given back
//! while it waits.
//!
//! # Examples
//!
//! A switch that counts its flips, in handle-event mode:
//!
//! ```
//! use graft_otp::prelude::*;
//! use graft_otp::gen_statem::{self, Event, GenStatem, Transition};
//!
//! #[derive(Clone, Debug, PartialEq)]
//! enum Light { Off, On }
//!
//! struct Switch { flips: u32 }
//!
//! impl GenStatem for Switch {
//!     type State = Light;
//!     type Call = ();        // "flip, and tell me the count"
//!     type Cast = ();
//!     type Reply = u32;
//!     type Internal = ();
//!     fn init(&mut self) -> Transition<Self> {
//!         Transition::next(Light::Off)
//!     }
//!     fn handle_event(&mut self, state: &Light, event: Event<Self>) -> Transition<Self> {
//!         match event {
//!             Event::Call((), from) => {
//!                 self.flips += 1;
//!                 let next = if *state == Light::Off { Light::On } else { Light::Off };
//!                 Transition::next(next).reply(from, self.flips)
//!             }
//!             _ => Transition::keep(),
//!         }
//!     }
//! }
//!
//! let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
//! let n = node.run(|| {
//!     let sw = gen_statem::start(Switch { flips: 0 }).unwrap();
//!     sw.call(()).unwrap();
//!     sw.call(()).unwrap()
//! }).unwrap();
//! assert_eq!(n, 2);
//! node.shutdown();
//! ```

use crate::call;
use crate::gen_server::{CallError, StartError};
use crate::supervisor::ChildSpec;
use graft::{
    cancel_timer, demonitor_flush, exit_self, receive, register, self_pid, send, send_after,
    spawn_opts, unlink, whereis, Alias, Error, ExitReason, ExitSignal, Message, MonitorRef, Pid,
    ProcessDied, TimerRef, Unknown,
};
use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Duration;

/// The callbacks of a state machine; its data is `self`.
///
/// See the [module docs](self) for the two callback modes and the order in
/// which a [`Transition`] is applied. A panic in a callback stops the
/// machine with `ExitReason::Other(message)` (after `terminate`).
pub trait GenStatem: Send + 'static {
    /// The machine's state: an enum in handle-event mode, [`StateFn<Self>`]
    /// in state-functions mode. A state change is `new != old`.
    type State: Clone + PartialEq + fmt::Debug + Send + 'static;
    /// Requests that expect a reply ([`Event::Call`]).
    type Call: Message;
    /// Requests that do not ([`Event::Cast`]).
    type Cast: Message;
    /// The answer to a call.
    type Reply: Message;
    /// What the machine sends itself: the payload of its timeouts and of
    /// [`Event::Internal`] events (never leaves the process, so any type).
    type Internal: Send + 'static;

    /// OTP's `state_enter` callback mode: deliver [`Event::Enter`] on every
    /// state entry.
    const STATE_ENTER: bool = false;

    /// Runs in the new process before [`start`] returns: returns
    /// [`Transition::next`]`(initial state)` with any actions (timeouts,
    /// next events), or [`Transition::stop`] to fail the start with that
    /// reason. Call [`graft::trap_exits`]`(true)` here to have `terminate`
    /// run when a supervisor shuts the machine down.
    fn init(&mut self) -> Transition<Self>;

    /// Handles one event in `state`.
    fn handle_event(&mut self, state: &Self::State, event: Event<Self>) -> Transition<Self>;

    /// Runs once when the machine stops (as
    /// [`GenServer::terminate`](crate::gen_server::GenServer::terminate)).
    fn terminate(&mut self, reason: &ExitReason, state: &Self::State) {
        let _ = (reason, state);
    }
}

/// One event, as a machine's handler gets it.
pub enum Event<M: GenStatem + ?Sized> {
    /// `{call, From}`: answer through the [`ReplyTo`] (now with
    /// [`Transition::reply`], or later with [`ReplyTo::reply`]).
    Call(M::Call, ReplyTo<M::Reply>),
    /// `cast`.
    Cast(M::Cast),
    /// `info`: any other message.
    Info(Unknown),
    /// `enter` (with `STATE_ENTER`): the state was entered from this old
    /// state (the initial state and repeats: the state itself).
    Enter(M::State),
    /// `timeout`: the event timeout fired.
    EventTimeout(M::Internal),
    /// `state_timeout`: the state timeout fired.
    StateTimeout(M::Internal),
    /// `{timeout, Name}`: the generic timeout of this name fired.
    Timeout(&'static str, M::Internal),
    /// `internal`: inserted by an [`Action::NextEvent`].
    Internal(M::Internal),
}

impl<M: GenStatem + ?Sized> fmt::Debug for Event<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Call(_, from) => write!(f, "Call(.., {from:?})"),
            Event::Cast(_) => f.write_str("Cast(..)"),
            Event::Info(u) => write!(f, "Info({u:?})"),
            Event::Enter(old) => write!(f, "Enter({old:?})"),
            Event::EventTimeout(_) => f.write_str("EventTimeout(..)"),
            Event::StateTimeout(_) => f.write_str("StateTimeout(..)"),
            Event::Timeout(name, _) => write!(f, "Timeout({name:?}, ..)"),
            Event::Internal(_) => f.write_str("Internal(..)"),
        }
    }
}

/// A transition action (OTP's `action()`).
pub enum Action<M: GenStatem + ?Sized> {
    /// `{reply, From, Reply}`: sent when the actions are applied, in order.
    Reply(ReplyTo<M::Reply>, M::Reply),
    /// `postpone`: the handler hands the event back; it is retried after
    /// the next state change, in the order it first arrived.
    Postpone(Event<M>),
    /// `{next_event, Type, Content}`: handled next, before any queued event.
    NextEvent(Event<M>),
    /// `{timeout, Time, Msg}`: an event timeout (cancelled by any event).
    EventTimeout(Duration, M::Internal),
    /// `{state_timeout, Time, Msg}`: cancelled by a state change; setting it
    /// again restarts it.
    StateTimeout(Duration, M::Internal),
    /// `{{timeout, Name}, Time, Msg}`: a generic timeout, restarted by
    /// setting the same name again.
    Timeout(&'static str, Duration, M::Internal),
    /// `{timeout, cancel}`.
    CancelEventTimeout,
    /// `{state_timeout, cancel}`.
    CancelStateTimeout,
    /// `{{timeout, Name}, cancel}`.
    CancelTimeout(&'static str),
    /// `hibernate`: give the stack's memory back while waiting for the next
    /// message (see [`graft::hibernate`]).
    Hibernate,
}

impl<M: GenStatem + ?Sized> fmt::Debug for Action<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Reply(from, _) => write!(f, "Reply({from:?}, ..)"),
            Action::Postpone(e) => write!(f, "Postpone({e:?})"),
            Action::NextEvent(e) => write!(f, "NextEvent({e:?})"),
            Action::EventTimeout(d, _) => write!(f, "EventTimeout({d:?}, ..)"),
            Action::StateTimeout(d, _) => write!(f, "StateTimeout({d:?}, ..)"),
            Action::Timeout(n, d, _) => write!(f, "Timeout({n:?}, {d:?}, ..)"),
            Action::CancelEventTimeout => f.write_str("CancelEventTimeout"),
            Action::CancelStateTimeout => f.write_str("CancelStateTimeout"),
            Action::CancelTimeout(n) => write!(f, "CancelTimeout({n:?})"),
            Action::Hibernate => f.write_str("Hibernate"),
        }
    }
}

/// Where the machine goes.
enum Next<S> {
    State(S),
    Keep,
    Repeat,
    Stop(ExitReason),
}

/// What a handler returns: where the machine goes next, and the actions.
///
/// Built with [`Transition::next`], [`Transition::keep`],
/// [`Transition::repeat`] or [`Transition::stop`], then actions chained on:
///
/// ```
/// use graft_otp::gen_statem::{Event, GenStatem, Transition};
/// use std::time::Duration;
/// # struct Door;
/// # impl GenStatem for Door {
/// #     type State = bool; type Call = (); type Cast = (); type Reply = ();
/// #     type Internal = &'static str;
/// #     fn init(&mut self) -> Transition<Self> { Transition::next(false) }
/// #     fn handle_event(&mut self, _: &bool, _: Event<Self>) -> Transition<Self> { Transition::keep() }
/// # }
/// let t: Transition<Door> = Transition::next(true)
///     .state_timeout(Duration::from_secs(10), "lock")
///     .next_event(Event::Internal("log"));
/// ```
pub struct Transition<M: GenStatem + ?Sized> {
    next: Next<M::State>,
    /// The first action inline (the common single reply allocates nothing).
    first: Option<Action<M>>,
    rest: Vec<Action<M>>,
}

impl<M: GenStatem + ?Sized> fmt::Debug for Transition<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let next = match &self.next {
            Next::State(s) => format!("next {s:?}"),
            Next::Keep => "keep".into(),
            Next::Repeat => "repeat".into(),
            Next::Stop(r) => format!("stop {r}"),
        };
        f.debug_struct("Transition")
            .field("next", &next)
            .field("actions", &self.actions().collect::<Vec<_>>())
            .finish()
    }
}

impl<M: GenStatem + ?Sized> Transition<M> {
    fn with(next: Next<M::State>) -> Self {
        Transition {
            next,
            first: None,
            rest: Vec::new(),
        }
    }

    fn actions(&self) -> impl Iterator<Item = &Action<M>> {
        self.first.iter().chain(self.rest.iter())
    }

    /// `next_state`: go to `state` (a state change if it differs from the
    /// current one).
    pub fn next(state: M::State) -> Self {
        Self::with(Next::State(state))
    }

    /// `keep_state` / `keep_state_and_data`: stay (the data is `self`, kept
    /// as the handler left it).
    pub fn keep() -> Self {
        Self::with(Next::Keep)
    }

    /// `repeat_state`: stay, but run the enter call again (with
    /// `STATE_ENTER`); not a state change (postponed events stay).
    pub fn repeat() -> Self {
        Self::with(Next::Repeat)
    }

    /// `stop` / `stop_and_reply`: replies in the actions are sent, then
    /// `terminate` runs, then the process exits with `reason`.
    pub fn stop(reason: ExitReason) -> Self {
        Self::with(Next::Stop(reason))
    }

    /// Adds an action.
    pub fn action(mut self, a: Action<M>) -> Self {
        if self.first.is_none() {
            self.first = Some(a);
        } else {
            self.rest.push(a);
        }
        self
    }

    /// Adds [`Action::Reply`].
    pub fn reply(self, from: ReplyTo<M::Reply>, value: M::Reply) -> Self {
        self.action(Action::Reply(from, value))
    }

    /// Adds [`Action::Postpone`] of `event` (the one being handled).
    pub fn postpone(self, event: Event<M>) -> Self {
        self.action(Action::Postpone(event))
    }

    /// Adds [`Action::NextEvent`].
    pub fn next_event(self, event: Event<M>) -> Self {
        self.action(Action::NextEvent(event))
    }

    /// Adds [`Action::EventTimeout`].
    pub fn event_timeout(self, after: Duration, msg: M::Internal) -> Self {
        self.action(Action::EventTimeout(after, msg))
    }

    /// Adds [`Action::StateTimeout`].
    pub fn state_timeout(self, after: Duration, msg: M::Internal) -> Self {
        self.action(Action::StateTimeout(after, msg))
    }

    /// Adds [`Action::Timeout`] (a generic timeout named `name`).
    pub fn timeout(self, name: &'static str, after: Duration, msg: M::Internal) -> Self {
        self.action(Action::Timeout(name, after, msg))
    }

    /// Adds [`Action::Hibernate`].
    pub fn hibernate(self) -> Self {
        self.action(Action::Hibernate)
    }
}

/// A state of a machine in state-functions mode: a named handler. Two
/// `StateFn`s are the same state when their names are equal (the name is
/// the state, as OTP's atom; the function is looked up from it).
///
/// ```
/// use graft_otp::prelude::*;
/// use graft_otp::gen_statem::{self, Event, GenStatem, StateFn, Transition};
///
/// struct Toggle;
/// impl Toggle {
///     const OFF: StateFn<Toggle> = StateFn::new("off", Toggle::off);
///     const ON: StateFn<Toggle> = StateFn::new("on", Toggle::on);
///     fn off(&mut self, e: Event<Self>) -> Transition<Self> {
///         match e {
///             Event::Call((), from) => Transition::next(Self::ON).reply(from, "on"),
///             _ => Transition::keep(),
///         }
///     }
///     fn on(&mut self, e: Event<Self>) -> Transition<Self> {
///         match e {
///             Event::Call((), from) => Transition::next(Self::OFF).reply(from, "off"),
///             _ => Transition::keep(),
///         }
///     }
/// }
/// impl GenStatem for Toggle {
///     type State = StateFn<Self>;
///     type Call = ();
///     type Cast = ();
///     type Reply = &'static str;
///     type Internal = ();
///     fn init(&mut self) -> Transition<Self> { Transition::next(Self::OFF) }
///     fn handle_event(&mut self, s: &StateFn<Self>, e: Event<Self>) -> Transition<Self> {
///         s.call(self, e)
///     }
/// }
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let got = node.run(|| {
///     let t = gen_statem::start(Toggle).unwrap();
///     (t.call(()).unwrap(), t.call(()).unwrap())
/// }).unwrap();
/// assert_eq!(got, ("on", "off"));
/// node.shutdown();
/// ```
pub struct StateFn<M: GenStatem + ?Sized> {
    name: &'static str,
    f: StateFnPtr<M>,
}

/// The handler of one state in state-functions mode.
pub type StateFnPtr<M> = fn(&mut M, Event<M>) -> Transition<M>;

impl<M: GenStatem + ?Sized> StateFn<M> {
    /// The state `name`, handled by `f`.
    pub const fn new(name: &'static str, f: StateFnPtr<M>) -> Self {
        StateFn { name, f }
    }

    /// The state's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Runs this state's handler on `event`.
    pub fn call(&self, machine: &mut M, event: Event<M>) -> Transition<M> {
        (self.f)(machine, event)
    }
}

impl<M: GenStatem + ?Sized> Clone for StateFn<M> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<M: GenStatem + ?Sized> Copy for StateFn<M> {}
impl<M: GenStatem + ?Sized> PartialEq for StateFn<M> {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.name, other.name) || self.name == other.name
    }
}
impl<M: GenStatem + ?Sized> Eq for StateFn<M> {}
impl<M: GenStatem + ?Sized> fmt::Debug for StateFn<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

// ---------------------------------------------------------------------------
// Calls: the protocol every behaviour speaks (`call.rs`).

/// Where to send the answer to one call (OTP's `From`): the same type as
/// gen_server's.
pub use crate::call::ReplyTo;

/// What a local caller sends a machine.
enum Request<C, K, R> {
    Call { req: C, from: ReplyTo<R> },
    Cast(K),
    Stop(ExitReason),
}

/// The acknowledgement a new machine sends its starter after `init`.
struct InitAck {
    tag: MonitorRef,
    result: Result<(), StartError>,
}

/// A timer the loop set for itself fired (its sequence number).
struct TimerFired(u64);

/// What a caller on another node sends a machine (payloads encoded as the
/// machine's `Call`/`Cast` types).
#[derive(Debug, graft::Mobile)]
enum StatemRemoteRequest {
    Call {
        bytes: Vec<u8>,
        /// The caller's request alias (answered through it).
        from: Alias,
        /// The caller's reply type (its descriptor id).
        reply: u64,
    },
    Cast {
        bytes: Vec<u8>,
    },
    Stop(ExitReason),
}

impl<C: Send + 'static, K: Send + 'static, R: Send + 'static> Message for Request<C, K, R> {}
impl Message for InitAck {}
impl Message for TimerFired {}

type RequestOf<M> =
    Request<<M as GenStatem>::Call, <M as GenStatem>::Cast, <M as GenStatem>::Reply>;

// ---------------------------------------------------------------------------
// The handle.

/// A typed handle on a running machine (a [`Pid`] that knows the machine's
/// request types). `Copy`; compares and hashes like the pid.
pub struct Statem<M> {
    pid: Pid,
    _m: PhantomData<fn() -> M>,
}

impl<M> Clone for Statem<M> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<M> Copy for Statem<M> {}
impl<M> PartialEq for Statem<M> {
    fn eq(&self, other: &Self) -> bool {
        self.pid == other.pid
    }
}
impl<M> Eq for Statem<M> {}
impl<M> std::hash::Hash for Statem<M> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.pid.hash(h);
    }
}
impl<M> fmt::Debug for Statem<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Statem({})", self.pid)
    }
}

/// A machine handle travels as its pid.
impl<M: GenStatem + Sync> graft::Mobile for Statem<M> {
    const WIRE_MIN: usize = <Pid as graft::Mobile>::WIRE_MIN;
    fn describe(d: &mut graft::graph::Describer) {
        d.write("Statem<");
        d.write(std::any::type_name::<M>());
        d.write(">");
    }
    fn encode<F: graft::graph::Format>(&self, e: &mut graft::graph::Encoder<'_, F>) {
        graft::Mobile::encode(&self.pid, e);
    }
    fn decode<D: graft::graph::Source>(
        d: &mut graft::graph::Decoder<'_, D>,
    ) -> Result<Self, graft::graph::DecodeError> {
        Ok(Statem::from_pid(<Pid as graft::Mobile>::decode(d)?))
    }
}

impl<M: GenStatem> Statem<M> {
    /// A handle on the machine running as `pid` (unchecked).
    pub fn from_pid(pid: Pid) -> Statem<M> {
        Statem {
            pid,
            _m: PhantomData,
        }
    }

    /// The machine registered under `name` on this node.
    pub fn whereis(name: &str) -> Option<Statem<M>> {
        whereis(name).map(Statem::from_pid)
    }

    /// The machine registered under `name` on `node` (this node included).
    ///
    /// # Errors
    ///
    /// As [`graft::whereis_on`]: the node is not connected, or did not
    /// answer.
    pub fn whereis_on(name: &str, node: graft::NodeId) -> Result<Option<Statem<M>>, Error> {
        graft::whereis_on(name, node).map(|p| p.map(Statem::from_pid))
    }

    /// The machine's pid.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Calls the machine and waits for its reply with no time limit, as
    /// OTP's `gen_statem:call/2` (whose default is `infinity`, unlike
    /// `gen_server:call/2`'s 5 s): the call still ends if the machine dies
    /// or its node is lost. Use [`Statem::call_timeout`] to bound it.
    ///
    /// # Errors
    ///
    /// As [`Statem::call_infinity`].
    ///
    /// # Panics
    ///
    /// Outside a graft process, and when a machine calls itself.
    pub fn call(&self, req: M::Call) -> Result<M::Reply, CallError> {
        self.call_inner(req, None)
    }

    /// Calls the machine (an [`Event::Call`]) and waits up to `timeout`.
    ///
    /// # Errors
    ///
    /// [`CallError::NoProc`] if the machine is not alive,
    /// [`CallError::Exited`] if it ends before replying,
    /// [`CallError::Timeout`] (a later reply is dropped),
    /// [`CallError::Remote`] when its node cannot be reached or its types
    /// are not `Mobile`.
    ///
    /// # Panics
    ///
    /// Outside a graft process, and when a machine calls itself.
    pub fn call_timeout(&self, req: M::Call, timeout: Duration) -> Result<M::Reply, CallError> {
        self.call_inner(req, Some(timeout))
    }

    /// Calls with no time limit (OTP's `infinity`).
    ///
    /// # Errors
    ///
    /// [`CallError::NoProc`], [`CallError::Exited`], [`CallError::NoConnection`],
    /// [`CallError::Remote`].
    ///
    /// # Panics
    ///
    /// As [`Statem::call`].
    pub fn call_infinity(&self, req: M::Call) -> Result<M::Reply, CallError> {
        self.call_inner(req, None)
    }

    #[inline]
    fn call_inner(&self, req: M::Call, timeout: Option<Duration>) -> Result<M::Reply, CallError> {
        let me = self_pid();
        if me == self.pid {
            calling_self(me);
        }
        if self.pid.node() != graft::this_node() {
            return self.call_remote(req, timeout);
        }
        call::call_local(me, self.pid, timeout, |caller| {
            send(
                self.pid,
                RequestOf::<M>::Call {
                    req,
                    from: ReplyTo::local(caller),
                },
            )
        })
    }

    /// A call to a machine on another node, on the runtime's request
    /// primitive (as gen_server's): one encoded request that carries the
    /// monitor, one encoded reply through the caller's alias.
    #[cold]
    fn call_remote(&self, req: M::Call, timeout: Option<Duration>) -> Result<M::Reply, CallError> {
        call::call_remote::<M::Call, M::Reply, _>(self.pid, req, timeout, |bytes, from, reply| {
            StatemRemoteRequest::Call { bytes, from, reply }
        })
    }

    /// Sends the machine a cast (an [`Event::Cast`]); never blocks, never
    /// fails.
    pub fn cast(&self, msg: M::Cast) {
        if self.pid.node() != graft::this_node() {
            match msg.encode_remote() {
                Ok((_, bytes)) => send(self.pid, StatemRemoteRequest::Cast { bytes }),
                Err(e) => log::error!("gen_statem: cast to {} dropped: {e}", self.pid),
            }
            return;
        }
        send(self.pid, RequestOf::<M>::Cast(msg));
    }

    /// Stops the machine with `reason` (its `terminate` runs) and waits
    /// until it has ended (OTP's `gen_statem:stop`).
    ///
    /// # Errors
    ///
    /// [`CallError::NoProc`] if it was not alive, [`CallError::Exited`]
    /// if it ended with another reason.
    ///
    /// # Panics
    ///
    /// When a machine stops itself this way (return [`Transition::stop`]).
    pub fn stop(&self, reason: ExitReason) -> Result<(), CallError> {
        let me = self_pid();
        if me == self.pid {
            calling_self(me);
        }
        let remote = self.pid.node() != graft::this_node();
        let pid = self.pid;
        call::stop_and_wait(pid, reason, |reason| {
            if remote {
                send(pid, StatemRemoteRequest::Stop(reason));
            } else {
                send(pid, RequestOf::<M>::Stop(reason));
            }
        })
    }
}

#[cold]
#[inline(never)]
fn calling_self(me: Pid) -> ! {
    panic!("gen_statem {me} called itself (calling_self)")
}

// ---------------------------------------------------------------------------
// Starting.

/// Starts `machine` in a new process linked to the caller (OTP's
/// `start_link`); returns once `init` has succeeded.
///
/// # Errors
///
/// [`StartError::Init`] if `init` returned [`Transition::stop`] (or
/// another transition than `next`) or panicked; [`StartError::Exited`] if
/// the process was killed during `init`; [`StartError::Spawn`].
///
/// # Panics
///
/// Outside a graft process.
pub fn start<M: GenStatem>(machine: M) -> Result<Statem<M>, StartError> {
    start_inner(machine, None)
}

/// Like [`start`], registering the machine under `name` first.
///
/// # Errors
///
/// As [`start`], and [`StartError::AlreadyStarted`].
///
/// ```
/// use graft_otp::prelude::*;
/// use graft_otp::gen_statem::{self, Event, GenStatem, Statem, Transition};
///
/// /// Holds casts back until it is opened (postponed, then replayed in order).
/// struct Gate(Vec<u32>);
/// impl GenStatem for Gate {
///     type State = bool; // open?
///     type Call = ();    // open, and tell me what came through
///     type Cast = u32;
///     type Reply = Vec<u32>;
///     type Internal = ();
///     fn init(&mut self) -> Transition<Self> { Transition::next(false) }
///     fn handle_event(&mut self, open: &bool, e: Event<Self>) -> Transition<Self> {
///         match (open, e) {
///             (false, e @ Event::Cast(_)) => Transition::keep().postpone(e),
///             (true, Event::Cast(n)) => { self.0.push(n); Transition::keep() }
///             (_, Event::Call((), from)) => {
///                 // Opening retries the postponed casts first.
///                 Transition::next(true).next_event(Event::Internal(())).reply(from, self.0.clone())
///             }
///             (_, Event::Internal(())) => Transition::keep(),
///             _ => Transition::keep(),
///         }
///     }
/// }
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let got = node.run(|| {
///     let g = gen_statem::start_named("gate", Gate(vec![])).unwrap();
///     assert_eq!(Statem::<Gate>::whereis("gate"), Some(g));
///     g.cast(1);
///     g.cast(2);
///     let before = g.call(()).unwrap(); // the reply is sent before the replay
///     (before, g.call(()).unwrap())
/// }).unwrap();
/// assert_eq!(got, (vec![], vec![1, 2]));
/// node.shutdown();
/// ```
pub fn start_named<M: GenStatem>(name: &str, machine: M) -> Result<Statem<M>, StartError> {
    start_inner(machine, Some(name.to_string()))
}

/// Starts `machine` on `node` (this node included), linked to the caller,
/// and waits until its `init` has run there. The machine travels, so it is
/// `Mobile`; its calls and casts then cross nodes (their types must be
/// `Mobile` too).
///
/// # Errors
///
/// As [`start`]; [`StartError::Spawn`] when `node` is unreachable.
///
/// ```
/// use graft_otp::prelude::*;
/// use graft_otp::gen_statem::{self, Event, GenStatem, Transition};
///
/// #[derive(Mobile)]
/// struct Counter(u64);
/// impl GenStatem for Counter {
///     type State = ();
///     type Call = u64;
///     type Cast = ();
///     type Reply = (u64, NodeId);
///     type Internal = ();
///     fn init(&mut self) -> Transition<Self> { Transition::next(()) }
///     fn handle_event(&mut self, _: &(), e: Event<Self>) -> Transition<Self> {
///         match e {
///             Event::Call(n, from) => {
///                 self.0 += n;
///                 Transition::keep().reply(from, (self.0, this_node()))
///             }
///             _ => Transition::keep(),
///         }
///     }
/// }
///
/// let a = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b = Node::start(NodeConfig::new("127.0.0.1:0").cookie("doc")).unwrap();
/// let b_id = a.connect(b.addr()).unwrap();
/// let got = a.run(move || {
///     let c = gen_statem::start_on(b_id, Counter(40)).unwrap();
///     c.call(2).unwrap()
/// }).unwrap();
/// assert_eq!(got, (42, b_id));
/// ```
pub fn start_on<M>(node: graft::NodeId, machine: M) -> Result<Statem<M>, StartError>
where
    M: GenStatem + graft::Mobile,
{
    if node == graft::this_node() {
        return start(machine);
    }
    let started = graft::call_on(node, machine, |machine: M| {
        start(machine).map(|s| {
            unlink(s.pid());
            s.pid()
        })
    });
    match started {
        Ok(Ok(pid)) => {
            graft::link(pid);
            Ok(Statem::from_pid(pid))
        }
        Ok(Err(e)) => Err(e),
        Err(e) => Err(StartError::Spawn(e.to_string())),
    }
}

/// A supervisor child that is the machine `make()` returns (a fresh one on
/// each restart), like [`ChildSpec::server`] for a gen_server.
///
/// ```
/// use graft_otp::prelude::*;
/// use graft_otp::gen_statem::{self, Event, GenStatem, Statem, Transition};
///
/// struct Idle;
/// impl GenStatem for Idle {
///     type State = ();
///     type Call = ();
///     type Cast = ();
///     type Reply = &'static str;
///     type Internal = ();
///     fn init(&mut self) -> Transition<Self> { Transition::next(()) }
///     fn handle_event(&mut self, _: &(), e: Event<Self>) -> Transition<Self> {
///         match e {
///             Event::Call((), from) => Transition::keep().reply(from, "idle"),
///             _ => Transition::keep(),
///         }
///     }
/// }
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let got = node.run(|| {
///     let sup = Supervisor::new(Strategy::OneForOne)
///         .child(gen_statem::child_spec("idle", || Idle))
///         .start()
///         .unwrap();
///     let m = Statem::<Idle>::from_pid(supervisor::get_child(sup, "idle").unwrap());
///     m.call(()).unwrap()
/// }).unwrap();
/// assert_eq!(got, "idle");
/// node.shutdown();
/// ```
pub fn child_spec<M, F>(id: impl Into<String>, make: F) -> ChildSpec
where
    M: GenStatem,
    F: Fn() -> M + Send + Sync + 'static,
{
    ChildSpec::new(id, move || start(make()).map(|s| s.pid()))
}

fn start_inner<M: GenStatem>(machine: M, name: Option<String>) -> Result<Statem<M>, StartError> {
    let parent = self_pid();
    let tag = graft::make_ref();
    let (pid, m) = spawn_opts()
        .link()
        .spawn_monitor(move || {
            let fail = |error: StartError| {
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
            let mut ack = Some(move |r: Result<(), StartError>| {
                if let Err(e) = &r {
                    let e = e.clone();
                    fail(e);
                } else {
                    send(parent, InitAck { tag, result: r });
                }
            });
            let reason = run_inner(machine, Some(parent), &mut ack);
            if !reason.is_normal() {
                exit_self(reason);
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
    result.map(|()| Statem::from_pid(pid))
}

/// Runs `machine` in the calling process (OTP's `enter_loop`): `init`, the
/// loop, `terminate`; returns the reason it stopped with. With no parent,
/// every trapped exit signal is an [`Event::Info`].
///
/// # Panics
///
/// Outside a graft process.
pub fn run<M: GenStatem>(machine: M) -> ExitReason {
    run_inner(machine, None, &mut None::<fn(Result<(), StartError>)>)
}

/// Runs `f`, turning a panic into `Err(Other(message))` and the process
/// ending itself into `Err(its reason)`; other unwinds pass through.
fn guarded<R>(f: impl FnOnce() -> R) -> Result<R, ExitReason> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Ok(r),
        Err(payload) => {
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

// ---------------------------------------------------------------------------
// The loop.

/// A running timer: the `send_after` that will deliver `TimerFired(seq)`,
/// and the payload kept here.
struct Timer<I> {
    tref: TimerRef,
    seq: u64,
    msg: I,
}

/// Which timer fired.
enum TimerKind {
    Event,
    State,
    Named(&'static str),
}

/// The loop's state besides the machine itself.
struct Machine<M: GenStatem> {
    state: M::State,
    /// Events to handle before the mailbox: inserted and retried ones.
    queue: VecDeque<Event<M>>,
    /// Postponed events, oldest first.
    postponed: Vec<Event<M>>,
    event_timer: Option<Timer<M::Internal>>,
    state_timer: Option<Timer<M::Internal>>,
    named: Vec<(&'static str, Timer<M::Internal>)>,
    /// The last timer sequence number given out.
    seq: u64,
    /// Hibernate before the next receive.
    hibernate: bool,
}

/// One thing the loop received.
enum Incoming<M: GenStatem> {
    Request(RequestOf<M>),
    Remote(StatemRemoteRequest),
    Timer(u64),
    Exit(ExitSignal),
    Info(Unknown),
}

/// The actions of one result, sorted out.
struct Applied<M: GenStatem> {
    /// The handled event, if handed back (more only if the handler built
    /// others: none is lost).
    postponed: Vec<Event<M>>,
    next_events: Vec<Event<M>>,
    timeouts: Vec<Action<M>>,
}

impl<M: GenStatem> Applied<M> {
    fn new() -> Self {
        Applied {
            postponed: Vec::new(),
            next_events: Vec::new(),
            timeouts: Vec::new(),
        }
    }
}

fn bad_return(what: &str) -> ExitReason {
    ExitReason::Other(format!("gen_statem: bad return from {what}"))
}

impl<M: GenStatem> Machine<M> {
    /// Sends the replies now and sorts the other actions into `applied`;
    /// `Err` for an action the context forbids (`enter`/`init`).
    fn sort_actions(
        &mut self,
        first: Option<Action<M>>,
        rest: Vec<Action<M>>,
        applied: &mut Applied<M>,
        context: Context,
    ) -> Result<(), ExitReason> {
        for a in first.into_iter().chain(rest) {
            match a {
                Action::Reply(from, v) => {
                    from.reply(v);
                }
                Action::Postpone(e) => {
                    if context != Context::Event {
                        return Err(bad_return(context.name()));
                    }
                    applied.postponed.push(e);
                }
                Action::NextEvent(e) => {
                    if context == Context::Enter {
                        return Err(bad_return(context.name()));
                    }
                    applied.next_events.push(e);
                }
                Action::Hibernate => self.hibernate = true,
                timeout => applied.timeouts.push(timeout),
            }
        }
        Ok(())
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn set_timer(&mut self, after: Duration, msg: M::Internal) -> Timer<M::Internal> {
        let seq = self.next_seq();
        let tref = send_after(after, self_pid(), TimerFired(seq));
        Timer { tref, seq, msg }
    }

    /// Starts (or cancels) the timeouts of one transition, in order.
    fn start_timeouts(&mut self, timeouts: Vec<Action<M>>) {
        for t in timeouts {
            match t {
                Action::EventTimeout(after, msg) => {
                    cancel(self.event_timer.take());
                    if !self.queue.is_empty() {
                        // Cancelled by the event that is already queued.
                    } else if after.is_zero() {
                        self.queue.push_back(Event::EventTimeout(msg));
                    } else {
                        self.event_timer = Some(self.set_timer(after, msg));
                    }
                }
                Action::StateTimeout(after, msg) => {
                    cancel(self.state_timer.take());
                    if after.is_zero() {
                        self.queue.push_back(Event::StateTimeout(msg));
                    } else {
                        self.state_timer = Some(self.set_timer(after, msg));
                    }
                }
                Action::Timeout(name, after, msg) => {
                    if let Some(i) = self.named.iter().position(|(n, _)| *n == name) {
                        cancel(Some(self.named.swap_remove(i).1));
                    }
                    if after.is_zero() {
                        self.queue.push_back(Event::Timeout(name, msg));
                    } else {
                        let t = self.set_timer(after, msg);
                        self.named.push((name, t));
                    }
                }
                Action::CancelEventTimeout => cancel(self.event_timer.take()),
                Action::CancelStateTimeout => cancel(self.state_timer.take()),
                Action::CancelTimeout(name) => {
                    if let Some(i) = self.named.iter().position(|(n, _)| *n == name) {
                        cancel(Some(self.named.swap_remove(i).1));
                    }
                }
                Action::Reply(..)
                | Action::Postpone(_)
                | Action::NextEvent(_)
                | Action::Hibernate => {}
            }
        }
    }

    /// The event of the timer with sequence number `seq`, if it still runs.
    fn fired(&mut self, seq: u64) -> Option<Event<M>> {
        let kind = if self.event_timer.as_ref().is_some_and(|t| t.seq == seq) {
            TimerKind::Event
        } else if self.state_timer.as_ref().is_some_and(|t| t.seq == seq) {
            TimerKind::State
        } else {
            let i = self.named.iter().position(|(_, t)| t.seq == seq)?;
            TimerKind::Named(self.named[i].0)
        };
        Some(match kind {
            TimerKind::Event => Event::EventTimeout(self.event_timer.take()?.msg),
            TimerKind::State => Event::StateTimeout(self.state_timer.take()?.msg),
            TimerKind::Named(name) => {
                let i = self.named.iter().position(|(n, _)| *n == name)?;
                Event::Timeout(name, self.named.swap_remove(i).1.msg)
            }
        })
    }

    /// Applies a handler's (or `init`'s) result: replies, state change,
    /// enter call, postponed and inserted events, timeouts (the order of
    /// the module docs). `Err(reason)`: stop.
    fn transition(
        &mut self,
        machine: &mut M,
        t: Transition<M>,
        context: Context,
    ) -> Result<(), ExitReason> {
        let Transition { next, first, rest } = t;
        let mut applied = Applied::new();
        let sorted = self.sort_actions(first, rest, &mut applied, context);
        let (old, enter) = match next {
            Next::Stop(reason) => return Err(reason),
            _ if sorted.is_err() => return sorted,
            Next::State(s) if context == Context::Init => {
                self.state = s;
                (None, true)
            }
            _ if context == Context::Init => return Err(bad_return("init")),
            Next::State(s) if s != self.state => {
                let old = std::mem::replace(&mut self.state, s);
                (Some(old), true)
            }
            Next::State(_) | Next::Keep => (None, false),
            Next::Repeat => (None, true),
        };
        let changed = old.is_some();
        if changed {
            cancel(self.state_timer.take());
        }
        if enter && M::STATE_ENTER {
            let old = old.unwrap_or_else(|| self.state.clone());
            let state = &self.state;
            let t = guarded(|| machine.handle_event(state, Event::Enter(old)))?;
            let Transition { next, first, rest } = t;
            self.sort_actions(first, rest, &mut applied, Context::Enter)?;
            match next {
                Next::Stop(reason) => return Err(reason),
                Next::State(s) if s != self.state => return Err(bad_return(Context::Enter.name())),
                _ => {}
            }
        }
        self.postponed.append(&mut applied.postponed);
        if changed {
            for e in self.postponed.drain(..).rev() {
                self.queue.push_front(e);
            }
        }
        for e in applied.next_events.drain(..).rev() {
            self.queue.push_front(e);
        }
        self.start_timeouts(applied.timeouts);
        Ok(())
    }

    /// Applies the common result (stay or go, at most one reply, nothing
    /// else to do) without the general path; hands any other back.
    #[inline]
    fn simple_transition(&mut self, t: Transition<M>) -> Option<Transition<M>> {
        let changes = match &t.next {
            Next::Keep => false,
            Next::State(s) => *s != self.state,
            Next::Repeat | Next::Stop(_) => return Some(t),
        };
        let simple = t.rest.is_empty()
            && matches!(t.first, None | Some(Action::Reply(..)))
            && (!changes
                || (!M::STATE_ENTER && self.postponed.is_empty() && self.state_timer.is_none()));
        if !simple {
            return Some(t);
        }
        let Transition { next, first, .. } = t;
        if let Next::State(s) = next {
            self.state = s;
        }
        if let Some(Action::Reply(from, v)) = first {
            from.reply(v);
        }
        None
    }

    /// The next event: a queued one, else one from the mailbox. `Err`: a
    /// stop request, or the parent's exit signal.
    fn next_event(&mut self, parent: Option<Pid>) -> Result<Event<M>, ExitReason> {
        if let Some(e) = self.queue.pop_front() {
            return Ok(e);
        }
        loop {
            if self.hibernate {
                self.hibernate = false;
                graft::hibernate();
            }
            let incoming = receive()
                .on(|r: RequestOf<M>| Incoming::<M>::Request(r))
                .on(|t: TimerFired| Incoming::Timer(t.0))
                .on(|r: StatemRemoteRequest| Incoming::Remote(r))
                // (`on`, not a guard: a receive without guards runs no
                // user code and skips a copy of the saved mail per scan.)
                .on(|s: ExitSignal| Incoming::Exit(s))
                .any(Incoming::Info)
                .wait();
            let request = match incoming {
                Incoming::Request(r) => r,
                Incoming::Remote(r) => match remote_to_local::<M>(r) {
                    Some(r) => r,
                    None => continue,
                },
                Incoming::Timer(seq) => match self.fired(seq) {
                    Some(e) => return Ok(e),
                    // Cancelled or restarted after it fired.
                    None => continue,
                },
                Incoming::Exit(s) if Some(s.from) == parent => return Err(s.reason),
                Incoming::Exit(s) => return Ok(Event::Info(Unknown::from_message(s))),
                Incoming::Info(u) => return Ok(Event::Info(u)),
            };
            return match request {
                Request::Call { req, from } => Ok(Event::Call(req, from)),
                Request::Cast(msg) => Ok(Event::Cast(msg)),
                Request::Stop(reason) => Err(reason),
            };
        }
    }
}

/// A request from another node as the local envelope (payload decoded as
/// the machine's types); `None` (logged) if it does not decode.
fn remote_to_local<M: GenStatem>(r: StatemRemoteRequest) -> Option<RequestOf<M>> {
    let decoded = match r {
        StatemRemoteRequest::Call { bytes, from, reply } => {
            if Some(reply) != M::Reply::remote_descriptor() {
                let why = format!(
                    "the machine {} replies with {}, a different type from the caller's",
                    std::any::type_name::<M>(),
                    std::any::type_name::<M::Reply>()
                );
                log::warn!(
                    "gen_statem {}: refused a call from {}: {why}",
                    self_pid(),
                    from.owner()
                );
                ReplyTo::<M::Reply>::remote(from).fail(CallError::Remote(why));
                return None;
            }
            match M::Call::decode_remote(&bytes) {
                Ok(req) => Ok(Request::Call {
                    req,
                    from: ReplyTo::remote(from),
                }),
                Err(e) => {
                    ReplyTo::<M::Reply>::remote(from).fail(CallError::Remote(e.to_string()));
                    Err(e)
                }
            }
        }
        StatemRemoteRequest::Cast { bytes } => M::Cast::decode_remote(&bytes).map(Request::Cast),
        StatemRemoteRequest::Stop(reason) => Ok(Request::Stop(reason)),
    };
    match decoded {
        Ok(r) => Some(r),
        Err(e) => {
            log::warn!("gen_statem {}: dropping a remote request: {e}", self_pid());
            None
        }
    }
}

/// Which callback a result came from (what it may contain).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    Init,
    Event,
    Enter,
}

impl Context {
    fn name(self) -> &'static str {
        match self {
            Context::Init => "init",
            Context::Event => "handle_event",
            Context::Enter => "a state enter call",
        }
    }
}

fn cancel<I>(t: Option<Timer<I>>) {
    if let Some(t) = t {
        cancel_timer(t.tref);
    }
}

/// `init`, then the loop, then `terminate`; `ack` (once) gets the start
/// result.
fn run_inner<M: GenStatem, A: FnOnce(Result<(), StartError>)>(
    mut machine: M,
    parent: Option<Pid>,
    ack: &mut Option<A>,
) -> ExitReason {
    let mut answer = |r: Result<(), StartError>| {
        if let Some(ack) = ack.take() {
            ack(r);
        }
    };
    let init = match guarded(|| machine.init()) {
        Ok(t) => t,
        Err(reason) => {
            answer(Err(StartError::Init(reason.clone())));
            return reason;
        }
    };
    let state = match &init.next {
        Next::State(s) => s.clone(),
        Next::Stop(reason) => {
            answer(Err(StartError::Init(reason.clone())));
            return reason.clone();
        }
        Next::Keep | Next::Repeat => {
            let reason = bad_return("init");
            answer(Err(StartError::Init(reason.clone())));
            return reason;
        }
    };
    answer(Ok(()));
    let mut m = Machine::<M> {
        state,
        queue: VecDeque::new(),
        postponed: Vec::new(),
        event_timer: None,
        state_timer: None,
        named: Vec::new(),
        seq: 0,
        hibernate: false,
    };
    let reason = match m.transition(&mut machine, init, Context::Init) {
        Err(reason) => reason,
        Ok(()) => loop {
            let event = match m.next_event(parent) {
                Ok(e) => e,
                Err(reason) => break reason,
            };
            // Any event cancels the event timeout.
            cancel(m.event_timer.take());
            let state = &m.state;
            let t = match guarded(|| machine.handle_event(state, event)) {
                Ok(t) => t,
                Err(reason) => break reason,
            };
            if let Some(t) = m.simple_transition(t) {
                if let Err(reason) = m.transition(&mut machine, t, Context::Event) {
                    break reason;
                }
            }
        },
    };
    cancel(m.event_timer.take());
    cancel(m.state_timer.take());
    for (_, t) in m.named.drain(..) {
        cancel(Some(t));
    }
    let reason = match guarded(|| machine.terminate(&reason, &m.state)) {
        Ok(()) => reason,
        Err(crash) => {
            log::error!("gen_statem {}: terminate panicked: {crash}", self_pid());
            crash
        }
    };
    if !matches!(reason, ExitReason::Normal | ExitReason::Shutdown) {
        log::error!(
            "gen_statem {} terminating in state {:?}: {reason}",
            self_pid(),
            m.state
        );
    }
    reason
}
