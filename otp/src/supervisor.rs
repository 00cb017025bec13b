//! `supervisor`: a process that starts children, watches them, and restarts
//! them by a strategy, giving up (and exiting) when they crash too often.
//!
//! # The protocol
//!
//! A supervisor is a [`GenServer`] that traps exits. It starts its children
//! in order by calling each [`ChildSpec`]'s start function *inside the
//! supervisor process* (so `gen_server::start`, `Supervisor::start` and
//! `spawn_link` there link the child to the supervisor; the supervisor also
//! links to the returned pid itself, so a start function may use plain
//! `spawn`). A child's exit reaches it as an [`ExitSignal`]:
//!
//! 1. the crash is logged (`log::error!` for abnormal reasons);
//! 2. the child's [`Restart`] type decides whether it is restarted
//!    (`Permanent`: always; `Transient`: unless the reason is `Normal` or
//!    `Shutdown`; `Temporary`: never, and its spec is dropped);
//! 3. each restart is counted: more than `max_restarts` restarts within
//!    `period` (the *intensity*) make the supervisor stop all its children
//!    and exit with [`ExitReason::Shutdown`] (as OTP does), which its own
//!    supervisor sees as a crash of a child: failure climbs the tree;
//! 4. the [`Strategy`] picks who is restarted: the child alone
//!    (`OneForOne`), all children (`OneForAll`), or the child and those
//!    started after it (`RestForOne`). Siblings are stopped in reverse start
//!    order, then everything is started again in start order; each restart
//!    is logged (`log::info!`).
//!
//! Stopping a child (sibling restart, [`terminate_child`], supervisor
//! shutdown) follows OTP: monitor it, unlink, send `exit(child, Shutdown)`,
//! wait for its `ProcessDied` up to its [`Shutdown`] timeout, then
//! `exit(child, Kill)`; `BrutalKill` sends `Kill` at once. A supervisor stops
//! its children in reverse start order when it terminates (a
//! [`DynamicSupervisor`] stops them all at once, as `simple_one_for_one`
//! does).
//!
//! The queries ([`which_children`], [`get_child`], ...) and the dynamic
//! calls ([`start_child`], [`terminate_child`], ...) are gen_server calls to
//! the supervisor process, without a time limit (OTP's `infinity`).

use crate::gen_server::{self, guarded, CallError, CallResult, Flow, GenServer, ReplyTo};
use crate::gen_server::{Server, StartError};
use graft::{
    exit, link, monitor, receive, self_pid, trap_exits, unlink, yield_now, ExitReason, ExitSignal,
    MonitorRef, Pid, ProcessDied, Unknown,
};
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which children are restarted when one of them dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Only the child that died.
    OneForOne,
    /// Every child: the others are stopped, then all are started again.
    OneForAll,
    /// The child that died and every child started after it.
    RestForOne,
}

/// When a child is restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Restart {
    /// Always.
    #[default]
    Permanent,
    /// Only after an abnormal exit (not `Normal`, not `Shutdown`).
    Transient,
    /// Never; its spec is removed when it ends.
    Temporary,
}

/// How a child is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shutdown {
    /// `exit(child, Kill)` at once.
    BrutalKill,
    /// `exit(child, Shutdown)`, then `Kill` if it is still alive after this
    /// long (a child that traps exits runs its cleanup meanwhile).
    Timeout(Duration),
    /// `exit(child, Shutdown)` and wait as long as it takes (the default for
    /// supervisor children, which stop their own children first).
    Infinity,
}

/// Whether a child is a worker or a supervisor (informational, and it sets
/// the default [`Shutdown`]: 5 s for a worker, `Infinity` for a supervisor).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ChildKind {
    /// Any process that is not a supervisor.
    #[default]
    Worker,
    /// A supervisor (a subtree).
    Supervisor,
}

/// A child's start function: called in the supervisor process, returns the
/// new child's pid.
pub type StartFn = Arc<dyn Fn() -> Result<Pid, StartError> + Send + Sync>;

/// How to start and look after one child.
///
/// ```
/// use graft_otp::prelude::*;
/// use std::time::Duration;
///
/// let spec = ChildSpec::new("ticker", || Ok(spawn_link(|| loop { sleep(Duration::from_secs(1)) })))
///     .restart(Restart::Transient)
///     .shutdown(Shutdown::Timeout(Duration::from_millis(100)));
/// assert_eq!(spec.id(), "ticker");
/// ```
#[derive(Clone)]
pub struct ChildSpec {
    id: String,
    start: StartFn,
    restart: Restart,
    shutdown: Option<Shutdown>,
    kind: ChildKind,
}

impl fmt::Debug for ChildSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildSpec")
            .field("id", &self.id)
            .field("restart", &self.restart)
            .field("shutdown", &self.shutdown_policy())
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl ChildSpec {
    /// A permanent worker named `id`, started by `start` (which runs in the
    /// supervisor process and returns the child's pid; link the child, e.g.
    /// with `spawn_link` or `gen_server::start`).
    pub fn new<F>(id: impl Into<String>, start: F) -> ChildSpec
    where
        F: Fn() -> Result<Pid, StartError> + Send + Sync + 'static,
    {
        ChildSpec {
            id: id.into(),
            start: Arc::new(start),
            restart: Restart::Permanent,
            shutdown: None,
            kind: ChildKind::Worker,
        }
    }

    /// A worker that is the gen_server `make()` returns (a fresh one on each
    /// restart).
    ///
    /// ```
    /// use graft_otp::prelude::*;
    ///
    /// struct Ping;
    /// impl GenServer for Ping {
    ///     type Call = ();
    ///     type Cast = ();
    ///     type Reply = &'static str;
    ///     fn handle_call(&mut self, _: (), _: &ReplyTo<&'static str>) -> CallResult<&'static str> {
    ///         CallResult::Reply("pong")
    ///     }
    /// }
    ///
    /// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
    /// let answer = node.run(|| {
    ///     let sup = Supervisor::new(Strategy::OneForOne)
    ///         .child(ChildSpec::server("ping", || Ping))
    ///         .start()
    ///         .unwrap();
    ///     let ping = supervisor::get_child(sup, "ping").unwrap();
    ///     Server::<Ping>::from_pid(ping).call(()).unwrap()
    /// }).unwrap();
    /// assert_eq!(answer, "pong");
    /// node.shutdown();
    /// ```
    pub fn server<S, F>(id: impl Into<String>, make: F) -> ChildSpec
    where
        S: GenServer,
        F: Fn() -> S + Send + Sync + 'static,
    {
        ChildSpec::new(id, move || gen_server::start(make()).map(|s| s.pid()))
    }

    /// A worker that is the gen_server `make()` returns, registered under
    /// `id` on this node (found with `Server::at(id)` or, from another
    /// node, `Server::at((id, node))`). A restart registers the new server
    /// under the same name.
    ///
    /// ```
    /// use graft_otp::prelude::*;
    ///
    /// struct Ping;
    /// impl GenServer for Ping {
    ///     type Call = ();
    ///     type Cast = ();
    ///     type Reply = u8;
    ///     fn handle_call(&mut self, _: (), _: &ReplyTo<u8>) -> CallResult<u8> {
    ///         CallResult::Reply(1)
    ///     }
    /// }
    ///
    /// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
    /// let one = node.run(|| {
    ///     Supervisor::new(Strategy::OneForOne)
    ///         .child(ChildSpec::server_named("ping", || Ping))
    ///         .start()
    ///         .unwrap();
    ///     Server::<Ping>::at("ping").unwrap().call(()).unwrap()
    /// }).unwrap();
    /// assert_eq!(one, 1);
    /// node.shutdown();
    /// ```
    pub fn server_named<S, F>(id: &str, make: F) -> ChildSpec
    where
        S: GenServer,
        F: Fn() -> S + Send + Sync + 'static,
    {
        ChildSpec::server_with(id, gen_server::StartOpts::new().name(id), make)
    }

    /// A gen_server worker started with `opts` (a name, a timeout on
    /// `init`, spawn options; see [`gen_server::StartOpts`]).
    pub fn server_with<S, F>(
        id: impl Into<String>,
        opts: gen_server::StartOpts,
        make: F,
    ) -> ChildSpec
    where
        S: GenServer,
        F: Fn() -> S + Send + Sync + 'static,
    {
        ChildSpec::new(id, move || {
            gen_server::start_with(make(), opts.clone()).map(|s| s.pid())
        })
    }

    /// A gen_server child on another node (`ChildSpec::on(node)` in the
    /// brief): `make()` builds the server here, it travels to `node` and is
    /// started there with [`gen_server::start_on`], linked to the
    /// supervisor. The loss of `node` counts as the child's death
    /// (`NoConnection`), and a restart starts it on `node` again.
    pub fn server_on<S, F>(id: impl Into<String>, node: graft::NodeId, make: F) -> ChildSpec
    where
        S: GenServer + graft::Mobile,
        F: Fn() -> S + Send + Sync + 'static,
    {
        ChildSpec::new(id, move || {
            gen_server::start_on(node, make()).map(|s| s.pid())
        })
    }

    /// A child that is the supervisor `make()` describes (kind
    /// [`ChildKind::Supervisor`]): a subtree.
    pub fn supervisor<F>(id: impl Into<String>, make: F) -> ChildSpec
    where
        F: Fn() -> Supervisor + Send + Sync + 'static,
    {
        ChildSpec::new(id, move || make().start()).kind(ChildKind::Supervisor)
    }

    /// Sets the restart type (default [`Restart::Permanent`]).
    pub fn restart(mut self, restart: Restart) -> ChildSpec {
        self.restart = restart;
        self
    }

    /// Sets how the child is stopped (default: 5 s for a worker, `Infinity`
    /// for a supervisor).
    pub fn shutdown(mut self, shutdown: Shutdown) -> ChildSpec {
        self.shutdown = Some(shutdown);
        self
    }

    /// Sets the child's kind (default [`ChildKind::Worker`]).
    pub fn kind(mut self, kind: ChildKind) -> ChildSpec {
        self.kind = kind;
        self
    }

    /// The child's id (unique within its supervisor).
    pub fn id(&self) -> &str {
        &self.id
    }

    fn shutdown_policy(&self) -> Shutdown {
        self.shutdown.unwrap_or(match self.kind {
            ChildKind::Worker => Shutdown::Timeout(Duration::from_secs(5)),
            ChildKind::Supervisor => Shutdown::Infinity,
        })
    }
}

/// One child as [`which_children`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildInfo {
    /// Its id (empty for the children of a [`DynamicSupervisor`]).
    pub id: String,
    /// Its pid, `None` if it is not running.
    pub pid: Option<Pid>,
    /// Worker or supervisor.
    pub kind: ChildKind,
    /// Its restart type.
    pub restart: Restart,
}

/// Child counts, as [`count_children`] reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChildCount {
    /// Child specs (running or not).
    pub specs: usize,
    /// Children running.
    pub active: usize,
    /// Specs of kind supervisor.
    pub supervisors: usize,
    /// Specs of kind worker.
    pub workers: usize,
}

/// Why a call to a supervisor failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SupervisorError {
    /// The call itself failed (the supervisor is dead, ...).
    Call(CallError),
    /// No child has this id (or pid).
    NotFound,
    /// The child is running (`restart_child`, `delete_child`).
    Running,
    /// A stopped child with this id exists (`start_child`).
    AlreadyPresent(String),
    /// A running child with this id exists (`start_child`).
    AlreadyStarted(Pid),
    /// The child's start function failed.
    Start(StartError),
}

impl fmt::Display for SupervisorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SupervisorError::Call(e) => write!(f, "supervisor call failed: {e}"),
            SupervisorError::NotFound => f.write_str("no such child"),
            SupervisorError::Running => f.write_str("the child is running"),
            SupervisorError::AlreadyPresent(id) => write!(f, "child {id:?} is already present"),
            SupervisorError::AlreadyStarted(p) => write!(f, "child already started as {p}"),
            SupervisorError::Start(e) => write!(f, "child failed to start: {e}"),
        }
    }
}

impl std::error::Error for SupervisorError {}

impl From<CallError> for SupervisorError {
    fn from(e: CallError) -> Self {
        SupervisorError::Call(e)
    }
}

/// A supervisor to start: a strategy, an intensity, and child specs in start
/// order.
///
/// ```
/// use graft_otp::prelude::*;
/// use std::time::Duration;
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     let worker = || Ok(spawn_link(|| { expect::<()>(); }));
///     let sup = Supervisor::new(Strategy::OneForOne)
///         .intensity(3, Duration::from_secs(5))
///         .child(ChildSpec::new("a", worker))
///         .child(ChildSpec::new("b", worker))
///         .start()
///         .unwrap();
///     let a = supervisor::get_child(sup, "a").unwrap();
///     exit(a, ExitReason::Kill);
///     // The supervisor starts a new "a".
///     while supervisor::get_child(sup, "a").is_none_or(|p| p == a) {
///         sleep(Duration::from_millis(1));
///     }
/// }).unwrap();
/// node.shutdown();
/// ```
#[derive(Debug, Clone)]
pub struct Supervisor {
    strategy: Strategy,
    max_restarts: u32,
    period: Duration,
    children: Vec<ChildSpec>,
    name: Option<String>,
}

impl Supervisor {
    /// A supervisor with `strategy`, no children, and OTP's default
    /// intensity: **at most 1 restart in 5 seconds**. A second crash within
    /// 5 s makes the supervisor give up (it stops its children and exits
    /// with `Shutdown`, which its own parent sees as a crash). That is
    /// OTP's default too, and strict on purpose; a child that may crash in
    /// bursts wants [`intensity`](Self::intensity), e.g. `.intensity(10,
    /// Duration::from_secs(10))`.
    pub fn new(strategy: Strategy) -> Supervisor {
        Supervisor {
            strategy,
            max_restarts: 1,
            period: Duration::from_secs(5),
            children: Vec::new(),
            name: None,
        }
    }

    /// At most `max_restarts` restarts within `period`; one more and the
    /// supervisor stops its children and exits with `Shutdown`.
    pub fn intensity(mut self, max_restarts: u32, period: Duration) -> Supervisor {
        self.max_restarts = max_restarts;
        self.period = period;
        self
    }

    /// Adds a child (children start in the order they are added).
    pub fn child(mut self, spec: ChildSpec) -> Supervisor {
        self.children.push(spec);
        self
    }

    /// Registers the supervisor under `name`.
    pub fn name(mut self, name: &str) -> Supervisor {
        self.name = Some(name.to_string());
        self
    }

    /// Starts the supervisor linked to the caller, and its children in
    /// order; returns once all have started.
    ///
    /// # Errors
    ///
    /// [`StartError::Init`] naming the child that failed to start (the ones
    /// already started are stopped first) or a duplicate id;
    /// [`StartError::AlreadyStarted`] when the name is taken.
    ///
    /// # Panics
    ///
    /// Outside a graft process.
    pub fn start(self) -> Result<Pid, StartError> {
        gen_server::me("Supervisor::start");
        let state = SupState {
            strategy: self.strategy,
            max_restarts: self.max_restarts,
            period: self.period,
            children: self
                .children
                .into_iter()
                .map(|spec| Child { spec, pid: None })
                .collect(),
            restarts: VecDeque::new(),
            waiting: Vec::new(),
            dynamic: false,
        };
        let started = match &self.name {
            Some(name) => gen_server::start_named(name, state),
            None => gen_server::start(state),
        };
        started.map(|s| s.pid())
    }
}

/// A supervisor of many children started from one template on demand (OTP's
/// `simple_one_for_one`): each [`DynamicHandle::start_child`] passes an
/// argument to the template. Strategy one-for-one; children are stopped all
/// at once.
///
/// ```
/// use graft_otp::prelude::*;
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let n = node.run(|| {
///     let me = self_pid();
///     let pool = DynamicSupervisor::new(move |n: u32| Ok(spawn_link(move || send(me, n * 10))))
///         .restart(Restart::Temporary)
///         .start()
///         .unwrap();
///     for n in 1..=3 {
///         pool.start_child(n).unwrap();
///     }
///     (0..3).map(|_| expect::<u32>()).sum::<u32>()
/// }).unwrap();
/// assert_eq!(n, 60);
/// node.shutdown();
/// ```
pub struct DynamicSupervisor<A> {
    template: Template<A>,
    restart: Restart,
    shutdown: Option<Shutdown>,
    kind: ChildKind,
    max_restarts: u32,
    period: Duration,
    name: Option<String>,
}

type Template<A> = Arc<dyn Fn(A) -> Result<Pid, StartError> + Send + Sync>;

impl<A> fmt::Debug for DynamicSupervisor<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamicSupervisor")
            .field("restart", &self.restart)
            .field("shutdown", &self.shutdown)
            .field("kind", &self.kind)
            .field("max_restarts", &self.max_restarts)
            .field("period", &self.period)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<A: Clone + Send + Sync + 'static> DynamicSupervisor<A> {
    /// A dynamic supervisor whose children are started by `start(arg)`
    /// (called in the supervisor process; link the child). Defaults:
    /// permanent workers, and OTP's default intensity of **1 restart in 5
    /// seconds** (a second crash within 5 s shuts the supervisor down; set
    /// [`intensity`](Self::intensity) for more).
    pub fn new<F>(start: F) -> DynamicSupervisor<A>
    where
        F: Fn(A) -> Result<Pid, StartError> + Send + Sync + 'static,
    {
        DynamicSupervisor {
            template: Arc::new(start),
            restart: Restart::Permanent,
            shutdown: None,
            kind: ChildKind::Worker,
            max_restarts: 1,
            period: Duration::from_secs(5),
            name: None,
        }
    }

    /// Sets the children's restart type.
    pub fn restart(mut self, restart: Restart) -> Self {
        self.restart = restart;
        self
    }

    /// Sets how the children are stopped.
    pub fn shutdown(mut self, shutdown: Shutdown) -> Self {
        self.shutdown = Some(shutdown);
        self
    }

    /// Sets the children's kind.
    pub fn kind(mut self, kind: ChildKind) -> Self {
        self.kind = kind;
        self
    }

    /// Sets the restart intensity (as [`Supervisor::intensity`]).
    pub fn intensity(mut self, max_restarts: u32, period: Duration) -> Self {
        self.max_restarts = max_restarts;
        self.period = period;
        self
    }

    /// Registers the supervisor under `name`.
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    /// Starts the supervisor (with no children) linked to the caller.
    ///
    /// # Errors
    ///
    /// [`StartError::AlreadyStarted`] when the name is taken.
    ///
    /// # Panics
    ///
    /// Outside a graft process.
    pub fn start(self) -> Result<DynamicHandle<A>, StartError> {
        gen_server::me("DynamicSupervisor::start");
        let state = SupState {
            strategy: Strategy::OneForOne,
            max_restarts: self.max_restarts,
            period: self.period,
            children: Vec::new(),
            restarts: VecDeque::new(),
            waiting: Vec::new(),
            dynamic: true,
        };
        let started = match &self.name {
            Some(name) => gen_server::start_named(name, state),
            None => gen_server::start(state),
        }?;
        Ok(DynamicHandle {
            pid: started.pid(),
            template: self.template,
            restart: self.restart,
            shutdown: self.shutdown,
            kind: self.kind,
        })
    }
}

/// A running [`DynamicSupervisor`]: starts children from its template.
pub struct DynamicHandle<A> {
    pid: Pid,
    template: Template<A>,
    restart: Restart,
    shutdown: Option<Shutdown>,
    kind: ChildKind,
}

impl<A> Clone for DynamicHandle<A> {
    fn clone(&self) -> Self {
        DynamicHandle {
            pid: self.pid,
            template: self.template.clone(),
            restart: self.restart,
            shutdown: self.shutdown,
            kind: self.kind,
        }
    }
}

impl<A> fmt::Debug for DynamicHandle<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DynamicHandle({})", self.pid)
    }
}

impl<A: Clone + Send + Sync + 'static> DynamicHandle<A> {
    /// The supervisor's pid (for [`which_children`], [`count_children`],
    /// monitoring, ...).
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Starts a child with `arg` (restarts reuse a clone of it).
    ///
    /// # Errors
    ///
    /// [`SupervisorError::Start`] if the template failed;
    /// [`SupervisorError::Call`] if the supervisor is gone.
    pub fn start_child(&self, arg: A) -> Result<Pid, SupervisorError> {
        let template = self.template.clone();
        let mut spec = ChildSpec::new("", move || template(arg.clone()))
            .restart(self.restart)
            .kind(self.kind);
        spec.shutdown = self.shutdown;
        start_child(self.pid, spec)
    }

    /// Stops the child `pid` and forgets it.
    ///
    /// # Errors
    ///
    /// [`SupervisorError::NotFound`] if it is not a child.
    pub fn terminate_child(&self, pid: Pid) -> Result<(), SupervisorError> {
        match call(self.pid, SupCall::TerminatePid(pid))? {
            SupReply::Done(r) => r,
            other => unexpected(other),
        }
    }
}

/// One child slot of a running supervisor.
struct Child {
    spec: ChildSpec,
    pid: Option<Pid>,
}

/// The supervisor process's state.
struct SupState {
    strategy: Strategy,
    max_restarts: u32,
    period: Duration,
    /// In start order.
    children: Vec<Child>,
    /// Times of the restarts within the last `period`.
    restarts: VecDeque<Instant>,
    /// Children (by id, in start order) still to restart after a restart
    /// failed: tried again from the loop, on a [`TryAgain`] message, so that
    /// calls and exits are handled in between (OTP's `try_again_restart`).
    waiting: Vec<String>,
    /// `simple_one_for_one`: anonymous children, stopped all at once.
    dynamic: bool,
}

/// A request to a supervisor.
#[derive(Debug, Clone)]
enum SupCall {
    StartChild(ChildSpec),
    TerminateChild(String),
    TerminatePid(Pid),
    RestartChild(String),
    DeleteChild(String),
    WhichChildren,
    GetChild(String),
    CountChildren,
}

/// A supervisor's answer.
#[derive(Debug, Clone)]
enum SupReply {
    Started(Result<Pid, SupervisorError>),
    Done(Result<(), SupervisorError>),
    Children(Vec<ChildInfo>),
    Child(Option<Pid>),
    Count(ChildCount),
}

impl SupCall {
    /// The public function that makes this request.
    fn name(&self) -> &'static str {
        match self {
            SupCall::StartChild(_) => "supervisor::start_child",
            SupCall::TerminateChild(_) | SupCall::TerminatePid(_) => "supervisor::terminate_child",
            SupCall::RestartChild(_) => "supervisor::restart_child",
            SupCall::DeleteChild(_) => "supervisor::delete_child",
            SupCall::WhichChildren => "supervisor::which_children",
            SupCall::GetChild(_) => "supervisor::get_child",
            SupCall::CountChildren => "supervisor::count_children",
        }
    }
}

// Supervisor requests carry start functions (closures): local-only.
impl graft::Message for SupCall {}
impl graft::Message for SupReply {}

/// A supervisor's note to itself: try the waiting restarts again.
#[derive(Debug)]
struct TryAgain;
impl graft::Message for TryAgain {}

impl SupState {
    fn find(&self, id: &str) -> Option<usize> {
        self.children.iter().position(|c| c.spec.id == id)
    }

    fn find_pid(&self, pid: Pid) -> Option<usize> {
        self.children.iter().position(|c| c.pid == Some(pid))
    }

    /// Starts child `i` (which is not running).
    fn start_at(&mut self, i: usize) -> Result<Pid, StartError> {
        let start = self.children[i].spec.start.clone();
        let pid = match guarded(|| start()) {
            Ok(r) => r?,
            Err(panic) => return Err(StartError::Init(panic)),
        };
        link(pid);
        self.children[i].pid = Some(pid);
        Ok(pid)
    }

    /// Records a restart; `true` if that exceeds the intensity.
    fn restart_exceeds_intensity(&mut self) -> bool {
        let now = Instant::now();
        self.restarts.push_back(now);
        while self
            .restarts
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.period)
        {
            self.restarts.pop_front();
        }
        self.restarts.len() > self.max_restarts as usize
    }

    fn give_up(&self) -> Flow {
        log::error!(
            "supervisor {}: reached max restart intensity ({} restarts in {:?}): shutting down",
            self_pid(),
            self.max_restarts,
            self.period
        );
        Flow::Stop(ExitReason::Shutdown)
    }

    /// A child ended: log, and restart what the strategy says.
    fn child_exited(&mut self, i: usize, reason: ExitReason) -> Flow {
        let me = self_pid();
        let child = &mut self.children[i];
        let pid = child.pid.take();
        let abnormal = !matches!(reason, ExitReason::Normal | ExitReason::Shutdown);
        let restart = match child.spec.restart {
            Restart::Permanent => true,
            Restart::Transient => abnormal,
            Restart::Temporary => false,
        };
        let id = child.spec.id.clone();
        if abnormal {
            log::error!(
                "supervisor {me}: child {id:?} {} crashed: {reason}",
                fmt_pid(pid)
            );
        } else {
            log::info!(
                "supervisor {me}: child {id:?} {} exited: {reason}",
                fmt_pid(pid)
            );
        }
        if !restart {
            if child.spec.restart == Restart::Temporary || self.dynamic {
                self.children.remove(i);
            }
            return Flow::Continue;
        }
        if self.restart_exceeds_intensity() {
            return self.give_up();
        }
        self.restart(i)
    }

    /// Restarts child `i` (dead) and the siblings the strategy names.
    fn restart(&mut self, i: usize) -> Flow {
        let n = self.children.len();
        let (lo, hi) = match self.strategy {
            Strategy::OneForOne => (i, i),
            Strategy::OneForAll => (0, n - 1),
            Strategy::RestForOne => (i, n - 1),
        };
        // Restart the dead child and the running siblings in range.
        let mut marks: Vec<bool> = (0..n)
            .map(|j| j == i || (lo <= j && j <= hi && self.children[j].pid.is_some()))
            .collect();
        for j in (lo..=hi).rev() {
            if j == i || self.children[j].pid.is_none() {
                continue;
            }
            self.stop_child(j);
            // Temporary siblings are stopped, never restarted.
            if self.children[j].spec.restart == Restart::Temporary {
                self.children.remove(j);
                marks.remove(j);
            }
        }
        for (j, marked) in marks.into_iter().enumerate() {
            let id = &self.children[j].spec.id;
            if marked && !self.waiting.contains(id) {
                self.waiting.push(id.clone());
            }
        }
        self.start_waiting()
    }

    /// Starts the waiting children in order. After a failed start (counted
    /// against the intensity) the rest waits for a [`TryAgain`] sent to
    /// ourselves, so that the loop runs in between.
    fn start_waiting(&mut self) -> Flow {
        while let Some(id) = self.waiting.first().cloned() {
            let j = match self.find(&id) {
                Some(j) if self.children[j].pid.is_none() => j,
                // Deleted, or started meanwhile (`restart_child`).
                _ => {
                    self.waiting.remove(0);
                    continue;
                }
            };
            match self.start_at(j) {
                Ok(pid) => {
                    graft::observe::note_restart();
                    log::info!("supervisor {}: restarted child {id:?} as {pid}", self_pid());
                    self.waiting.remove(0);
                }
                Err(e) => {
                    log::error!(
                        "supervisor {}: restarting child {id:?} failed: {e}",
                        self_pid()
                    );
                    if self.restart_exceeds_intensity() {
                        return self.give_up();
                    }
                    graft::send(self_pid(), TryAgain);
                    return Flow::Continue;
                }
            }
        }
        Flow::Continue
    }

    /// Stops child `j` (running) and marks it stopped.
    fn stop_child(&mut self, j: usize) {
        if let Some(pid) = self.children[j].pid.take() {
            let id = &self.children[j].spec.id;
            stop_all(&[(pid, self.children[j].spec.shutdown_policy(), id)]);
        }
    }

    /// Stops every running child: in reverse start order, or all at once for
    /// a dynamic supervisor.
    fn stop_children(&mut self) {
        if self.dynamic {
            let targets: Vec<(Pid, Shutdown, &str)> = self
                .children
                .iter()
                .filter_map(|c| Some((c.pid?, c.spec.shutdown_policy(), c.spec.id.as_str())))
                .collect();
            stop_all(&targets);
            for c in &mut self.children {
                c.pid = None;
            }
        } else {
            for j in (0..self.children.len()).rev() {
                self.stop_child(j);
            }
        }
    }

    fn handle(&mut self, req: SupCall) -> SupReply {
        match req {
            SupCall::StartChild(spec) => {
                if !self.dynamic {
                    if let Some(i) = self.find(&spec.id) {
                        return SupReply::Started(Err(match self.children[i].pid {
                            Some(pid) => SupervisorError::AlreadyStarted(pid),
                            None => SupervisorError::AlreadyPresent(spec.id),
                        }));
                    }
                }
                self.children.push(Child { spec, pid: None });
                let i = self.children.len() - 1;
                match self.start_at(i) {
                    Ok(pid) => SupReply::Started(Ok(pid)),
                    Err(e) => {
                        self.children.remove(i);
                        SupReply::Started(Err(SupervisorError::Start(e)))
                    }
                }
            }
            SupCall::TerminateChild(id) => SupReply::Done(match self.find(&id) {
                Some(i) => {
                    self.stop_child(i);
                    if self.children[i].spec.restart == Restart::Temporary {
                        self.children.remove(i);
                    }
                    Ok(())
                }
                None => Err(SupervisorError::NotFound),
            }),
            SupCall::TerminatePid(pid) => SupReply::Done(match self.find_pid(pid) {
                Some(i) => {
                    self.stop_child(i);
                    if self.dynamic || self.children[i].spec.restart == Restart::Temporary {
                        self.children.remove(i);
                    }
                    Ok(())
                }
                None => Err(SupervisorError::NotFound),
            }),
            SupCall::RestartChild(id) => SupReply::Started(match self.find(&id) {
                Some(i) if self.children[i].pid.is_some() => Err(SupervisorError::Running),
                Some(i) => self.start_at(i).map_err(SupervisorError::Start),
                None => Err(SupervisorError::NotFound),
            }),
            SupCall::DeleteChild(id) => SupReply::Done(match self.find(&id) {
                Some(i) if self.children[i].pid.is_some() => Err(SupervisorError::Running),
                Some(i) => {
                    self.children.remove(i);
                    Ok(())
                }
                None => Err(SupervisorError::NotFound),
            }),
            SupCall::WhichChildren => SupReply::Children(
                self.children
                    .iter()
                    .map(|c| ChildInfo {
                        id: c.spec.id.clone(),
                        pid: c.pid,
                        kind: c.spec.kind,
                        restart: c.spec.restart,
                    })
                    .collect(),
            ),
            SupCall::GetChild(id) => {
                SupReply::Child(self.find(&id).and_then(|i| self.children[i].pid))
            }
            SupCall::CountChildren => {
                let mut count = ChildCount {
                    specs: self.children.len(),
                    ..ChildCount::default()
                };
                for c in &self.children {
                    count.active += usize::from(c.pid.is_some());
                    match c.spec.kind {
                        ChildKind::Worker => count.workers += 1,
                        ChildKind::Supervisor => count.supervisors += 1,
                    }
                }
                SupReply::Count(count)
            }
        }
    }
}

impl GenServer for SupState {
    type Call = SupCall;
    type Cast = ();
    type Reply = SupReply;

    fn init(&mut self) -> Result<(), ExitReason> {
        trap_exits(true);
        graft::observe::mark_supervisor();
        for (k, c) in self.children.iter().enumerate() {
            if self.children[..k].iter().any(|o| o.spec.id == c.spec.id) {
                return Err(ExitReason::Other(format!(
                    "duplicate child id {:?}",
                    c.spec.id
                )));
            }
        }
        for i in 0..self.children.len() {
            if let Err(e) = self.start_at(i) {
                let id = self.children[i].spec.id.clone();
                log::error!(
                    "supervisor {}: child {id:?} failed to start: {e}",
                    self_pid()
                );
                self.stop_children();
                return Err(ExitReason::Other(format!(
                    "failed to start child {id:?}: {e}"
                )));
            }
        }
        Ok(())
    }

    fn handle_call(&mut self, req: SupCall, _: &ReplyTo<SupReply>) -> CallResult<SupReply> {
        CallResult::Reply(self.handle(req))
    }

    fn handle_info(&mut self, msg: Unknown) -> Flow {
        match msg.downcast::<ExitSignal>() {
            Ok(ExitSignal { from, reason }) => match self.find_pid(from) {
                Some(i) => self.child_exited(i, reason),
                None => {
                    log::debug!(
                        "supervisor {}: exit signal from non-child {from}: {reason}",
                        self_pid()
                    );
                    Flow::Continue
                }
            },
            Err(other) => match other.downcast::<TryAgain>() {
                Ok(TryAgain) => {
                    // A process is not preempted: without a yield, a start
                    // that keeps failing would hold its worker for good.
                    yield_now();
                    self.start_waiting()
                }
                Err(other) => {
                    log::warn!("supervisor {}: unexpected message {other:?}", self_pid());
                    Flow::Continue
                }
            },
        }
    }

    fn terminate(&mut self, _reason: &ExitReason) {
        self.stop_children();
    }

    fn format_status(&self) -> Option<String> {
        let children = self.children.iter();
        crate::sys::supervisor_status(
            self.strategy,
            children.map(|c| (c.spec.id.as_str(), c.pid, c.spec.kind)),
        )
    }
}

fn fmt_pid(pid: Option<Pid>) -> String {
    pid.map_or_else(|| "(not running)".to_string(), |p| p.to_string())
}

/// Stops `targets` (pid, policy, id) at once: monitor, unlink, exit signal,
/// wait for each `ProcessDied` (killing those that overrun their timeout).
fn stop_all(targets: &[(Pid, Shutdown, &str)]) {
    struct Pending<'a> {
        pid: Pid,
        policy: Shutdown,
        id: &'a str,
        monitor: MonitorRef,
        early: Option<ExitReason>,
    }
    let pending: Vec<Pending<'_>> = targets
        .iter()
        .map(|&(pid, policy, id)| {
            let m = monitor(pid);
            unlink(pid);
            // An exit signal that arrived before the unlink is a message now.
            let early = receive()
                .when(
                    move |s: &ExitSignal| s.from == pid,
                    |s: ExitSignal| s.reason,
                )
                .timeout(Duration::ZERO);
            let signal = match policy {
                Shutdown::BrutalKill => ExitReason::Kill,
                _ => ExitReason::Shutdown,
            };
            exit(pid, signal);
            Pending {
                pid,
                policy,
                id,
                monitor: m,
                early,
            }
        })
        .collect();
    let started = Instant::now();
    for p in pending {
        let m = p.monitor;
        let down = || {
            receive().when(
                move |d: &ProcessDied| d.monitor == m,
                |d: ProcessDied| d.reason,
            )
        };
        let reason = match p.policy {
            // A timeout too long for the clock (`Duration::MAX`) is forever.
            Shutdown::Timeout(t) => match started
                .checked_add(t)
                .map_or_else(|| Some(down().wait()), |at| down().deadline(at))
            {
                Some(r) => r,
                None => {
                    log::warn!(
                        "supervisor {}: child {:?} {} did not stop within {t:?}: killing it",
                        self_pid(),
                        p.id,
                        p.pid
                    );
                    exit(p.pid, ExitReason::Kill);
                    down().wait()
                }
            },
            Shutdown::BrutalKill | Shutdown::Infinity => down().wait(),
        };
        let reason = p.early.unwrap_or(reason);
        let expected = match p.policy {
            Shutdown::BrutalKill => ExitReason::Killed,
            _ => ExitReason::Shutdown,
        };
        if reason != expected && reason != ExitReason::NoProc {
            log::warn!(
                "supervisor {}: child {:?} {} stopped with {reason}",
                self_pid(),
                p.id,
                p.pid
            );
        }
    }
}

fn call(sup: Pid, req: SupCall) -> Result<SupReply, CallError> {
    // Outside a process, the panic names the supervisor call made.
    gen_server::me(req.name());
    Server::<SupState>::from_pid(sup).call_infinity(req)
}

#[cold]
fn unexpected<T>(reply: SupReply) -> T {
    unreachable!("graft-otp: supervisor answered {reply:?} to the wrong request")
}

/// Adds and starts a child (OTP's `supervisor:start_child`).
///
/// # Errors
///
/// [`SupervisorError::AlreadyStarted`] / [`SupervisorError::AlreadyPresent`]
/// if the id is taken, [`SupervisorError::Start`] if it failed to start (its
/// spec is not kept), [`SupervisorError::Call`] if `sup` is not alive.
pub fn start_child(sup: Pid, spec: ChildSpec) -> Result<Pid, SupervisorError> {
    match call(sup, SupCall::StartChild(spec))? {
        SupReply::Started(r) => r,
        other => unexpected(other),
    }
}

/// Stops the child `id` (its spec stays, unless it is temporary).
///
/// # Errors
///
/// [`SupervisorError::NotFound`], [`SupervisorError::Call`].
pub fn terminate_child(sup: Pid, id: &str) -> Result<(), SupervisorError> {
    match call(sup, SupCall::TerminateChild(id.to_string()))? {
        SupReply::Done(r) => r,
        other => unexpected(other),
    }
}

/// Starts again the stopped child `id`.
///
/// # Errors
///
/// [`SupervisorError::Running`], [`SupervisorError::NotFound`],
/// [`SupervisorError::Start`], [`SupervisorError::Call`].
pub fn restart_child(sup: Pid, id: &str) -> Result<Pid, SupervisorError> {
    match call(sup, SupCall::RestartChild(id.to_string()))? {
        SupReply::Started(r) => r,
        other => unexpected(other),
    }
}

/// Removes the spec of the stopped child `id`.
///
/// # Errors
///
/// [`SupervisorError::Running`], [`SupervisorError::NotFound`],
/// [`SupervisorError::Call`].
pub fn delete_child(sup: Pid, id: &str) -> Result<(), SupervisorError> {
    match call(sup, SupCall::DeleteChild(id.to_string()))? {
        SupReply::Done(r) => r,
        other => unexpected(other),
    }
}

/// The children, in start order.
///
/// # Errors
///
/// [`CallError`] if `sup` is not alive.
///
/// ```
/// use graft_otp::prelude::*;
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let ids = node.run(|| {
///     let idle = || Ok(spawn_link(|| { expect::<()>(); }));
///     let sup = Supervisor::new(Strategy::RestForOne)
///         .child(ChildSpec::new("db", idle))
///         .child(ChildSpec::new("web", idle))
///         .start()
///         .unwrap();
///     supervisor::which_children(sup).unwrap().into_iter().map(|c| c.id).collect::<Vec<_>>()
/// }).unwrap();
/// assert_eq!(ids, ["db", "web"]);
/// node.shutdown();
/// ```
pub fn which_children(sup: Pid) -> Result<Vec<ChildInfo>, CallError> {
    match call(sup, SupCall::WhichChildren)? {
        SupReply::Children(c) => Ok(c),
        other => unexpected(other),
    }
}

/// The pid of the running child `id`; `None` if it is not running, unknown,
/// or `sup` is not alive.
pub fn get_child(sup: Pid, id: &str) -> Option<Pid> {
    match call(sup, SupCall::GetChild(id.to_string())) {
        Ok(SupReply::Child(p)) => p,
        Ok(other) => unexpected(other),
        Err(_) => None,
    }
}

/// Stops a supervisor as its parent's exit would (OTP's
/// `gen_server:stop(Sup)`): its children stop in reverse start order, then
/// it ends with `reason`. Waits until it has ended.
///
/// **The supervisor is linked to the process that started it**: stopped
/// with any reason but `Normal`, its exit signal takes that process down
/// too (unless it traps exits), as in OTP. Stop it with
/// `ExitReason::Normal` (as below) to stay alive, or `unlink` it first.
///
/// # Errors
///
/// [`CallError::NoProc`] if `sup` was not alive.
///
/// ```
/// use graft_otp::prelude::*;
///
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// node.run(|| {
///     let sup = Supervisor::new(Strategy::OneForOne).start().unwrap();
///     supervisor::stop(sup, ExitReason::Normal).unwrap();
///     assert!(!is_alive(sup));
/// })
/// .unwrap();
/// ```
pub fn stop(sup: Pid, reason: ExitReason) -> Result<(), CallError> {
    gen_server::me("supervisor::stop");
    Server::<SupState>::from_pid(sup).stop(reason)
}

/// How many children, running, of each kind.
///
/// # Errors
///
/// [`CallError`] if `sup` is not alive.
pub fn count_children(sup: Pid) -> Result<ChildCount, CallError> {
    match call(sup, SupCall::CountChildren)? {
        SupReply::Count(c) => Ok(c),
        other => unexpected(other),
    }
}
