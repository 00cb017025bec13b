//! A process: its entry in the node's table, its mailbox, its links and
//! monitors, and the private state that moves with it between workers.
//!
//! Who touches what:
//! * `state`, `mailbox`, `has_signal`: any thread (see `state.rs`,
//!   `mailbox.rs`).
//! * `meta` (links, watchers, name, exited): any thread, under its lock. The
//!   exiting process sets `exited` and takes the lists in one critical section,
//!   so a monitor or link made concurrently either lands in the lists (and is
//!   notified) or sees `exited` (and is answered with `NoProc` at once).
//! * `coro`: only the worker that moved the state to `RUNNING`.
//! * `trap`: written by that worker when it makes the coroutine (first run),
//!   read by the overflow handler (`overflow.rs`) on the thread running the
//!   process.
//! * `local`: only the process itself, while it runs.

pub(crate) mod mailbox;
pub(crate) mod receive;
pub(crate) mod state;
pub(crate) mod value;
pub(crate) mod watchers;

use crate::coroutine::{Coro, ProcYielder, TrapSlot};
use crate::exit::{ExitReason, ExitSignal, ProcessDied};
use crate::limits::Overflow;
use crate::loom::{AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering, UnsafeCell};
use crate::message::Message;
use crate::pid::{MonitorRef, Pid};
use mailbox::Mailbox;
use state::ProcState;
use std::any::{Any, TypeId};
use std::collections::VecDeque;
use value::Value;

/// Reasons, in this OS process, that a send must take the careful path
/// (`api::send`): a traced process, a doomed one, one with a mailbox limit
/// (each counted once per process, see [`Process::attend`]), and a node
/// whose system monitor watches long message queues. While it is 0 a local
/// send is the plain push and wake, behind this one load: the tracing,
/// doom, limit and long-queue checks each cost a load and a branch per
/// send otherwise (see `docs/decisions.md`, h-obs).
pub(crate) static ATTENTION: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// The process is traced (`observe::trace`).
pub(crate) const ATTEND_TRACED: u8 = 1;
/// The process acted on an exit signal and must unwind at each runtime call
/// (see [`Local::doomed`]).
pub(crate) const ATTEND_DOOMED: u8 = 2;
/// The process has a mailbox limit.
pub(crate) const ATTEND_LIMITED: u8 = 4;

/// Whether sends must take the careful path now (see [`ATTENTION`]).
#[inline(always)]
pub(crate) fn attention() -> bool {
    ATTENTION.load(std::sync::atomic::Ordering::Relaxed) != 0
}

/// One item in a mailbox (an implementation detail that receive clauses see).
#[doc(hidden)]
pub enum Mail {
    /// A local message (inline when small, else by pointer).
    Msg(Value),
    /// A message from another node, decoded when a receive asks for its
    /// type (by descriptor hash).
    Encoded {
        /// The descriptor hash of the encoded type.
        desc: u64,
        /// The graph encoding.
        bytes: Vec<u8>,
    },
    /// A remote message that failed to decode: matches nothing.
    Dropped,
    /// A monitor notification (filtered against the owner's live monitors).
    Down(ProcessDied),
    /// An exit signal; handled in order with messages when the owner drains.
    Signal {
        /// The sender.
        from: Pid,
        /// The reason carried.
        reason: ExitReason,
        /// Sent because of a link (ignored once unlinked), not by `exit`.
        link: bool,
    },
}

impl std::fmt::Debug for Mail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mail::Msg(_) => f.write_str("Msg(..)"),
            Mail::Encoded { desc, bytes } => write!(f, "Encoded({desc:#x}, {} bytes)", bytes.len()),
            Mail::Dropped => f.write_str("Dropped"),
            Mail::Down(d) => write!(f, "Down({d:?})"),
            Mail::Signal { from, reason, link } => {
                write!(f, "Signal({from:?}, {reason:?}, link={link})")
            }
        }
    }
}

impl Mail {
    /// Mail carrying a local message.
    #[inline]
    pub(crate) fn msg<T: Send + 'static>(v: T) -> Mail {
        Mail::Msg(Value::new(v))
    }

    /// Mail carrying a message sent as one (it can be forwarded to another
    /// node without knowing its type, see [`Unknown`](crate::Unknown)).
    #[inline]
    pub(crate) fn message<M: Message>(v: M) -> Mail {
        Mail::Msg(Value::new_message(v))
    }

    /// Is this mail an `A`? An encoded `A` from another node is decoded in
    /// place on the first ask (a copy that fails to decode is logged and
    /// dropped).
    #[inline]
    pub(crate) fn is<A: Message>(&mut self) -> bool {
        match self {
            Mail::Msg(v) => v.is::<A>(),
            Mail::Down(_) => TypeId::of::<A>() == TypeId::of::<ProcessDied>(),
            Mail::Encoded { .. } => self.decode_as::<A>(),
            Mail::Signal { .. } | Mail::Dropped => false,
        }
    }

    #[cold]
    fn decode_as<A: Message>(&mut self) -> bool {
        let Mail::Encoded { desc, bytes } = self else {
            return false;
        };
        if A::remote_descriptor() != Some(*desc) {
            return false;
        }
        match A::decode_remote(bytes) {
            Ok(a) => {
                *self = Mail::message(a);
                true
            }
            Err(e) => {
                log::warn!(
                    "graft: dropping a remote message that does not decode as {}: {e}",
                    std::any::type_name::<A>()
                );
                *self = Mail::Dropped;
                false
            }
        }
    }

    /// Takes the value out as `A`; `Err(self)` if it is not one.
    #[inline]
    pub(crate) fn take<A: Message>(mut self) -> Result<A, Mail> {
        // Only encoded mail needs the decoding check first; the downcasts
        // below check the type themselves (one check, not two, on the
        // receive path).
        if matches!(self, Mail::Encoded { .. }) && !self.is::<A>() {
            return Err(self);
        }
        match self {
            Mail::Msg(v) => v.downcast::<A>().map_err(Mail::Msg),
            Mail::Down(d) => {
                let mut slot = Some(d);
                match (&mut slot as &mut dyn Any).downcast_mut::<Option<A>>() {
                    Some(a) => Ok(a.take().expect("just set")),
                    None => Err(Mail::Down(slot.expect("not taken"))),
                }
            }
            other => Err(other),
        }
    }

    /// A reference to the value as `A`, for guards (after `is::<A>()`).
    #[inline]
    pub(crate) fn peek<A: Message>(&self) -> Option<&A> {
        match self {
            Mail::Msg(v) => v.downcast_ref::<A>(),
            Mail::Down(d) => (d as &dyn Any).downcast_ref::<A>(),
            _ => None,
        }
    }
}

/// A vector that takes one word until its first push: every process entry
/// has a few (links, watchers, monitors), and most processes never use
/// them, while a cold spawn's cost follows the entry's size.
#[derive(Debug)]
#[allow(clippy::box_collection)] // the box is the point: one word when empty
pub(crate) struct LazyVec<T>(Option<Box<Vec<T>>>);

impl<T> Default for LazyVec<T> {
    fn default() -> Self {
        LazyVec(None)
    }
}

impl<T> LazyVec<T> {
    pub(crate) fn push(&mut self, v: T) {
        self.0.get_or_insert_with(Default::default).push(v);
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }

    pub(crate) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.as_slice().iter()
    }

    pub(crate) fn contains(&self, x: &T) -> bool
    where
        T: PartialEq,
    {
        self.as_slice().contains(x)
    }

    pub(crate) fn retain(&mut self, f: impl FnMut(&T) -> bool) {
        if let Some(v) = &mut self.0 {
            v.retain(f);
        }
    }

    /// Removes the element at `i` (which must be in range, as from
    /// `iter().position(..)`), moving the last one into its place.
    pub(crate) fn swap_remove(&mut self, i: usize) -> T {
        self.0
            .as_mut()
            .expect("swap_remove of an index found in the vector")
            .swap_remove(i)
    }
}

impl<T> IntoIterator for LazyVec<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.map(|b| *b).unwrap_or_default().into_iter()
    }
}

/// Shared, lock-protected bookkeeping of a process.
#[derive(Debug, Default)]
pub(crate) struct Meta {
    pub(crate) links: LazyVec<Pid>,
    /// Who monitors this process: (reference, watcher).
    pub(crate) watchers: watchers::Watchers,
    pub(crate) name: Option<String>,
    pub(crate) exited: bool,
    pub(crate) trap_exits: bool,
    /// The process's active aliases: (reference id, flags), see `alias.rs`.
    pub(crate) aliases: LazyVec<(u64, u8)>,
    /// What it runs, as its behaviour says (a gen_server's type); shown as
    /// its initial call instead of the spawn location (see `observe`).
    pub(crate) label: Option<Box<str>>,
    /// It is a supervisor (see `observe::mark_supervisor`).
    pub(crate) supervisor: bool,
    /// Where and with what message it last panicked (for the crash report).
    /// (Boxed: every entry carries the field, few processes panic.)
    #[allow(clippy::box_collection)]
    pub(crate) panic: Option<Box<(String, String)>>,
}

/// Cache lines [`Process::prefetch_stack`] asks for, starting
/// `PREFETCH_BELOW` bytes under the noted stack pointer (the context switch
/// saves registers below it).
#[cfg(target_arch = "x86_64")]
const PREFETCH_LINES: usize = 10;
#[cfg(target_arch = "x86_64")]
const PREFETCH_BELOW: usize = 128;

/// State only the running process touches; it moves with the process.
#[derive(Default)]
pub(crate) struct Local {
    /// Mail taken from the mailbox but not yet matched by a receive.
    pub(crate) saved: VecDeque<Mail>,
    /// Monitors this process holds (references whose `ProcessDied` it wants).
    pub(crate) monitors: LazyVec<(MonitorRef, Pid)>,
    /// The coroutine's yielder (lives on the process's own stack).
    pub(crate) yielder: Option<std::ptr::NonNull<ProcYielder>>,
    /// Process-local storage, by type (made on first use: most processes
    /// never use it, and an empty map still costs a hasher seed).
    /// (Boxed: the entry of every process carries this field, and a box is
    /// a sixth of an empty map's size.)
    #[allow(clippy::box_collection)]
    pub(crate) storage: Option<Box<ahash::AHashMap<TypeId, Box<dyn Any + Send>>>>,
    /// The process this one sent to last: a process usually talks to the
    /// same peer again (a ring, a server), and the cache skips the table.
    pub(crate) last_target: Option<std::sync::Arc<Process>>,
    /// Mail ever moved from the mailbox into `saved`: a position in the
    /// stream of arrivals, for [`Mark`](crate::Mark) (the ref trick).
    pub(crate) received: u64,
    /// The reason of the exit signal this process acted on: once set, the
    /// process ends with it whatever its code does (a `catch_unwind` that
    /// swallowed the unwind is overridden at the next runtime call and when
    /// the body returns). `has_signal` stays set meanwhile, so the checks
    /// cost nothing until then.
    /// (Boxed: one word in every entry.)
    pub(crate) doomed: Option<Box<ExitReason>>,
}

/// The unwinding payload that ends a process with a reason (an exit signal
/// or `terminate`). Not a panic: no hook runs, nothing is printed.
#[derive(Debug)]
pub(crate) struct ExitUnwind {
    pub(crate) reason: ExitReason,
    /// Raised by the process itself (`exit_self`, `terminate`), not by an
    /// exit signal: see [`self_exit_reason`](crate::self_exit_reason).
    pub(crate) own: bool,
}

impl ExitUnwind {
    /// The unwind of an exit signal acted on.
    pub(crate) fn signal(reason: ExitReason) -> Box<ExitUnwind> {
        Box::new(ExitUnwind { reason, own: false })
    }
}

/// A process's mailbox limit and what it counts (`limits.rs`).
#[derive(Debug)]
pub(crate) struct Limit {
    max: usize,
    policy: Overflow,
    /// Messages in the private queue at the owner's last drain.
    saved_len: AtomicUsize,
    /// Messages dropped at the limit.
    pub(crate) dropped: AtomicU64,
    /// The limit was passed with `Overflow::Kill`: the kill is on its way.
    overflowed: AtomicBool,
}

impl Limit {
    pub(crate) fn new(max: usize, policy: Overflow) -> Limit {
        Limit {
            max,
            policy,
            saved_len: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            overflowed: AtomicBool::new(false),
        }
    }
}

/// One process.
pub(crate) struct Process {
    pub(crate) pid: Pid,
    pub(crate) state: ProcState,
    pub(crate) mailbox: Mailbox<Mail>,
    /// Set after pushing a `Signal`, so a process that is not receiving still
    /// notices it at its next yield point.
    pub(crate) has_signal: AtomicBool,
    pub(crate) meta: Mutex<Meta>,
    /// Worker index this process must run on (`spawn_opts().pinned()`).
    pub(crate) pinned: Option<u32>,
    /// Set when the node drops the process without running it to the end
    /// (shutdown): its body must let the forced unwind through.
    pub(crate) forced_drop: AtomicBool,
    /// The guard pages below this process's stack and the stack's size, for
    /// the overflow report (see `overflow.rs`).
    pub(crate) guard: crate::stack::Guard,
    /// The coroutine's trap handler, for the overflow handler (set on the
    /// first run; see `coroutine.rs`).
    pub(crate) trap: TrapSlot,
    /// The type name of the closure the process was spawned with (Erlang's
    /// initial call), for the overflow report (a function: one word).
    pub(crate) initial_call: fn() -> &'static str,
    /// The mailbox limit (`spawn_opts().max_mailbox`; `limits.rs`), boxed:
    /// one word in every entry, most processes have none. A limited
    /// process keeps `has_signal` set, so that each drain records the
    /// private queue's length for senders.
    pub(crate) limit: Option<Box<Limit>>,
    /// A `LongMessageQueue { long: true }` event was sent for this mailbox
    /// (the process keeps `has_signal` set until it falls back under the
    /// subscriber's off threshold).
    lmq_long: AtomicBool,
    /// What this process counts in [`ATTENTION`] (`ATTEND_*` bits).
    attend: std::sync::atomic::AtomicU8,
    /// About where the process's stack pointer was when it last suspended
    /// (0: never): a waker prefetches there, see [`Process::prefetch_stack`].
    parked_sp: AtomicUsize,
    /// Accounting for operators (see `stats.rs`).
    pub(crate) acct: crate::stats::Acct,
    coro: UnsafeCell<Option<Coro>>,
    local: UnsafeCell<Local>,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("pid", &self.pid)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

// SAFETY: the `UnsafeCell` fields are each owned by one thread at a time, as
// the module docs say: `coro` by the worker holding the RUNNING state (handed
// over through the state word's Acquire/Release), `local` by the process's
// own code, which runs on that worker. `trap` (a `Cell`) is written by that
// worker before the coroutine first runs and read only on the thread running
// it (handed over like `coro`). Everything else is atomics or locks.
unsafe impl Sync for Process {}
// SAFETY: as above; the raw yielder pointer in `local` is only dereferenced by
// the process itself, on whichever worker it runs.
unsafe impl Send for Process {}

impl Process {
    pub(crate) fn new(
        pid: Pid,
        pinned: Option<u32>,
        trap_exits: bool,
        guard: crate::stack::Guard,
    ) -> Process {
        Process {
            pid,
            state: ProcState::new(),
            mailbox: Mailbox::new(),
            has_signal: AtomicBool::new(false),
            meta: Mutex::new(Meta {
                trap_exits,
                ..Meta::default()
            }),
            pinned,
            forced_drop: AtomicBool::new(false),
            guard,
            trap: TrapSlot::default(),
            initial_call: || "?",
            limit: None,
            lmq_long: AtomicBool::new(false),
            attend: std::sync::atomic::AtomicU8::new(0),
            parked_sp: AtomicUsize::new(0),
            acct: crate::stats::Acct::default(),
            coro: UnsafeCell::new(None),
            local: UnsafeCell::new(Local::default()),
        }
    }

    /// Installs the coroutine (before the process is first scheduled).
    pub(crate) fn set_coro(&self, c: Coro) {
        // SAFETY: called once by the spawner before the process is published
        // to any run queue, so no other thread can touch `coro` yet.
        self.coro.with_mut(|p| unsafe { *p = Some(c) });
    }

    /// The coroutine, for the worker that runs the process.
    ///
    /// # Safety
    ///
    /// The caller holds the RUNNING state (it called `state.start()`), or the
    /// process can no longer be scheduled (exited, or the node is stopped).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn coro_mut(&self) -> &mut Option<Coro> {
        // SAFETY: exclusive access is the caller's precondition.
        self.coro.with_mut(|p| unsafe { &mut *p })
    }

    /// The process's private state.
    ///
    /// # Safety
    ///
    /// Only the process itself calls this, while running, and never keeps the
    /// reference across a call that could reach `local()` again (user code,
    /// a suspend).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn local(&self) -> &mut Local {
        // SAFETY: exclusive access is the caller's precondition.
        self.local.with_mut(|p| unsafe { &mut *p })
    }

    /// Counts `why` (an `ATTEND_*` bit) in [`ATTENTION`], once per process.
    pub(crate) fn attend(&self, why: u8) {
        if self
            .attend
            .fetch_or(why, std::sync::atomic::Ordering::Relaxed)
            & why
            == 0
        {
            ATTENTION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Stops counting `why` in [`ATTENTION`].
    pub(crate) fn unattend(&self, why: u8) {
        if self
            .attend
            .fetch_and(!why, std::sync::atomic::Ordering::Relaxed)
            & why
            != 0
        {
            ATTENTION.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The process ended (or its entry is dropped): it counts for nothing.
    pub(crate) fn unattend_all(&self) {
        // A load first: every exit passes here, and a swap is a locked RMW.
        if self.attend.load(std::sync::atomic::Ordering::Relaxed) != 0 {
            let was = self.attend.swap(0, std::sync::atomic::Ordering::Relaxed);
            ATTENTION.fetch_sub(
                was.count_ones() as usize,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }

    /// The running process is about to suspend, with its stack at `sp`.
    #[inline]
    pub(crate) fn note_parked_sp(&self, sp: usize) {
        self.parked_sp.store(sp, Ordering::Relaxed);
    }

    /// Where the stack pointer was when the process last suspended (0:
    /// never), for the stack-in-use figure of `process_info`.
    #[inline]
    pub(crate) fn parked_sp(&self) -> usize {
        self.parked_sp.load(Ordering::Relaxed)
    }

    /// Asks the cache for the part of the stack the process resumes on (its
    /// saved registers and the frames it returns through), so that a process
    /// woken to run next on this core does not start with a string of cache
    /// misses (in a ring of 3,000 processes on one worker, a hop went from
    /// about 100 to 85 ns). A hint only: it reads no memory.
    #[inline]
    pub(crate) fn prefetch_stack(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            let sp = self.parked_sp.load(Ordering::Relaxed);
            if sp == 0 {
                return;
            }
            for line in 0..PREFETCH_LINES {
                let addr = (sp - PREFETCH_BELOW + line * 64) as *const i8;
                // SAFETY: a prefetch is a hint that never faults and reads
                // nothing the program can observe, whatever the address.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr)
                };
            }
        }
    }

    /// Delivers mail; returns `true` if the caller must schedule the process.
    /// Mail for a process that has exited is dropped (a panic in its `Drop`
    /// is caught and logged: the sender lives).
    #[inline(always)]
    pub(crate) fn deliver(&self, mail: Mail) -> bool {
        match self.deliver_or_return(mail) {
            Ok(wake) => wake,
            Err(m) => {
                crate::node::drop_undelivered(self.pid, m);
                false
            }
        }
    }

    /// [`Process::deliver`], handing the mail back if the process has exited.
    #[inline(always)]
    pub(crate) fn deliver_or_return(&self, mail: Mail) -> Result<bool, Mail> {
        self.deliver_watched(mail, None)
    }

    /// [`Process::deliver_watched`] for a message (not a signal nor a
    /// notification) while no process anywhere asks for attention (see
    /// [`ATTENTION`]): none has a limit, no node watches queue lengths.
    #[inline(always)]
    pub(crate) fn deliver_plain(&self, mail: Mail) -> Result<bool, Mail> {
        self.mailbox.push(mail)?;
        Ok(self.state.wake())
    }

    /// [`Process::deliver_or_return`], with the mailbox limit applied and,
    /// given the node, its length watched for the system monitor.
    #[inline(always)]
    pub(crate) fn deliver_watched(
        &self,
        mail: Mail,
        node: Option<&crate::node::NodeShared>,
    ) -> Result<bool, Mail> {
        let signal = matches!(mail, Mail::Signal { .. });
        let flagged = matches!(mail, Mail::Signal { .. } | Mail::Down(_));
        let cap = if flagged { usize::MAX } else { self.room() };
        let len = match self.mailbox.push_within(mail, flagged, cap) {
            Ok(len) => len,
            Err((mail, false)) => return Err(mail),
            Err((mail, true)) => return Ok(self.over_limit(mail)),
        };
        if let Some(n) = node.filter(|_| !flagged) {
            self.watch_len(n, len);
        }
        if signal {
            self.has_signal.store(true, Ordering::Release);
        }
        Ok(self.state.wake())
    }

    /// [`Process::deliver_watched`] for a batch of messages (not signals
    /// nor notifications) that arrived together: one lock, one wake. What
    /// finds the mailbox at its limit is dropped as there. `None`, the
    /// batch untouched, if the process has exited; else whether the caller
    /// must schedule the process.
    pub(crate) fn deliver_many(
        &self,
        batch: &mut Vec<Mail>,
        node: &crate::node::NodeShared,
    ) -> Option<bool> {
        let (len, pushed) = self.mailbox.push_many_within(batch, self.room())?;
        let mut wake = false;
        for mail in batch.drain(..) {
            wake |= self.over_limit(mail);
        }
        if pushed == 0 {
            return Some(wake);
        }
        self.watch_len(node, len);
        Some(self.state.wake() || wake)
    }

    /// How many more messages the mailbox limit lets in (no limit: all).
    #[inline(always)]
    fn room(&self) -> usize {
        match &self.limit {
            Some(l) => l.max.saturating_sub(l.saved_len.load(Ordering::Relaxed)),
            None => usize::MAX,
        }
    }

    /// The mailbox holds `len` after a push: tell the system monitor if that
    /// reaches its `long_message_queue` threshold.
    #[inline(always)]
    fn watch_len(&self, node: &crate::node::NodeShared, len: usize) {
        let on = node.sysmon.lmq_on.load(Ordering::Relaxed);
        if on != 0 && len >= on {
            self.long_queue(node, len);
        }
    }

    /// A message found the mailbox at its limit: drop it (counted), and with
    /// `Overflow::Kill` send the process its untrappable kill, once.
    /// Returns whether the caller must schedule the process.
    #[cold]
    #[inline(never)]
    fn over_limit(&self, mail: Mail) -> bool {
        crate::node::drop_undelivered(self.pid, mail);
        let Some(l) = &self.limit else {
            return false;
        };
        l.dropped.fetch_add(1, Ordering::Relaxed);
        if l.policy != Overflow::Kill || l.overflowed.swap(true, Ordering::Relaxed) {
            return false;
        }
        let kill = Mail::Signal {
            from: self.pid,
            reason: ExitReason::MailboxOverflow,
            link: false,
        };
        if self.mailbox.push_flagged(kill, true).is_err() {
            return false;
        }
        self.has_signal.store(true, Ordering::Release);
        self.state.wake()
    }

    /// The mailbox reached the subscriber's `long_message_queue` threshold.
    #[cold]
    #[inline(never)]
    fn long_queue(&self, node: &crate::node::NodeShared, len: usize) {
        if !self.lmq_long.swap(true, Ordering::Relaxed) {
            // Until back under the off threshold, each drain checks (cold).
            self.has_signal.store(true, Ordering::Release);
            node.sysmon.long_queue(node, self.pid, len, true);
        }
    }

    /// Whether `has_signal` must stay set after a drain (see `limit` and
    /// `lmq_long`).
    #[inline]
    fn sticky_signal(&self) -> bool {
        self.limit.is_some() || self.lmq_long.load(Ordering::Relaxed)
    }

    /// After a drain that found `has_signal` set: what limited and long
    /// mailboxes keep track of; `queued` is the private queue's length.
    #[cold]
    #[inline(never)]
    fn after_flagged_drain(&self, queued: usize) {
        if let Some(l) = &self.limit {
            l.saved_len.store(queued, Ordering::Relaxed);
        }
        if self.lmq_long.load(Ordering::Relaxed) {
            let Some(w) = crate::context::worker() else {
                return;
            };
            let n = &w.node;
            let off = n.sysmon.lmq_off.load(Ordering::Relaxed);
            if n.sysmon.lmq_on.load(Ordering::Relaxed) == 0 || queued <= off {
                self.lmq_long.store(false, Ordering::Relaxed);
                n.sysmon.long_queue(n, self.pid, queued, false);
            }
        }
    }

    /// Moves the mailbox into the private queue, handling exit signals and
    /// dropping notifications of cancelled monitors on the way. Unwinds (ends
    /// the process) when a signal kills it.
    ///
    /// # Safety
    ///
    /// As for [`Process::local`]: called by the running process itself.
    #[inline]
    pub(crate) unsafe fn drain(&self) {
        // SAFETY: our precondition.
        unsafe { self.drain_or_take(false) };
    }

    /// [`Process::drain`], except that one plain message that came alone
    /// to an empty private queue is handed back instead of queued
    /// ([`Mailbox::drain_or_take_lone`]); it counts as received. Signals
    /// and flagged mail take the full drain.
    ///
    /// # Safety
    ///
    /// As for [`Process::local`]: called by the running process itself.
    #[inline]
    pub(crate) unsafe fn drain_or_take_lone(&self) -> Option<Mail> {
        // SAFETY: our precondition.
        unsafe { self.drain_or_take(true) }
    }

    /// The two drains; `lone` asks for [`Process::drain_or_take_lone`]
    /// (a constant where either is inlined).
    ///
    /// # Safety
    ///
    /// As for [`Process::local`]: called by the running process itself.
    #[inline(always)]
    unsafe fn drain_or_take(&self, lone: bool) -> Option<Mail> {
        let signalled = self.has_signal.load(Ordering::Relaxed);
        if signalled {
            // SAFETY: the caller is the running process (our precondition).
            unsafe { self.signal_pending() };
        }
        // SAFETY: the caller is the running process (our precondition).
        let local = unsafe { self.local() };
        let start = local.saved.len();
        let (n, flagged) = if lone && !signalled && start == 0 {
            match self.mailbox.drain_or_take_lone(&mut local.saved) {
                mailbox::Drained::Lone(m) => {
                    local.received += 1;
                    return Some(m);
                }
                mailbox::Drained::Moved(n, flagged) => (n, flagged),
            }
        } else {
            self.mailbox.drain_into(&mut local.saved)
        };
        local.received += n as u64;
        if flagged {
            // SAFETY: as above.
            unsafe { self.handle_flagged(start) };
        }
        if signalled {
            // SAFETY: as above.
            let queued = unsafe { self.local() }.saved.len();
            self.after_flagged_drain(queued);
        }
        None
    }

    /// A signal was flagged, or the process is doomed: a doomed process
    /// (one that acted on an exit signal and caught the unwind) unwinds
    /// again with that reason; otherwise the flag is cleared for the drain.
    ///
    /// # Safety
    ///
    /// As for [`Process::local`]: called by the running process itself.
    #[cold]
    #[inline(never)]
    pub(crate) unsafe fn signal_pending(&self) {
        // SAFETY: the caller is the running process (our precondition).
        let doomed = unsafe { &self.local().doomed };
        match doomed {
            // Not while unwinding already (a destructor calling the
            // runtime): a second panic would abort the node.
            Some(reason) if !std::thread::panicking() => {
                std::panic::resume_unwind(ExitUnwind::signal(ExitReason::clone(reason)))
            }
            Some(_) => {}
            None if self.sticky_signal() => {}
            None => self.has_signal.store(false, Ordering::Relaxed),
        }
    }

    /// Unwinds again if the process is doomed (see [`Local::doomed`]);
    /// for runtime calls that do not drain (they leave `has_signal` alone).
    /// Callers test `has_signal` first, so this costs one load otherwise.
    ///
    /// # Safety
    ///
    /// As for [`Process::local`]: called by the running process itself.
    #[cold]
    #[inline(never)]
    pub(crate) unsafe fn check_doomed(&self) {
        // SAFETY: the caller is the running process (our precondition).
        if let Some(reason) = unsafe { &self.local().doomed } {
            if !std::thread::panicking() {
                std::panic::resume_unwind(ExitUnwind::signal(ExitReason::clone(reason)));
            }
        }
    }

    /// Ends the running process with `reason`, an exit signal it acts on:
    /// marks it doomed first (see [`Local::doomed`]); `local` is its own.
    fn act_on_signal(&self, local: &mut Local, reason: ExitReason) -> ! {
        local.doomed = Some(Box::new(reason.clone()));
        self.attend(ATTEND_DOOMED);
        self.has_signal.store(true, Ordering::Relaxed);
        std::panic::resume_unwind(ExitUnwind::signal(reason))
    }

    /// The rare part of [`Process::drain`]: signals and monitor
    /// notifications among the mail from `start` on.
    ///
    /// # Safety
    ///
    /// As for [`Process::drain`].
    #[cold]
    #[inline(never)]
    unsafe fn handle_flagged(&self, start: usize) {
        // SAFETY: the caller is the running process (our precondition).
        let local = unsafe { self.local() };
        let fresh: Vec<Mail> = local.saved.drain(start..).collect();
        for mail in fresh {
            match mail {
                Mail::Msg(_) | Mail::Encoded { .. } | Mail::Dropped => local.saved.push_back(mail),
                Mail::Down(d) => {
                    // Deliver only if the monitor is still wanted; it fires once.
                    if let Some(i) = local.monitors.iter().position(|(r, _)| *r == d.monitor) {
                        local.monitors.swap_remove(i);
                        local.saved.push_back(Mail::Down(d));
                    }
                }
                Mail::Signal { from, reason, link } => {
                    let trapping = {
                        let mut meta = self.meta.lock();
                        if link {
                            let Some(i) = meta.links.iter().position(|p| *p == from) else {
                                continue; // unlinked since: ignore
                            };
                            meta.links.swap_remove(i);
                        }
                        meta.trap_exits
                    };
                    if reason == ExitReason::Kill && !link {
                        self.act_on_signal(local, ExitReason::Killed);
                    }
                    if reason == ExitReason::MailboxOverflow && !link && from == self.pid {
                        // The limit's kill (`over_limit`): untrappable.
                        self.act_on_signal(local, ExitReason::MailboxOverflow);
                    }
                    if trapping {
                        local
                            .saved
                            .push_back(Mail::msg(ExitSignal { from, reason }));
                    } else if reason.is_normal() && (link || from != self.pid) {
                        // A normal exit signal does not kill a non-trapping
                        // process, unless it sent it to itself (Erlang's
                        // `exit(self(), normal)` ends the caller).
                    } else {
                        self.act_on_signal(local, reason);
                    }
                }
            }
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Dropped without an exit (node shutdown): what it counted goes.
        self.unattend_all();
        // A process dropped before its body returned (node shutdown): mark it,
        // so its body lets corosensei's forced unwind through, then unwind it.
        // SAFETY: `&mut self`: no other reference exists.
        if let Some(c) = unsafe { self.coro_mut() }.take() {
            self.forced_drop.store(true, Ordering::SeqCst);
            drop(c);
        }
    }
}
