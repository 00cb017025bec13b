//! The call protocol of every behaviour (gen_server and gen_statem speak
//! the same one; one copy of it lives here).
//!
//! **Local call.** The caller takes a mark (the ref trick: every wait below
//! skips the mail queued before it), monitors the callee (the monitor
//! reference is the call's tag, as in OTP), writes the tag into its
//! [`CallGuard`], and sends its request with a [`Caller`]. The callee
//! answers through a [`ReplyTo`]: under the guard's lock it checks that the
//! caller still waits for that tag, sends the [`Reply`] and clears the
//! guard, so a second reply, or one after the caller gave up, is dropped at
//! the replier and never reaches a mailbox. The caller waits for the reply,
//! a [`CallFailed`] (a refusal, e.g. a type mismatch) or the monitor's
//! `ProcessDied`; on failure or timeout it clears the guard, then takes a
//! reply that slipped in before it did.
//!
//! **Remote call.** The request travels encoded on the runtime's request
//! primitive ([`graft::send_request`]): one frame carrying the monitor, one
//! [`RemoteReply`] back through the caller's request alias; a late reply
//! dies at the alias.

use crate::gen_server::{mismatch_error, CallError};
use graft::{
    demonitor_flush_after, mark, monitor, receive, send, Alias, ExitReason, Message, MonitorRef,
    Pid, ProcessDied,
};
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The guard a calling process shares with every [`ReplyTo`] it hands out:
/// the tag of the call it is waiting for, if any.
#[derive(Debug, Default)]
pub(crate) struct CallGuard {
    /// Written by the caller (start and end of a call), read by repliers,
    /// always under the lock; a replier sends while holding it (a send
    /// never yields).
    active: Mutex<Option<MonitorRef>>,
}

impl CallGuard {
    pub(crate) fn set(&self, tag: Option<MonitorRef>) {
        *self.active.lock().unwrap_or_else(|e| e.into_inner()) = tag;
    }

    /// A guard already waiting for `tag` (a remote caller's stand-in).
    fn waiting_for(tag: MonitorRef) -> Arc<CallGuard> {
        let g = Arc::new(CallGuard::default());
        g.set(Some(tag));
        g
    }
}

/// The process-local handle on the calling process's guard.
#[derive(Debug, Clone)]
struct CallerGuard(Arc<CallGuard>);

thread_local! {
    /// The guard of the process that last called from this worker thread:
    /// a cache in front of process-local storage (a hash lookup). Checked
    /// by pid (never reused), and only read or written between yields.
    static LAST_GUARD: std::cell::RefCell<Option<(Pid, Arc<CallGuard>)>> =
        const { std::cell::RefCell::new(None) };
}

/// The calling process `me`'s guard (made on its first call).
#[inline]
fn caller_guard(me: Pid) -> Arc<CallGuard> {
    let cached = LAST_GUARD.with(|c| match &*c.borrow() {
        Some((pid, g)) if *pid == me => Some(g.clone()),
        _ => None,
    });
    cached.unwrap_or_else(|| caller_guard_slow(me))
}

#[cold]
fn caller_guard_slow(me: Pid) -> Arc<CallGuard> {
    let g = match graft::local::get::<CallerGuard>() {
        Some(g) => g.0,
        None => {
            let g = Arc::new(CallGuard::default());
            graft::local::set(CallerGuard(g.clone()));
            g
        }
    };
    LAST_GUARD.with(|c| *c.borrow_mut() = Some((me, g.clone())));
    g
}

/// The caller of a local call, as its request carries it.
pub(crate) struct Caller {
    pub(crate) pid: Pid,
    tag: MonitorRef,
    guard: Arc<CallGuard>,
}

/// Where to send the answer to one call (OTP's `From`).
///
/// Clone it to answer later ([`CallResult::NoReply`](crate::gen_server::CallResult::NoReply));
/// only the first reply for a call that is still waiting is delivered,
/// every other one (a second reply, a reply after the caller timed out or
/// died) is dropped. gen_server and gen_statem hand out the same type.
pub struct ReplyTo<R> {
    pid: Pid,
    tag: MonitorRef,
    guard: Arc<CallGuard>,
    /// The caller is on another node: its request alias; the reply
    /// travels encoded, through it.
    remote: Option<Alias>,
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

impl<R> ReplyTo<R> {
    /// The reply handle of a local caller.
    pub(crate) fn local(caller: Caller) -> Self {
        ReplyTo {
            pid: caller.pid,
            tag: caller.tag,
            guard: caller.guard,
            remote: None,
            _r: PhantomData,
        }
    }

    /// The reply handle of a caller on another node (its request alias).
    pub(crate) fn remote(from: Alias) -> Self {
        let tag = from.reference();
        ReplyTo {
            pid: from.owner(),
            tag,
            guard: CallGuard::waiting_for(tag),
            remote: Some(from),
            _r: PhantomData,
        }
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
        if let Some(alias) = self.remote {
            let result = value
                .encode_remote()
                .map(|(_, b)| b)
                .map_err(|e| RemoteFail::Error(CallError::Remote(e.to_string())));
            graft::reply(alias, RemoteReply { result });
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

    /// Refuses the call with `error` (told to the caller as is, if it still
    /// waits).
    pub(crate) fn fail(self, error: CallError) {
        let mut active = self.guard.active.lock().unwrap_or_else(|e| e.into_inner());
        if *active != Some(self.tag) {
            return;
        }
        match self.remote {
            Some(alias) => graft::reply(
                alias,
                RemoteReply {
                    result: Err(RemoteFail::Error(error)),
                },
            ),
            None => send(
                self.pid,
                CallFailed {
                    tag: self.tag,
                    error,
                },
            ),
        }
        *active = None;
    }
}

/// A callee's answer, tagged with the caller's monitor reference.
#[derive(Debug, Clone)]
struct Reply<R> {
    tag: MonitorRef,
    value: R,
}

/// A callee's refusal of a call, tagged like a reply.
#[derive(Debug, Clone)]
struct CallFailed {
    tag: MonitorRef,
    error: CallError,
}

// They stay on their node: the values travel by pointer.
impl<R: Send + 'static> graft::Message for Reply<R> {}
impl graft::Message for CallFailed {}

/// A callee's answer to a remote caller (through its request alias, which
/// tags it).
#[derive(Debug, graft::Mobile)]
pub(crate) struct RemoteReply {
    pub(crate) result: Result<Vec<u8>, RemoteFail>,
}

/// Why a callee on another node did not answer a call.
#[derive(Debug, graft::Mobile)]
pub(crate) enum RemoteFail {
    /// As is.
    Error(CallError),
    /// The request (`reply: false`) or reply type is not the server's: the
    /// server's type name and readable descriptor, so that the caller can
    /// name the first difference with its own.
    Mismatch {
        reply: bool,
        server: String,
        expected: String,
        form: String,
    },
}

/// A local call to `to`: `request` gets the caller to put in the request it
/// sends; the reply (or why there is none) comes back. `me` is the calling
/// process, never `to`.
#[inline]
pub(crate) fn call_local<R: Message>(
    me: Pid,
    to: Pid,
    timeout: Option<Duration>,
    request: impl FnOnce(Caller),
) -> Result<R, CallError> {
    let guard = caller_guard(me);
    // The ref trick: the reply, the refusal and the `ProcessDied` all come
    // after this mark, so the waits below skip whatever was in the mailbox
    // before the call.
    let m = mark();
    let tag = monitor(to);
    guard.set(Some(tag));
    request(Caller {
        pid: me,
        tag,
        guard: guard.clone(),
    });
    let got = receive()
        .after(m)
        .when(move |r: &Reply<R>| r.tag == tag, |r: Reply<R>| Ok(r.value))
        .when(
            move |d: &ProcessDied| d.monitor == tag,
            |d: ProcessDied| Err(CallError::from_exit(d.reason)),
        )
        .when(
            move |f: &CallFailed| f.tag == tag,
            |f: CallFailed| Err(f.error),
        );
    let got = match timeout {
        Some(t) => got.timeout(t),
        None => Some(got.wait()),
    };
    match got {
        Some(Ok(v)) => {
            // The replier has cleared the guard.
            demonitor_flush_after(tag, m);
            Ok(v)
        }
        Some(Err(error @ CallError::TypeMismatch { .. })) => {
            demonitor_flush_after(tag, m);
            Err(error)
        }
        Some(Err(error)) => {
            // A process the callee handed the `ReplyTo` to may have
            // replied just as the callee died: take that reply too.
            guard.set(None);
            take_reply::<R>(tag, m).ok_or(error)
        }
        None => {
            guard.set(None);
            demonitor_flush_after(tag, m);
            // A reply sent before the guard was cleared is already here.
            take_reply::<R>(tag, m).ok_or(CallError::Timeout)
        }
    }
}

/// The reply tagged `tag` if it is in the mailbox now (the guard is
/// cleared: no other can come).
#[cold]
fn take_reply<R: Message>(tag: MonitorRef, m: graft::Mark) -> Option<R> {
    receive()
        .after(m)
        .when(move |r: &Reply<R>| r.tag == tag, |r: Reply<R>| r.value)
        .timeout(Duration::ZERO)
}

/// A call to `to` on another node: `req` is encoded, `request` builds the
/// message around it, the caller's request alias and its reply type's
/// descriptor id, and the encoded reply (or the callee's refusal) is
/// decoded as `R`.
pub(crate) fn call_remote<C: Message, R: Message, M: Message>(
    to: Pid,
    req: C,
    timeout: Option<Duration>,
    request: impl FnOnce(Vec<u8>, Alias, u64) -> M,
) -> Result<R, CallError> {
    let bytes = req
        .encode_remote()
        .map_err(|e| CallError::Remote(e.to_string()))?
        .1;
    let Some(reply) = R::remote_descriptor() else {
        return Err(CallError::Remote(format!(
            "the reply type {} is local-only and cannot come from another node",
            std::any::type_name::<R>()
        )));
    };
    let sent = graft::send_request(to, |from| request(bytes, from, reply))
        .map_err(|e| CallError::Remote(e.to_string()))?;
    let answer = match graft::receive_response::<RemoteReply>(sent, timeout) {
        Ok(r) => r.result,
        Err(graft::RequestError::Timeout) => return Err(CallError::Timeout),
        Err(graft::RequestError::NoProc) => return Err(CallError::NoProc),
        Err(graft::RequestError::NoConnection(_)) => return Err(CallError::NoConnection),
        Err(graft::RequestError::Died(r)) => return Err(CallError::from_exit(r)),
        Err(graft::RequestError::Refused(why)) => return Err(CallError::Remote(why)),
    };
    decode_remote_reply::<C, R>(answer)
}

/// The caller's side of a remote call's answer: the reply decoded, or the
/// callee's refusal (a type mismatch names the first difference between
/// the callee's types and the caller's `C`/`R`).
fn decode_remote_reply<C: Message, R: Message>(
    answer: Result<Vec<u8>, RemoteFail>,
) -> Result<R, CallError> {
    match answer {
        Ok(bytes) => R::decode_remote(&bytes).map_err(|e| CallError::Remote(e.to_string())),
        Err(RemoteFail::Error(e)) => Err(e),
        Err(RemoteFail::Mismatch {
            reply,
            server,
            expected,
            form,
        }) => {
            let (found, mine) = if reply {
                (std::any::type_name::<R>(), R::full_descriptor())
            } else {
                (std::any::type_name::<C>(), C::full_descriptor())
            };
            let diff = mine
                .and_then(|d| graft::graph::Descriptor::first_difference_in(&form, d.readable()));
            Err(mismatch_error(&server, reply, &expected, found, diff))
        }
    }
}

/// `Stop` of a behaviour: sends `stop` (built around nothing: the callee
/// ends) and waits for the callee's end; `Ok` when it ended with `reason`.
pub(crate) fn stop_and_wait(
    to: Pid,
    reason: ExitReason,
    send_stop: impl FnOnce(ExitReason),
) -> Result<(), CallError> {
    let mk = mark();
    let m = monitor(to);
    send_stop(reason.clone());
    let died = receive()
        .after(mk)
        .when(move |d: &ProcessDied| d.monitor == m, |d: ProcessDied| d)
        .wait();
    match died.reason {
        r if r == reason => Ok(()),
        r => Err(CallError::from_exit(r)),
    }
}
