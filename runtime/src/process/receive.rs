//! Selective receive: clauses matched by type, then by guard, against the
//! mailbox in arrival order; unmatched mail stays, in order.
//!
//! A receive is built as a chain of clause types (`(((), On<A>), When<B>)`),
//! so matching is static dispatch with no allocation. Each wake-up scans only
//! the mail that arrived since the last scan of the same receive.

use crate::context::{current, current_draining, park_current};
use crate::process::Mail;
use crate::sched::timer::Action;
use crate::Message;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

/// A message of a type no earlier clause asked for, handed to an
/// [`Receive::any`] clause.
///
/// ```no_run
/// use graft::*;
/// let what = receive().on(|n: u32| format!("u32 {n}")).any(|u: Unknown| {
///     match u.downcast::<String>() {
///         Ok(s) => format!("string {s}"),
///         Err(_) => "something else".to_string(),
///     }
/// }).wait();
/// ```
#[derive(Debug)]
pub struct Unknown(pub(crate) Mail);

impl Unknown {
    /// Takes the message as `T`, or hands it back.
    ///
    /// # Errors
    ///
    /// `Err(self)` if the message is not a `T`.
    pub fn downcast<T: Message>(self) -> Result<T, Unknown> {
        self.0.take::<T>().map_err(Unknown)
    }

    /// `true` if the message is a `T`.
    pub fn is<T: Message>(&mut self) -> bool {
        self.0.is::<T>()
    }

    /// Wraps a message taken by its type back up, for code that received
    /// it with an `on` clause and hands it on as unknown (graft-otp's
    /// gen_statem does with exit signals that are not its parent's).
    ///
    /// ```
    /// let mut u = graft::Unknown::from_message(7u32);
    /// assert!(u.is::<u32>());
    /// assert_eq!(u.downcast::<u32>().unwrap(), 7);
    /// ```
    pub fn from_message<T: Message>(msg: T) -> Unknown {
        Unknown(Mail::msg(msg))
    }
}

/// One clause of a receive.
pub trait Clause<R> {
    /// `true` if `matches` runs no user code.
    #[doc(hidden)]
    const PURE: bool = true;
    /// Does this clause take `m`?
    #[doc(hidden)]
    fn matches(&self, m: &mut Mail) -> bool;
    /// Runs the clause on `m` (which it matched).
    #[doc(hidden)]
    fn run(self, m: Mail) -> R;
}

/// A chain of clauses, tried in order.
pub trait Clauses<R> {
    /// Number of clauses in the chain.
    #[doc(hidden)]
    const LEN: usize;
    /// `true` if matching runs no user code (no guards): the private queue
    /// can then be scanned in place.
    #[doc(hidden)]
    const PURE: bool;
    /// Index of the first clause that takes `m`.
    #[doc(hidden)]
    fn find(&self, m: &mut Mail) -> Option<usize>;
    /// Runs clause `i` on `m`.
    #[doc(hidden)]
    fn run(self, i: usize, m: Mail) -> R;
}

impl<R> Clauses<R> for () {
    const LEN: usize = 0;
    const PURE: bool = true;
    fn find(&self, _: &mut Mail) -> Option<usize> {
        None
    }
    fn run(self, _: usize, _: Mail) -> R {
        unreachable!("graft: receive ran a clause that did not match")
    }
}

impl<R, C: Clauses<R>, K: Clause<R>> Clauses<R> for (C, K) {
    const LEN: usize = C::LEN + 1;
    const PURE: bool = C::PURE && K::PURE;
    #[inline]
    fn find(&self, m: &mut Mail) -> Option<usize> {
        match self.0.find(m) {
            Some(i) => Some(i),
            None => self.1.matches(m).then_some(C::LEN),
        }
    }
    #[inline]
    fn run(self, i: usize, m: Mail) -> R {
        if i == C::LEN {
            self.1.run(m)
        } else {
            self.0.run(i, m)
        }
    }
}

/// The value of mail a typed clause has matched.
#[inline]
fn take_matched<A: Message>(m: Mail) -> A {
    if crate::observe::tracing() {
        crate::observe::trace_received(std::any::type_name::<A>());
    }
    match m.take::<A>() {
        Ok(a) => a,
        Err(_) => unreachable!("graft: clause type checked before"),
    }
}

/// Clause: any message of type `A`.
#[derive(Debug)]
pub struct On<A, F>(F, PhantomData<fn(A)>);

impl<R, A: Message, F: FnOnce(A) -> R> Clause<R> for On<A, F> {
    #[inline]
    fn matches(&self, m: &mut Mail) -> bool {
        m.is::<A>()
    }
    #[inline]
    fn run(self, m: Mail) -> R {
        (self.0)(take_matched(m))
    }
}

/// Clause: a message of type `A` for which the guard holds.
#[derive(Debug)]
pub struct When<A, G, F>(G, F, PhantomData<fn(A)>);

impl<R, A: Message, G: Fn(&A) -> bool, F: FnOnce(A) -> R> Clause<R> for When<A, G, F> {
    const PURE: bool = false;
    #[inline]
    fn matches(&self, m: &mut Mail) -> bool {
        m.is::<A>() && m.peek::<A>().is_some_and(|a| (self.0)(a))
    }
    #[inline]
    fn run(self, m: Mail) -> R {
        (self.1)(take_matched(m))
    }
}

/// Clause: any message at all.
#[derive(Debug)]
pub struct Any<F>(F);

impl<R, F: FnOnce(Unknown) -> R> Clause<R> for Any<F> {
    fn matches(&self, m: &mut Mail) -> bool {
        !matches!(m, Mail::Signal { .. } | Mail::Dropped)
    }
    fn run(self, m: Mail) -> R {
        if crate::observe::tracing() {
            crate::observe::trace_received(&format!("{m:?} (matched by any)"));
        }
        (self.0)(Unknown(m))
    }
}

/// A selective receive being built; see [`receive`].
#[must_use = "a receive does nothing until .wait() or .timeout()"]
#[derive(Debug)]
pub struct Receive<R, C> {
    clauses: C,
    /// Mail that arrived before this mark is not looked at ([`Receive::after`]).
    after: Mark,
    _r: PhantomData<fn() -> R>,
}

/// A position in the stream of mail a process has received: taken with
/// [`mark`], it lets a receive skip what arrived before it
/// ([`Receive::after`]). This is Erlang's "ref trick": a receive that waits
/// for a reply carrying a reference made after the mark can only be matched
/// by mail that came later, so it costs the same however many unrelated
/// messages wait in the mailbox.
///
/// A mark is only meaningful to the process that took it (another
/// process's mark makes a receive look at too much or too little).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Mark(u64);

impl Mark {
    /// The mark before any mail: a receive after it looks at everything.
    pub const START: Mark = Mark(0);
}

/// Marks the caller's mailbox now: a receive [`after`](Receive::after) the
/// mark skips the mail that came before. Take the mark, then make
/// the reference (or alias, or monitor) that the awaited message will
/// carry, then send the request.
///
/// # Panics
///
/// Outside a process.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let got = node.run(|| {
///     let me = self_pid();
///     for i in 0..1000u32 {
///         send(me, i); // unrelated mail, skipped below
///     }
///     let m = mark();
///     let r = make_ref();
///     spawn(move || send(me, (r, 7u32)));
///     let v = receive()
///         .after(m)
///         .when(move |(t, _): &(MonitorRef, u32)| *t == r, |(_, v)| v)
///         .wait();
///     (v, expect::<u32>())
/// }).unwrap();
/// assert_eq!(got, (7, 0));
/// ```
pub fn mark() -> Mark {
    let me = current("mark");
    // SAFETY: `me` is the running process.
    unsafe { me.drain() };
    // SAFETY: as above.
    Mark(unsafe { me.local() }.received)
}

/// The index in the private queue from which mail arrived after `m`: mail
/// is only appended at the back and `received` counts every mail that was,
/// so the `received - m` newest are after the mark (fewer if some of them
/// were taken since: then this start is earlier than needed, never later;
/// hence [`Receive::after`] is a shortcut for clauses on fresh references,
/// not a filter).
#[inline]
pub(crate) fn start_of(local: &crate::process::Local, m: Mark) -> usize {
    let newer = local.received.saturating_sub(m.0);
    let newer = usize::try_from(newer).unwrap_or(usize::MAX);
    local.saved.len().saturating_sub(newer)
}

/// Starts a selective receive: add clauses, then [`Receive::wait`] or
/// [`Receive::timeout`].
///
/// Clauses are tried in order on each message, oldest message first; the first
/// message some clause takes is removed and handed to it; the rest stay in the
/// mailbox, in order.
///
/// # Panics
///
/// Outside a process (there is no mailbox).
///
/// # Examples
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let got = node.run(|| {
///     send(self_pid(), "hello".to_string());
///     send(self_pid(), 7u32);
///     // Takes the u32 first although the string arrived first.
///     let n = receive().on(|n: u32| n).wait();
///     let s = receive().when(|s: &String| s.starts_with('h'), |s: String| s.len() as u32).wait();
///     (n, s)
/// }).unwrap();
/// assert_eq!(got, (7, 5));
/// ```
pub fn receive<R>() -> Receive<R, ()> {
    Receive {
        clauses: (),
        after: Mark::START,
        _r: PhantomData,
    }
}

impl<R, C: Clauses<R>> Receive<R, C> {
    /// Adds a clause taking any message of type `A`.
    pub fn on<A: Message, F: FnOnce(A) -> R>(self, f: F) -> Receive<R, (C, On<A, F>)> {
        Receive {
            clauses: (self.clauses, On(f, PhantomData)),
            after: self.after,
            _r: PhantomData,
        }
    }

    /// Adds a clause taking a message of type `A` for which `guard` holds.
    pub fn when<A: Message, G: Fn(&A) -> bool, F: FnOnce(A) -> R>(
        self,
        guard: G,
        f: F,
    ) -> Receive<R, (C, When<A, G, F>)> {
        Receive {
            clauses: (self.clauses, When(guard, f, PhantomData)),
            after: self.after,
            _r: PhantomData,
        }
    }

    /// Adds a clause taking any message.
    pub fn any<F: FnOnce(Unknown) -> R>(self, f: F) -> Receive<R, (C, Any<F>)> {
        Receive {
            clauses: (self.clauses, Any(f)),
            after: self.after,
            _r: PhantomData,
        }
    }

    /// Skips mail that arrived before `m` (see [`Mark`]): what came
    /// before stays in the mailbox, in order, and costs nothing to pass.
    ///
    /// As Erlang's ref trick, this is a shortcut, not a filter: every mail
    /// that arrived after the mark is looked at, and so may a few from
    /// before it (when mail was taken from the mailbox between the mark and
    /// this receive). So the clauses must take only mail that carries a
    /// reference (or alias, or monitor) made after the mark, as a call's
    /// wait does: then the result is the same as without the mark.
    ///
    /// ```
    /// use graft::*;
    /// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
    /// let got = node.run(|| {
    ///     let me = self_pid();
    ///     send(me, 1u8);
    ///     let m = mark();
    ///     let r = make_ref();
    ///     send(me, (r, 2u8));
    ///     let later = receive()
    ///         .after(m)
    ///         .when(move |(t, _): &(MonitorRef, u8)| *t == r, |(_, x)| x)
    ///         .wait();
    ///     (later, expect::<u8>())
    /// }).unwrap();
    /// assert_eq!(got, (2, 1));
    /// ```
    pub fn after(mut self, m: Mark) -> Self {
        self.after = m;
        self
    }

    /// Waits until a clause matches and returns its result.
    pub fn wait(self) -> R {
        match receive_until(self.clauses, self.after, None) {
            Some(r) => r,
            None => unreachable!("graft: a receive without deadline returned nothing"),
        }
    }

    /// Waits at most `d`; `None` if nothing matched by then.
    pub fn timeout(self, d: Duration) -> Option<R> {
        receive_until(
            self.clauses,
            self.after,
            Some(crate::sched::timer::deadline_after(d)),
        )
    }

    /// Waits until `deadline`; `None` if nothing matched by then.
    pub fn deadline(self, deadline: Instant) -> Option<R> {
        receive_until(self.clauses, self.after, Some(deadline))
    }
}

/// Removes and returns the first mail at index `>= from` that `find` accepts.
#[inline]
fn take_first(
    saved: &mut VecDeque<Mail>,
    from: usize,
    find: impl Fn(&mut Mail) -> Option<usize>,
) -> Option<(usize, Mail)> {
    // The common case first: the oldest mail is the one wanted.
    if from == 0 {
        let idx = find(saved.front_mut()?);
        if let Some(idx) = idx {
            return saved.pop_front().map(|m| (idx, m));
        }
        return take_first(saved, 1, find);
    }
    let (pos, idx) = saved
        .range_mut(from..)
        .enumerate()
        .find_map(|(pos, m)| find(m).map(|i| (pos + from, i)))?;
    let m = if pos == 0 {
        saved.pop_front()
    } else {
        saved.remove(pos)
    };
    Some((idx, m.expect("index in range")))
}

/// The receive loop shared by every form.
fn receive_until<R, C: Clauses<R>>(
    clauses: C,
    after: Mark,
    deadline: Option<Instant>,
) -> Option<R> {
    // The loop drains first: the drain checks the doom flag.
    let me = current_draining("receive");
    let mut scanned = usize::MAX;
    let mut timer = None;
    let found = loop {
        // The common case: nothing waits in the private queue and one
        // message came. It is matched where it lies (no line of the queue's
        // buffer touched); it came after any mark, since all mail before it
        // was taken. Otherwise this is the full drain.
        // SAFETY: `me` is the running process.
        if let Some(mut m) = unsafe { me.drain_or_take_lone() } {
            // No reference into `local` lives while guards run user code.
            if let Some(i) = clauses.find(&mut m) {
                break Some((i, m));
            }
            // SAFETY: as above. It is older than whatever guards received
            // meanwhile, so it goes in front, and it has been looked at.
            unsafe { me.local() }.saved.push_front(m);
            scanned = 1;
        }
        if scanned == usize::MAX {
            scanned = if after == Mark::START {
                0
            } else {
                // SAFETY: as above.
                start_of(unsafe { me.local() }, after)
            };
        }
        let hit = if C::PURE {
            // SAFETY: as above; matching runs no user code, so nothing else
            // reaches `local` while this reference lives.
            let saved = unsafe { &mut me.local().saved };
            let hit = take_first(saved, scanned, |m| clauses.find(m));
            scanned = saved.len();
            hit
        } else {
            // SAFETY: as above; the private queue is taken out of `local`
            // while user guards run, so no reference into it is live across
            // user code.
            let mut saved = std::mem::take(unsafe { &mut me.local().saved });
            let hit = take_first(&mut saved, scanned, |m| clauses.find(m));
            scanned = saved.len();
            // SAFETY: as above; put the queue back (guards may have received,
            // in which case their mail is appended after ours).
            let local = unsafe { me.local() };
            if !local.saved.is_empty() {
                saved.append(&mut local.saved);
            }
            local.saved = saved;
            hit
        };
        if let Some(hit) = hit {
            break Some(hit);
        }
        if let Some(d) = deadline {
            if Instant::now() >= d {
                break None;
            }
            if timer.is_none() {
                timer = Some(crate::context::node().add_timer(d, Action::Wake(me.pid)));
            }
        }
        park_current(me);
    };
    if let Some(t) = timer {
        crate::context::node().timers.cancel(t);
    }
    found.map(|(i, m)| clauses.run(i, m))
}

/// Waits for a message of type `M` and returns it; other messages stay in
/// the mailbox, in order.
///
/// # Panics
///
/// Outside a process.
///
/// # Examples
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let n = node.run(|| { send(self_pid(), 5u64); expect::<u64>() }).unwrap();
/// assert_eq!(n, 5);
/// ```
#[inline]
pub fn expect<M: Message>() -> M {
    receive().on(|m: M| m).wait()
}

/// Like [`expect`], giving up after `d`.
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let r = node.run(|| expect_timeout::<u64>(std::time::Duration::from_millis(10))).unwrap();
/// assert_eq!(r, None);
/// ```
pub fn expect_timeout<M: Message>(d: Duration) -> Option<M> {
    receive().on(|m: M| m).timeout(d)
}
