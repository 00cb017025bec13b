//! `application`: a program's entry point, as OTP's application behaviour
//! and `init` give it.
//!
//! An [`Application`] starts one supervision tree ([`Application::start`]
//! returns its top supervisor) and may clean up after that tree has stopped
//! ([`Application::stop`]). A [`Runner`] is what `main` calls: it starts the
//! node (from a [`NodeConfig`] or from the environment, see
//! [`config_from_env`]), joins the cluster, starts the applications in
//! dependency order, then blocks until the program is asked to stop:
//!
//! * SIGTERM or SIGINT (Ctrl-C) from outside (a second one while stopping
//!   ends the program at once);
//! * [`stop`] from anywhere in the program (OTP's `init:stop/0`);
//! * an application's top supervisor dying (it gave up restarting its
//!   children): OTP's permanent application, which takes the node down.
//!
//! It then stops the trees in reverse start order (each supervisor stops
//! its children in reverse start order, within their shutdown times),
//! runs each application's `stop`, shuts the node down, and returns the
//! exit status that says how it ended: `0` for a signal or [`stop`],
//! [`stop_with`]'s status, `1` when an application failed to start or its
//! tree died.
//!
//! Why not `Node::run`? A tree started inside [`Node::run`]'s closure is
//! linked to the closure's process: it dies (OTP-correctly) the moment the
//! closure returns. A runner keeps each tree under a process that lives
//! until the program stops (OTP's application master).
//!
//! ```no_run
//! use graft_otp::prelude::*;
//!
//! #[derive(Default)]
//! struct Counter(u64);
//! impl GenServer for Counter {
//!     type Call = ();
//!     type Cast = u64;
//!     type Reply = u64;
//!     fn handle_call(&mut self, _: (), _: &ReplyTo<u64>) -> CallResult<u64> {
//!         CallResult::Reply(self.0)
//!     }
//!     fn handle_cast(&mut self, n: u64) -> Flow {
//!         self.0 += n;
//!         Flow::Continue
//!     }
//! }
//!
//! struct CounterApp;
//! impl Application for CounterApp {
//!     fn name(&self) -> &str {
//!         "counter"
//!     }
//!     fn start(&mut self) -> Result<Pid, StartError> {
//!         Supervisor::new(Strategy::OneForOne)
//!             .child(ChildSpec::server_named("counter", Counter::default))
//!             .start()
//!     }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     env_logger::init(); // RUST_LOG=info shows the runner's lines
//!     application::Runner::from_env().app(CounterApp).run()
//! }
//! ```

use crate::gen_server::StartError;
use graft::{
    demonitor_flush, exit, monitor, receive, trap_exits, ExitReason, ExitSignal, Node, NodeConfig,
    Pid, ProcessDied,
};
use std::collections::HashMap;
use std::fmt;
use std::process::ExitCode;
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

/// One application: a supervision tree with a name, started by a
/// [`Runner`] (OTP's application behaviour).
///
/// `start` runs in the application's own process (its master), which
/// outlives the tree; `stop` runs there too, after the tree has stopped.
///
/// ```
/// use graft_otp::prelude::*;
///
/// struct Web;
/// impl Application for Web {
///     fn name(&self) -> &str { "web" }
///     fn dependencies(&self) -> Vec<String> { vec!["db".into()] } // "db" starts first
///     fn start(&mut self) -> Result<Pid, StartError> {
///         Supervisor::new(Strategy::OneForOne).start()
///     }
///     fn stop(&mut self) {
///         log::info!("web: the tree has stopped");
///     }
/// }
/// assert_eq!(Web.dependencies(), ["db"]);
/// ```
pub trait Application: Send + 'static {
    /// The application's name (logs, dependencies).
    fn name(&self) -> &str;

    /// Names of the applications that must be running before this one
    /// starts (and that stop after it). Default: none.
    fn dependencies(&self) -> Vec<String> {
        Vec::new()
    }

    /// Starts the application's top supervisor, linked to the calling
    /// process (`Supervisor::start` does that), and returns its pid.
    ///
    /// # Errors
    ///
    /// Why it could not start: the runner then stops what it started and
    /// the program ends with status 1.
    fn start(&mut self) -> Result<Pid, StartError>;

    /// Runs after the tree has stopped (OTP's `Module:stop/1`). Default:
    /// nothing.
    fn stop(&mut self) {}

    /// How long the tree may take to stop before its top supervisor is
    /// killed (default 60 s; the supervisor itself gives each child its own
    /// shutdown time first).
    fn shutdown_timeout(&self) -> Duration {
        Duration::from_secs(60)
    }
}

/// What ended a [`Runner`]'s wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopCause {
    /// SIGTERM or SIGINT (the number).
    Signal(i32),
    /// [`stop`] or [`stop_with`] (the status).
    Requested(u8),
    /// An application's tree ended on its own, with this reason.
    AppDied(String, ExitReason),
}

impl fmt::Display for StopCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopCause::Signal(s) if *s == graft::signal::SIGTERM => f.write_str("SIGTERM"),
            StopCause::Signal(s) if *s == graft::signal::SIGINT => f.write_str("SIGINT"),
            StopCause::Signal(s) => write!(f, "signal {s}"),
            StopCause::Requested(s) => write!(f, "stop requested (status {s})"),
            StopCause::AppDied(app, r) => write!(f, "application {app} terminated: {r}"),
        }
    }
}

/// Where [`stop`] reaches the running [`Runner`].
static STOP: Mutex<Option<mpsc::Sender<Event>>> = Mutex::new(None);

/// What the runner's main thread waits for.
#[derive(Debug)]
enum Event {
    Stop(StopCause),
}

/// Asks the running [`Runner`] to stop every application (in reverse start
/// order) and end the program with status 0 (OTP's `init:stop/0`). Returns
/// at once; `false` if no runner is running. Callable from anywhere: a
/// process, a plain thread.
///
/// ```
/// assert!(!graft_otp::application::stop()); // no runner in this program
/// ```
pub fn stop() -> bool {
    stop_with(0)
}

/// [`stop`] with the exit status the program ends with (OTP's
/// `init:stop/1`).
pub fn stop_with(status: u8) -> bool {
    let tx = STOP.lock().unwrap_or_else(|e| e.into_inner()).clone();
    tx.is_some_and(|tx| tx.send(Event::Stop(StopCause::Requested(status))).is_ok())
}

/// A node configuration from the environment (the variables a deployment
/// sets; unset ones keep [`NodeConfig`]'s defaults):
///
/// * `GRAFT_LISTEN`: the listen address (default `127.0.0.1:0`: a random
///   port, so give one for a stable node name);
/// * `GRAFT_NODE`: the node's name (default: see [`NodeConfig::name`]);
/// * `GRAFT_COOKIE`: the cluster cookie;
/// * `GRAFT_WORKERS`: scheduler threads (read by [`NodeConfig::new`]).
///
/// `GRAFT_JOIN` (comma-separated addresses of nodes to connect to) is read
/// by [`Runner::run`].
///
/// ```
/// let cfg = graft_otp::application::config_from_env();
/// assert!(cfg.worker_count() >= 1);
/// ```
pub fn config_from_env() -> NodeConfig {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let listen = var("GRAFT_LISTEN").unwrap_or_else(|| "127.0.0.1:0".to_string());
    let mut cfg = NodeConfig::new(listen.trim());
    if let Some(name) = var("GRAFT_NODE") {
        cfg = cfg.name(name.trim());
    }
    if let Some(cookie) = var("GRAFT_COOKIE") {
        cfg = cfg.cookie(cookie.trim());
    }
    cfg
}

/// Starts a node and applications from `main`, and stops them in order on
/// SIGTERM, SIGINT or [`stop`] (see the module docs).
///
/// ```no_run
/// use graft_otp::prelude::*;
///
/// struct Idle;
/// impl Application for Idle {
///     fn name(&self) -> &str { "idle" }
///     fn start(&mut self) -> Result<Pid, StartError> {
///         Supervisor::new(Strategy::OneForOne).start()
///     }
/// }
///
/// fn main() -> std::process::ExitCode {
///     application::Runner::new(NodeConfig::new("127.0.0.1:4370").cookie("secret"))
///         .app(Idle)
///         .run()
/// }
/// ```
pub struct Runner {
    config: NodeConfig,
    join: Vec<String>,
    apps: Vec<Box<dyn Application>>,
    on_started: Option<OnStarted>,
}

/// What [`Runner::on_started`] runs.
type OnStarted = Box<dyn FnOnce(&Node) + Send>;

impl fmt::Debug for Runner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runner")
            .field("config", &self.config)
            .field("join", &self.join)
            .field(
                "apps",
                &self.apps.iter().map(|a| a.name()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Runner {
    /// A runner for a node started with `config`; `GRAFT_JOIN` is still
    /// read from the environment.
    pub fn new(config: NodeConfig) -> Runner {
        let join = std::env::var("GRAFT_JOIN")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        Runner {
            config,
            join,
            apps: Vec::new(),
            on_started: None,
        }
    }

    /// A runner for the node [`config_from_env`] describes.
    pub fn from_env() -> Runner {
        Runner::new(config_from_env())
    }

    /// Also connects to the node listening at `addr` after the node starts
    /// (as an entry of `GRAFT_JOIN`).
    pub fn join(mut self, addr: &str) -> Runner {
        self.join.push(addr.to_string());
        self
    }

    /// Adds an application (started after those it depends on; otherwise
    /// in the order added).
    pub fn app(mut self, app: impl Application) -> Runner {
        self.apps.push(Box::new(app));
        self
    }

    /// Runs `f` once every application has started (from the runner's
    /// thread): e.g. print a "ready" line, or start a client.
    pub fn on_started(mut self, f: impl FnOnce(&Node) + Send + 'static) -> Runner {
        self.on_started = Some(Box::new(f));
        self
    }

    /// Starts everything, blocks until asked to stop, stops everything;
    /// returns the exit status (`0` after a signal or [`stop`], `1` when an
    /// application failed to start or its tree died). Call it from `main`,
    /// outside any process.
    pub fn run(self) -> ExitCode {
        match self.run_inner() {
            Ok(code) => ExitCode::from(code),
            Err(why) => {
                log::error!("graft: {why}");
                eprintln!("graft: {why}");
                ExitCode::from(1)
            }
        }
    }

    fn run_inner(self) -> Result<u8, String> {
        let Runner {
            config,
            join,
            apps,
            on_started,
        } = self;
        let apps = start_order(apps)?;
        let signals =
            graft::signal::TermSignals::install().map_err(|e| format!("signal handler: {e}"))?;
        let (tx, rx) = mpsc::channel::<Event>();
        {
            let tx = tx.clone();
            std::thread::Builder::new()
                .name("graft-signals".into())
                .spawn(move || loop {
                    let sig = signals.wait();
                    if tx.send(Event::Stop(StopCause::Signal(sig))).is_err() {
                        // The runner is done: a late signal ends the program.
                        std::process::exit(128 + sig);
                    }
                })
                .map_err(|e| format!("signal thread: {e}"))?;
        }
        let node = Node::start(config).map_err(|e| format!("node did not start: {e}"))?;
        *STOP.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx.clone());
        for addr in &join {
            match addr.parse() {
                Ok(a) => match node.connect(a) {
                    Ok(id) => log::info!("graft: joined {id} at {addr}"),
                    Err(e) => log::warn!("graft: could not join {addr}: {e}"),
                },
                Err(e) => log::warn!("graft: GRAFT_JOIN entry {addr:?}: {e}"),
            }
        }
        let mut running: Vec<Master> = Vec::new();
        let mut failed = None;
        for app in apps {
            let name = app.name().to_string();
            match Master::start(&node, app, tx.clone()) {
                Ok(m) => {
                    log::info!("graft: application {name} started");
                    running.push(m);
                }
                Err(why) => {
                    failed = Some(format!("application {name} did not start: {why}"));
                    break;
                }
            }
        }
        let cause = match failed {
            Some(why) => {
                log::error!("graft: {why}");
                eprintln!("graft: {why}");
                None
            }
            None => {
                if let Some(f) = on_started {
                    f(&node);
                }
                match rx.recv() {
                    Ok(Event::Stop(cause)) => Some(cause),
                    Err(_) => None,
                }
            }
        };
        if let Some(c) = &cause {
            log::info!("graft: stopping ({c})");
        }
        // A second signal while stopping: end at once, as a shell expects.
        let rx_second = std::thread::Builder::new()
            .name("graft-stop-watch".into())
            .spawn(move || {
                while let Ok(Event::Stop(c)) = rx.recv() {
                    if let StopCause::Signal(sig) = c {
                        eprintln!("graft: second signal while stopping: exiting now");
                        std::process::exit(128 + sig);
                    }
                }
            })
            .ok();
        for m in running.into_iter().rev() {
            m.stop(&node);
        }
        *STOP.lock().unwrap_or_else(|e| e.into_inner()) = None;
        drop(tx);
        node.shutdown();
        drop(rx_second);
        Ok(match cause {
            Some(StopCause::Signal(_)) => 0,
            Some(StopCause::Requested(status)) => status,
            Some(StopCause::AppDied(..)) | None => 1,
        })
    }
}

/// The applications in an order where each comes after its dependencies
/// (otherwise as given).
fn start_order(apps: Vec<Box<dyn Application>>) -> Result<Vec<Box<dyn Application>>, String> {
    let names: HashMap<String, usize> = apps
        .iter()
        .enumerate()
        .map(|(i, a)| (a.name().to_string(), i))
        .collect();
    if names.len() != apps.len() {
        return Err("two applications have the same name".into());
    }
    let deps: Vec<Vec<usize>> = apps
        .iter()
        .map(|a| {
            a.dependencies()
                .iter()
                .map(|d| {
                    names.get(d).copied().ok_or_else(|| {
                        format!(
                            "application {} depends on {d}, which is not in the runner",
                            a.name()
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<_, _>>()?;
    // Depth-first, in the given order: 0 unvisited, 1 on the path, 2 done.
    fn visit(i: usize, deps: &[Vec<usize>], state: &mut [u8], out: &mut Vec<usize>) -> bool {
        match state[i] {
            2 => return true,
            1 => return false,
            _ => {}
        }
        state[i] = 1;
        for &d in &deps[i] {
            if !visit(d, deps, state, out) {
                return false;
            }
        }
        state[i] = 2;
        out.push(i);
        true
    }
    let mut state = vec![0u8; apps.len()];
    let mut order = Vec::new();
    for (i, app) in apps.iter().enumerate() {
        if !visit(i, &deps, &mut state, &mut order) {
            return Err(format!(
                "applications depend on each other in a cycle (through {})",
                app.name()
            ));
        }
    }
    let mut slots: Vec<Option<Box<dyn Application>>> = apps.into_iter().map(Some).collect();
    Ok(order.into_iter().filter_map(|i| slots[i].take()).collect())
}

/// The runner's handle on one application's master process.
struct Master {
    name: String,
    pid: Pid,
    done: mpsc::Receiver<()>,
}

/// A message to a master: stop the tree.
#[derive(Debug)]
struct StopTree;
impl graft::Message for StopTree {}

impl Master {
    /// Spawns the master, which starts the application's tree, and waits
    /// for the result.
    fn start(
        node: &Node,
        mut app: Box<dyn Application>,
        events: mpsc::Sender<Event>,
    ) -> Result<Master, String> {
        let name = app.name().to_string();
        let (started_tx, started_rx) = mpsc::channel::<Result<(), String>>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let app_name = name.clone();
        let pid = node
            .spawn(move || {
                trap_exits(true);
                let sup = match crate::gen_server::guarded(|| app.start()) {
                    Ok(Ok(pid)) => pid,
                    Ok(Err(e)) => {
                        let _ = started_tx.send(Err(e.to_string()));
                        return;
                    }
                    Err(panic) => {
                        let _ = started_tx.send(Err(format!("start panicked: {panic}")));
                        return;
                    }
                };
                graft::link(sup);
                let _ = started_tx.send(Ok(()));
                let timeout = app.shutdown_timeout();
                let died = receive()
                    .on(|_: StopTree| None)
                    .when(
                        move |s: &ExitSignal| s.from == sup,
                        |s: ExitSignal| Some(s.reason),
                    )
                    .wait();
                match died {
                    None => stop_tree(sup, timeout, &app_name),
                    Some(reason) => {
                        log::error!("graft: application {app_name} terminated: {reason}");
                        let _ =
                            events.send(Event::Stop(StopCause::AppDied(app_name.clone(), reason)));
                        // Wait for the runner's stop, then run `stop`.
                        receive().on(|_: StopTree| ()).wait();
                    }
                }
                if let Err(panic) = crate::gen_server::guarded(|| app.stop()) {
                    log::error!("graft: application {app_name}: stop panicked: {panic}");
                }
                log::info!("graft: application {app_name} stopped");
                let _ = done_tx.send(());
            })
            .map_err(|e| e.to_string())?;
        match started_rx.recv() {
            Ok(Ok(())) => Ok(Master {
                name,
                pid,
                done: done_rx,
            }),
            Ok(Err(why)) => Err(why),
            Err(_) => Err("its master process ended during start".into()),
        }
    }

    /// Stops the tree and waits for `Application::stop` to have run.
    fn stop(self, node: &Node) {
        node.send(self.pid, StopTree);
        if self.done.recv().is_err() {
            log::warn!(
                "graft: application {} ended without stopping cleanly",
                self.name
            );
        }
    }
}

/// Stops a top supervisor as its parent would: an exit signal `Shutdown`
/// (it stops its children in reverse order, each within its shutdown time),
/// then `Kill` after `timeout`.
fn stop_tree(sup: Pid, timeout: Duration, app: &str) {
    let m = monitor(sup);
    exit(sup, ExitReason::Shutdown);
    let stopped = receive()
        .when(
            move |d: &ProcessDied| d.monitor == m,
            |d: ProcessDied| d.reason,
        )
        .timeout(timeout);
    if stopped.is_none() {
        log::error!(
            "graft: application {app}: the tree did not stop within {timeout:?}: killing it"
        );
        exit(sup, ExitReason::Kill);
        receive()
            .when(move |d: &ProcessDied| d.monitor == m, |_: ProcessDied| ())
            .wait();
    }
    demonitor_flush(m);
    // The link's exit signal (we trap exits) is a message now: drop it.
    let _ = receive()
        .when(move |s: &ExitSignal| s.from == sup, |_: ExitSignal| ())
        .timeout(Duration::ZERO);
}
