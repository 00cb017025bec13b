//! gen_statem: OTP's code-lock example, the three kinds of timeout,
//! postpone order, enter calls, next_event order, stop, remote calls and
//! supervision.

mod common;

use common::{down_reason, mailbox_now, HANG};
use graft_otp::gen_statem::{self, Action, Event, GenStatem, StateFn, Statem, Transition};
use graft_otp::prelude::*;
use std::time::Duration;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---------------------------------------------------------------------------
// The code lock (OTP System Documentation, "gen_statem Behaviour": the
// version with state enter calls, an event timeout that clears the typed
// buttons, a state timeout back to `locked`, and postponed buttons while
// the door is open), in state-functions mode.

/// What the lock reports to its observer (`do_lock()` / `do_unlock()`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Door {
    Locked,
    Unlocked,
    /// (For the tests.) The button timeout cleared the typed buttons.
    Cleared,
}
impl graft::Message for Door {}

struct CodeLock {
    code: Vec<u8>,
    buttons: Vec<u8>,
    observer: Pid,
    open_time: Duration,
    button_time: Duration,
}

/// `button(Button) -> gen_statem:cast(?NAME, {button, Button})`.
struct Button(u8);
impl graft::Message for Button {}

/// `code_length() -> gen_statem:call(?NAME, code_length)`, and (for the
/// tests) the buttons typed so far.
#[derive(Debug, PartialEq, Eq)]
enum LockCall {
    CodeLength,
    Buttons,
}
impl graft::Message for LockCall {}
use LockCall::{Buttons, CodeLength};

#[derive(Debug, PartialEq, Eq)]
enum LockReply {
    Length(usize),
    Typed(Vec<u8>),
}
impl graft::Message for LockReply {}

impl CodeLock {
    const LOCKED: StateFn<CodeLock> = StateFn::new("locked", CodeLock::locked);
    const OPEN: StateFn<CodeLock> = StateFn::new("open", CodeLock::open);

    fn locked(&mut self, e: Event<Self>) -> Transition<Self> {
        match e {
            Event::Enter(_) => {
                send(self.observer, Door::Locked); // do_lock()
                self.buttons.clear();
                Transition::keep()
            }
            Event::EventTimeout(()) => {
                self.buttons.clear();
                send(self.observer, Door::Cleared);
                Transition::keep()
            }
            Event::Cast(Button(b)) => {
                if self.buttons.len() >= self.code.len() {
                    self.buttons.remove(0);
                }
                self.buttons.push(b);
                if self.buttons == self.code {
                    Transition::next(Self::OPEN)
                } else {
                    Transition::keep().event_timeout(self.button_time, ())
                }
            }
            e => self.handle_common(e),
        }
    }

    fn open(&mut self, e: Event<Self>) -> Transition<Self> {
        match e {
            Event::Enter(_) => {
                send(self.observer, Door::Unlocked); // do_unlock()
                Transition::keep().state_timeout(self.open_time, ())
            }
            Event::StateTimeout(()) => Transition::next(Self::LOCKED),
            e @ Event::Cast(Button(_)) => Transition::keep().postpone(e),
            e => self.handle_common(e),
        }
    }

    fn handle_common(&mut self, e: Event<Self>) -> Transition<Self> {
        match e {
            Event::Call(CodeLength, from) => {
                Transition::keep().reply(from, LockReply::Length(self.code.len()))
            }
            Event::Call(Buttons, from) => {
                Transition::keep().reply(from, LockReply::Typed(self.buttons.clone()))
            }
            _ => Transition::keep(),
        }
    }
}

impl GenStatem for CodeLock {
    type State = StateFn<Self>;
    type Call = LockCall;
    type Cast = Button;
    type Reply = LockReply;
    type Internal = ();
    const STATE_ENTER: bool = true;

    fn init(&mut self) -> Transition<Self> {
        Transition::next(Self::LOCKED)
    }

    fn handle_event(&mut self, s: &StateFn<Self>, e: Event<Self>) -> Transition<Self> {
        s.call(self, e)
    }
}

fn door() -> Door {
    expect_timeout::<Door>(HANG).expect("the lock reports")
}

mod code_lock {
    use super::*;

    otp_test! {
        fn code_lock_opens_on_the_code_relocks_on_its_state_timeout_and_postpones_buttons() {
            let lock = gen_statem::start_named(
                "code_lock",
                CodeLock {
                    code: vec![1, 2, 3],
                    buttons: vec![],
                    observer: self_pid(),
                    open_time: ms(300),
                    button_time: Duration::from_secs(30),
                },
            )
            .unwrap();
            assert_eq!(Statem::<CodeLock>::whereis("code_lock"), Some(lock));
            // The initial state's enter call locks.
            assert_eq!(door(), Door::Locked);
            assert_eq!(lock.call(CodeLength).unwrap(), LockReply::Length(3));
            // A wrong prefix, then the code: only the last three count.
            for b in [9, 1, 2, 3] {
                lock.cast(Button(b));
            }
            assert_eq!(door(), Door::Unlocked);
            // Buttons pressed while open are postponed, then replayed in the
            // locked state after the state timeout: 1, 2, 3 opens it again.
            for b in [1, 2, 3] {
                lock.cast(Button(b));
            }
            assert_eq!(
                lock.call(CodeLength).unwrap(),
                LockReply::Length(3),
                "calls are not postponed"
            );
            assert_eq!(door(), Door::Locked, "the state timeout locks");
            assert_eq!(door(), Door::Unlocked, "the postponed buttons opened it again");
            assert_eq!(door(), Door::Locked);
            lock.stop(ExitReason::Normal).unwrap();
            assert!(mailbox_now().is_empty());
        }

        fn code_lock_event_timeout_clears_the_typed_buttons() {
            let lock = gen_statem::start(CodeLock {
                code: vec![1, 2, 3],
                buttons: vec![],
                observer: self_pid(),
                open_time: Duration::from_secs(30),
                button_time: ms(20),
            })
            .unwrap();
            assert_eq!(door(), Door::Locked);
            lock.cast(Button(1));
            lock.cast(Button(2));
            // The button timeout forgets what was typed (polling with calls
            // would keep it from firing: any event cancels it).
            assert_eq!(door(), Door::Cleared);
            lock.cast(Button(3));
            assert_eq!(lock.call(Buttons).unwrap(), LockReply::Typed(vec![3]), "still locked");
            for b in [1, 2, 3] {
                lock.cast(Button(b));
            }
            assert_eq!(door(), Door::Unlocked);
            lock.stop(ExitReason::Normal).unwrap();
            assert!(mailbox_now().is_empty());
        }
    }
}

// ---------------------------------------------------------------------------
// A scriptable machine that reports every event it gets, in handle-event
// mode (states are numbers). `ENTER` is its `STATE_ENTER`.

#[derive(Debug, Clone)]
enum Act {
    To(u8),
    Repeat,
    Stop(ExitReason),
    /// Postpone this cast when in this state.
    PostponeIn(u8),
    Next(&'static str),
    EventTimeout(u64, &'static str),
    StateTimeout(u64, &'static str),
    Timeout(&'static str, u64, &'static str),
    CancelTimeout(&'static str),
    CancelStateTimeout,
    Sleep(u64),
    /// Wait in the handler for a [`Release`] (the casts sent meanwhile
    /// queue up behind this one).
    Block,
    /// Trap exits.
    Trap,
    /// Trap exits and link a process that crashes at once.
    LinkCrash,
    Hibernate,
    Panic,
}

#[derive(Debug, Clone)]
struct Cmd(&'static str, Vec<Act>);
impl graft::Message for Cmd {}

/// `(state, what happened)`, sent to the observer for each event.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen(u8, String);
impl graft::Message for Seen {}

struct Rec<const ENTER: bool> {
    obs: Pid,
    /// Actions for the enter call of a state.
    on_enter: Vec<(u8, Act)>,
}

impl<const ENTER: bool> Rec<ENTER> {
    fn report(&self, state: u8, what: String) {
        send(self.obs, Seen(state, what));
    }

    fn script(
        &mut self,
        state: u8,
        cmd: Cmd,
        from: Option<gen_statem::ReplyTo<u8>>,
    ) -> Transition<Self> {
        let Cmd(label, acts) = cmd.clone();
        let mut t = Transition::keep();
        let mut postponed = false;
        for a in acts {
            t = match a {
                // The destination comes first in a script (it starts the
                // transition; later acts add actions to it).
                Act::To(s) => Transition::next(s),
                Act::Repeat => Transition::repeat(),
                Act::Stop(r) => Transition::stop(r),
                Act::PostponeIn(s) if s == state => {
                    postponed = true;
                    t
                }
                Act::PostponeIn(_) => t,
                Act::Next(tag) => t.next_event(Event::Internal(tag)),
                Act::EventTimeout(d, tag) => t.event_timeout(ms(d), tag),
                Act::StateTimeout(d, tag) => t.state_timeout(ms(d), tag),
                Act::Timeout(n, d, tag) => t.timeout(n, ms(d), tag),
                Act::CancelTimeout(n) => t.action(Action::CancelTimeout(n)),
                Act::CancelStateTimeout => t.action(Action::CancelStateTimeout),
                Act::Sleep(d) => {
                    sleep(ms(d));
                    t
                }
                Act::Block => {
                    expect_timeout::<Release>(HANG).expect("the test releases the machine");
                    t
                }
                Act::Trap => {
                    trap_exits(true);
                    t
                }
                Act::LinkCrash => {
                    trap_exits(true);
                    spawn_link(|| panic!("linked crash"));
                    t
                }
                Act::Hibernate => t.hibernate(),
                Act::Panic => panic!("scripted panic"),
            };
        }
        if postponed {
            self.report(state, format!("postpone {label}"));
            return t.postpone(Event::Cast(cmd));
        }
        self.report(state, format!("cast {label}"));
        match from {
            Some(from) => t.reply(from, state),
            None => t,
        }
    }
}

impl<const ENTER: bool> GenStatem for Rec<ENTER> {
    type State = u8;
    type Call = Cmd;
    type Cast = Cmd;
    type Reply = u8;
    type Internal = &'static str;
    const STATE_ENTER: bool = ENTER;

    fn init(&mut self) -> Transition<Self> {
        Transition::next(0)
    }

    fn handle_event(&mut self, state: &u8, e: Event<Self>) -> Transition<Self> {
        let state = *state;
        match e {
            Event::Cast(cmd) => self.script(state, cmd, None),
            Event::Call(cmd, from) => self.script(state, cmd, Some(from)),
            Event::Enter(old) => {
                self.report(state, format!("enter {old}"));
                let mut t = Transition::keep();
                for (s, a) in self.on_enter.clone() {
                    if s != state {
                        continue;
                    }
                    t = match a {
                        Act::StateTimeout(d, tag) => t.state_timeout(ms(d), tag),
                        Act::To(s) => Transition::next(s),
                        Act::Next(tag) => t.next_event(Event::Internal(tag)),
                        _ => t,
                    };
                }
                t
            }
            Event::EventTimeout(tag) => {
                self.report(state, format!("event_timeout {tag}"));
                Transition::keep()
            }
            Event::StateTimeout(tag) => {
                self.report(state, format!("state_timeout {tag}"));
                Transition::keep()
            }
            Event::Timeout(name, tag) => {
                self.report(state, format!("timeout {name} {tag}"));
                Transition::keep()
            }
            Event::Internal(tag) => {
                self.report(state, format!("internal {tag}"));
                Transition::keep()
            }
            Event::Info(mut u) => {
                let what = if u.is::<u32>() {
                    "info u32"
                } else if u.is::<ExitSignal>() {
                    "info exit"
                } else {
                    "info ?"
                };
                self.report(state, what.to_string());
                Transition::keep()
            }
        }
    }

    fn terminate(&mut self, reason: &ExitReason, state: &u8) {
        self.report(*state, format!("terminate {reason}"));
    }
}

fn rec<const E: bool>() -> Statem<Rec<E>> {
    gen_statem::start(Rec::<E> {
        obs: self_pid(),
        on_enter: vec![],
    })
    .unwrap()
}

fn cast<const E: bool>(m: Statem<Rec<E>>, label: &'static str, acts: Vec<Act>) {
    m.cast(Cmd(label, acts));
}

/// Lets a blocked machine go on.
struct Release;
impl graft::Message for Release {}

/// Sends the casts of `f` while the machine is blocked, so that they are
/// all queued when it handles the first (reported as "cast busy").
fn queued<const E: bool>(m: Statem<Rec<E>>, f: impl FnOnce()) {
    cast(m, "busy", vec![Act::Block]);
    f();
    send(m.pid(), Release);
}

fn seen() -> Seen {
    expect_timeout::<Seen>(HANG).expect("the machine reports an event")
}

/// The next `n` reports, as `"state: what"`.
fn seen_n(n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let Seen(s, w) = seen();
            format!("{s}: {w}")
        })
        .collect()
}

fn nothing_more() {
    sleep(ms(20));
    let left: Vec<Seen> = mailbox_now()
        .into_iter()
        .filter_map(|u| u.downcast::<Seen>().ok())
        .collect();
    assert!(left.is_empty(), "unexpected events: {left:?}");
}

mod scripted {
    use super::*;

    otp_test! {
        fn enter_calls_run_for_the_initial_state_each_change_and_repeats_only() {
            let m = rec::<true>();
            assert_eq!(seen_n(1), ["0: enter 0"]);
            cast(m, "a", vec![Act::To(1)]);
            cast(m, "b", vec![Act::To(1)]); // same state: no enter
            cast(m, "c", vec![]);
            cast(m, "d", vec![Act::Repeat]);
            cast(m, "e", vec![Act::To(0)]);
            assert_eq!(
                seen_n(7),
                ["0: cast a", "1: enter 0", "1: cast b", "1: cast c", "1: cast d", "1: enter 1", "1: cast e"]
            );
            assert_eq!(seen_n(1), ["0: enter 1"]);
            nothing_more();
        }

        fn an_enter_call_may_set_a_state_timeout_but_not_change_state() {
            let m = gen_statem::start(Rec::<true> {
                obs: self_pid(),
                on_enter: vec![(1, Act::StateTimeout(10, "from_enter")), (2, Act::To(0))],
            })
            .unwrap();
            assert_eq!(seen_n(1), ["0: enter 0"]);
            cast(m, "a", vec![Act::To(1)]);
            assert_eq!(seen_n(3), ["0: cast a", "1: enter 0", "1: state_timeout from_enter"]);
            // An enter call that changes state is a bad return: the machine stops.
            let r = monitor(m.pid());
            graft::unlink(m.pid());
            cast(m, "b", vec![Act::To(2)]);
            assert_eq!(seen_n(2), ["1: cast b", "2: enter 1"]);
            let reason = down_reason(r);
            assert!(matches!(&reason, ExitReason::Other(s) if s.contains("bad return")), "{reason:?}");
            assert!(seen().1.starts_with("terminate"));
        }

        fn postponed_events_are_retried_in_order_after_a_state_change_only() {
            let m = rec::<false>();
            cast(m, "p1", vec![Act::PostponeIn(0)]);
            cast(m, "p2", vec![Act::PostponeIn(0)]);
            cast(m, "x", vec![]);
            cast(m, "p3", vec![Act::PostponeIn(0)]);
            cast(m, "same", vec![Act::To(0)]); // not a change: nothing retried
            cast(m, "go", vec![Act::To(1)]);
            assert_eq!(
                seen_n(9),
                [
                    "0: postpone p1", "0: postpone p2", "0: cast x", "0: postpone p3", "0: cast same",
                    "0: cast go", "1: cast p1", "1: cast p2", "1: cast p3",
                ]
            );
            nothing_more();
        }

        fn a_postponed_event_is_postponed_again_and_keeps_its_place() {
            let m = rec::<false>();
            cast(m, "p1", vec![Act::PostponeIn(0), Act::PostponeIn(1)]);
            cast(m, "p2", vec![Act::PostponeIn(0)]);
            cast(m, "go", vec![Act::To(1)]);
            cast(m, "back", vec![Act::To(2)]);
            assert_eq!(
                seen_n(7),
                [
                    "0: postpone p1", "0: postpone p2", "0: cast go", "1: postpone p1", "1: cast p2",
                    "1: cast back", "2: cast p1",
                ]
            );
            nothing_more();
        }

        fn next_events_run_first_in_order_before_queued_and_retried_events() {
            let m = rec::<true>();
            assert_eq!(seen_n(1), ["0: enter 0"]);
            queued(m, || {
                cast(m, "a", vec![Act::Next("n1"), Act::Next("n2")]);
                cast(m, "b", vec![]);
            });
            assert_eq!(
                seen_n(5),
                ["0: cast busy", "0: cast a", "0: internal n1", "0: internal n2", "0: cast b"]
            );
            // With a state change: the enter call first, then the inserted
            // events, then the retried postponed one.
            cast(m, "p", vec![Act::PostponeIn(0)]);
            cast(m, "go", vec![Act::To(1), Act::Next("n3")]);
            assert_eq!(
                seen_n(5),
                ["0: postpone p", "0: cast go", "1: enter 0", "1: internal n3", "1: cast p"]
            );
            nothing_more();
        }

        fn an_event_timeout_fires_when_idle_and_any_event_cancels_it() {
            let m = rec::<false>();
            cast(m, "a", vec![Act::EventTimeout(10, "e1")]);
            assert_eq!(seen_n(2), ["0: cast a", "0: event_timeout e1"]);
            // "c" is queued when "b" sets its event timeout: it cancels it.
            queued(m, || {
                cast(m, "b", vec![Act::EventTimeout(200, "e2")]);
                cast(m, "c", vec![Act::Timeout("g", 400, "done")]);
            });
            assert_eq!(seen_n(4), ["0: cast busy", "0: cast b", "0: cast c", "0: timeout g done"]);
            // An inserted event cancels it too (it is not even started).
            cast(m, "d", vec![Act::EventTimeout(0, "e3"), Act::Next("n")]);
            cast(m, "e", vec![Act::EventTimeout(0, "e4")]);
            assert_eq!(
                seen_n(4),
                ["0: cast d", "0: internal n", "0: cast e", "0: event_timeout e4"]
            );
            nothing_more();
        }

        fn a_state_timeout_survives_events_but_not_a_state_change() {
            let m = rec::<false>();
            queued(m, || {
                cast(m, "a", vec![Act::StateTimeout(30, "s1")]);
                cast(m, "b", vec![]);
            });
            assert_eq!(seen_n(4), ["0: cast busy", "0: cast a", "0: cast b", "0: state_timeout s1"]);
            queued(m, || {
                cast(m, "c", vec![Act::StateTimeout(100, "s2")]);
                cast(m, "d", vec![Act::To(1)]);
                cast(m, "e", vec![Act::Timeout("g", 300, "done")]);
            });
            assert_eq!(
                seen_n(5),
                ["0: cast busy", "0: cast c", "0: cast d", "1: cast e", "1: timeout g done"]
            );
            // Setting it again restarts it (the first payload never arrives);
            // cancelling stops it.
            queued(m, || {
                cast(m, "f", vec![Act::StateTimeout(100, "s3")]);
                cast(m, "g", vec![Act::StateTimeout(20, "s4")]);
            });
            assert_eq!(seen_n(4), ["1: cast busy", "1: cast f", "1: cast g", "1: state_timeout s4"]);
            queued(m, || {
                cast(m, "h", vec![Act::StateTimeout(50, "s5")]);
                cast(m, "i", vec![Act::CancelStateTimeout, Act::Timeout("g", 200, "done2")]);
            });
            assert_eq!(seen_n(4), ["1: cast busy", "1: cast h", "1: cast i", "1: timeout g done2"]);
            // A zero state timeout comes at once, after queued events.
            cast(m, "j", vec![Act::StateTimeout(0, "s0"), Act::Next("n")]);
            assert_eq!(seen_n(3), ["1: cast j", "1: internal n", "1: state_timeout s0"]);
            nothing_more();
        }

        fn generic_timeouts_are_named_restarted_cancelled_and_outlive_state_changes() {
            let m = rec::<false>();
            queued(m, || {
                cast(m, "a", vec![Act::Timeout("x", 150, "x1"), Act::Timeout("y", 50, "y1")]);
                cast(m, "b", vec![Act::To(1), Act::Timeout("x", 10, "x2")]);
            });
            let mut got = seen_n(5);
            got[3..].sort();
            assert_eq!(
                got,
                ["0: cast busy", "0: cast a", "0: cast b", "1: timeout x x2", "1: timeout y y1"]
            );
            queued(m, || {
                cast(m, "c", vec![Act::Timeout("z", 50, "z1")]);
                cast(m, "d", vec![Act::CancelTimeout("z"), Act::Timeout("w", 200, "w1")]);
            });
            assert_eq!(seen_n(4), ["1: cast busy", "1: cast c", "1: cast d", "1: timeout w w1"]);
            nothing_more();
        }

        fn info_messages_calls_and_stop_with_a_reply() {
            let m = rec::<false>();
            send(m.pid(), 7u32);
            assert_eq!(seen_n(1), ["0: info u32"]);
            // A trapped exit signal from another process than the parent is
            // an info event (the parent's stops the machine).
            cast(m, "trap", vec![Act::LinkCrash]);
            assert_eq!(seen_n(2), ["0: cast trap", "0: info exit"]);
            // A hibernated machine wakes up on the next message.
            cast(m, "h", vec![Act::Hibernate, Act::StateTimeout(5, "after")]);
            assert_eq!(seen_n(2), ["0: cast h", "0: state_timeout after"]);
            assert_eq!(m.call(Cmd("q", vec![Act::To(3)])).unwrap(), 0);
            assert_eq!(seen_n(1), ["0: cast q"]);
            graft::unlink(m.pid());
            let r = monitor(m.pid());
            // stop_and_reply: the reply is sent, then terminate runs.
            let answer = m.call(Cmd("bye", vec![Act::Stop(ExitReason::Shutdown)]));
            assert_eq!(answer, Ok(3));
            assert_eq!(seen_n(2), ["3: cast bye", "3: terminate shutdown"]);
            assert_eq!(down_reason(r), ExitReason::Shutdown);
            assert_eq!(m.call(Cmd("late", vec![])), Err(CallError::NoProc));
        }

        fn a_panic_stops_the_machine_after_terminate_and_stop_runs_terminate() {
            let m = rec::<false>();
            graft::unlink(m.pid());
            let r = monitor(m.pid());
            cast(m, "boom", vec![Act::Panic]);
            assert_eq!(seen_n(1), ["0: terminate scripted panic"]);
            assert_eq!(down_reason(r), ExitReason::Other("scripted panic".into()));
            let m = rec::<false>();
            m.stop(ExitReason::Normal).unwrap();
            assert_eq!(seen_n(1), ["0: terminate normal"]);
        }

        fn a_trapping_machine_stops_on_its_parents_exit_signal() {
            let me = self_pid();
            let (parent, pm) = spawn_monitor(move || {
                let m = gen_statem::start(Rec::<false> { obs: me, on_enter: vec![] }).unwrap();
                send(me, m.pid());
                cast(m, "trap", vec![Act::Trap]);
                expect::<Release>();
                exit_self(ExitReason::Other("bye".into()));
            });
            let machine = expect_timeout::<Pid>(HANG).unwrap();
            let mm = monitor(machine);
            assert_eq!(seen_n(1), ["0: cast trap"]);
            send(parent, Release);
            assert_eq!(down_reason(pm), ExitReason::Other("bye".into()));
            assert_eq!(seen_n(1), ["0: terminate bye"]);
            assert_eq!(down_reason(mm), ExitReason::Other("bye".into()));
        }

        fn a_call_times_out_and_the_late_reply_is_dropped() {
            let m = rec::<false>();
            let r = m.call_timeout(Cmd("slow", vec![Act::Sleep(100)]), ms(5));
            assert_eq!(r, Err(CallError::Timeout));
            assert_eq!(seen_n(1), ["0: cast slow"]);
            assert_eq!(m.call(Cmd("next", vec![])).unwrap(), 0);
            assert_eq!(seen_n(1), ["0: cast next"]);
            sleep(ms(20));
            assert!(mailbox_now().is_empty(), "no stray reply");
        }
    }
}

// ---------------------------------------------------------------------------
// Init failures, supervision, other nodes.

struct NoStart;
impl GenStatem for NoStart {
    type State = ();
    type Call = ();
    type Cast = ();
    type Reply = ();
    type Internal = ();
    fn init(&mut self) -> Transition<Self> {
        Transition::stop(ExitReason::Other("no config".into()))
    }
    fn handle_event(&mut self, _: &(), _: Event<Self>) -> Transition<Self> {
        Transition::keep()
    }
}

/// A switch that counts its flips; `Mobile`, so it can be started on
/// another node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Mobile)]
enum Light {
    Off,
    On,
}

#[derive(Debug, Mobile)]
struct Switch {
    flips: u32,
}

#[derive(Debug, Mobile)]
enum SwitchCall {
    Flip,
    Where,
}

impl GenStatem for Switch {
    type State = Light;
    type Call = SwitchCall;
    type Cast = u32;
    type Reply = (Light, u32, NodeId);
    type Internal = ();
    fn init(&mut self) -> Transition<Self> {
        Transition::next(Light::Off)
    }
    fn handle_event(&mut self, state: &Light, e: Event<Self>) -> Transition<Self> {
        match e {
            Event::Call(SwitchCall::Flip, from) => {
                self.flips += 1;
                let next = match state {
                    Light::Off => Light::On,
                    Light::On => Light::Off,
                };
                Transition::next(next).reply(from, (next, self.flips, this_node()))
            }
            Event::Call(SwitchCall::Where, from) => {
                Transition::keep().reply(from, (*state, self.flips, this_node()))
            }
            Event::Cast(n) => {
                self.flips += n;
                Transition::keep()
            }
            _ => Transition::keep(),
        }
    }
}

mod lifecycle {
    use super::*;

    otp_test! {
        fn a_failed_init_fails_the_start() {
            let r = gen_statem::start(NoStart).map(|s| s.pid());
            assert_eq!(r, Err(StartError::Init(ExitReason::Other("no config".into()))));
        }

        fn a_supervised_machine_is_restarted_with_fresh_data() {
            let sup = Supervisor::new(Strategy::OneForOne)
                .intensity(3, Duration::from_secs(5))
                .child(gen_statem::child_spec("switch", || Switch { flips: 0 }))
                .start()
                .unwrap();
            let first = Statem::<Switch>::from_pid(supervisor::get_child(sup, "switch").unwrap());
            assert_eq!(first.call(SwitchCall::Flip).unwrap().0, Light::On);
            let m = monitor(first.pid());
            exit(first.pid(), ExitReason::Kill);
            assert_eq!(down_reason(m), ExitReason::Killed);
            common::wait_until("the switch is restarted", || {
                supervisor::get_child(sup, "switch").is_some_and(|p| p != first.pid())
            });
            let second = Statem::<Switch>::from_pid(supervisor::get_child(sup, "switch").unwrap());
            let (light, flips, _) = second.call(SwitchCall::Where).unwrap();
            assert_eq!((light, flips), (Light::Off, 0), "a fresh machine");
            // The supervisor's shutdown stops it.
            let m = monitor(second.pid());
            graft::unlink(sup);
            supervisor::stop(sup, ExitReason::Shutdown).unwrap();
            assert_eq!(down_reason(m), ExitReason::Shutdown);
        }
    }
}

/// Two connected nodes; `b`'s id.
fn two_nodes() -> (Node, Node, NodeId) {
    let _ = env_logger::builder().is_test(true).try_init();
    let cfg = || NodeConfig::new("127.0.0.1:0").cookie("statem").workers(2);
    let (a, b) = (Node::start(cfg()).unwrap(), Node::start(cfg()).unwrap());
    let b_id = a.connect(b.addr()).unwrap();
    (a, b, b_id)
}

#[test]
fn a_machine_on_another_node_is_called_cast_to_and_stopped() {
    let (a, b, b_id) = two_nodes();
    a.run(move || {
        let sw = gen_statem::start_on(b_id, Switch { flips: 0 }).unwrap();
        assert_eq!(sw.pid().node(), b_id);
        assert_eq!(sw.call(SwitchCall::Flip).unwrap(), (Light::On, 1, b_id));
        sw.cast(10);
        assert_eq!(sw.call(SwitchCall::Flip).unwrap(), (Light::Off, 12, b_id));
        assert_eq!(
            sw.call_timeout(SwitchCall::Where, HANG).unwrap(),
            (Light::Off, 12, b_id)
        );
        graft::unlink(sw.pid());
        sw.stop(ExitReason::Normal).unwrap();
        assert_eq!(sw.call(SwitchCall::Where), Err(CallError::NoProc));
    })
    .unwrap();
    // A named machine on b, found from a by name.
    b.run(|| {
        let sw = gen_statem::start_named("switch", Switch { flips: 5 }).unwrap();
        graft::unlink(sw.pid());
    })
    .unwrap();
    a.run(move || {
        let sw = Statem::<Switch>::whereis_on("switch", b_id)
            .unwrap()
            .unwrap();
        assert_eq!(sw.call(SwitchCall::Flip).unwrap(), (Light::On, 6, b_id));
        assert_eq!(Statem::<Switch>::whereis_on("nobody", b_id).unwrap(), None);
    })
    .unwrap();
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_call_to_a_machine_whose_node_is_gone_fails_without_hanging() {
    let _ = env_logger::builder().is_test(true).try_init();
    let cfg = || {
        NodeConfig::new("127.0.0.1:0")
            .cookie("statem")
            .workers(2)
            .heartbeat(Duration::from_millis(200))
    };
    let (a, b) = (Node::start(cfg()).unwrap(), Node::start(cfg()).unwrap());
    let b_id = a.connect(b.addr()).unwrap();
    let sw = a
        .run(move || {
            let sw = gen_statem::start_on(b_id, Switch { flips: 0 }).unwrap();
            graft::unlink(sw.pid());
            sw
        })
        .unwrap();
    b.shutdown();
    a.run(move || {
        let r = sw.call_timeout(SwitchCall::Where, HANG);
        assert!(
            matches!(r, Err(CallError::NoConnection | CallError::NoProc)),
            "{r:?}"
        );
    })
    .unwrap();
    a.shutdown();
}

/// Takes the switch's calls but says it replies with a number: a client
/// that names the wrong machine type.
struct Liar;
impl GenStatem for Liar {
    type State = ();
    type Call = SwitchCall;
    type Cast = u32;
    type Reply = u64;
    type Internal = ();
    fn init(&mut self) -> Transition<Self> {
        Transition::next(())
    }
    fn handle_event(&mut self, _: &(), _: Event<Self>) -> Transition<Self> {
        Transition::keep()
    }
}

#[test]
fn a_remote_call_expecting_another_reply_type_is_refused_with_a_reason() {
    let (a, b, b_id) = two_nodes();
    a.run(move || {
        let sw = gen_statem::start_on(b_id, Switch { flips: 0 }).unwrap();
        graft::unlink(sw.pid());
        let liar = Statem::<Liar>::from_pid(sw.pid());
        match liar.call_timeout(SwitchCall::Flip, HANG) {
            Err(CallError::Remote(why)) => assert!(why.contains("different type"), "{why}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        // The machine took nothing and still answers its real clients.
        assert_eq!(sw.call(SwitchCall::Where).unwrap(), (Light::Off, 0, b_id));
    })
    .unwrap();
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_call_from_a_deep_mailbox_is_answered_and_leaves_the_mail_in_order() {
    let node = common::node(2);
    node.run(|| {
        let sw = gen_statem::start(Switch { flips: 0 }).unwrap();
        let me = self_pid();
        for i in 0..100_000u32 {
            send(me, i);
        }
        for n in 1..=100u32 {
            assert_eq!(sw.call(SwitchCall::Flip).unwrap().1, n);
        }
        for i in 0..100_000u32 {
            assert_eq!(receive().on(|v: u32| v).timeout(Duration::ZERO), Some(i));
        }
        assert!(
            mailbox_now().is_empty(),
            "no stray reply or monitor message"
        );
    })
    .unwrap();
    node.shutdown();
}
