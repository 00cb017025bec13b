//! The application runner in-process: dependency order, reverse stop,
//! `application::stop_with`, and the errors of a bad application list.

use graft_otp::prelude::*;
use std::sync::{Arc, Mutex};

type Log = Arc<Mutex<Vec<String>>>;

/// One runner at a time: `application::stop` reaches the running one.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct App {
    name: &'static str,
    deps: Vec<String>,
    log: Log,
}

struct Worker(&'static str, Log);
impl GenServer for Worker {
    type Call = ();
    type Cast = ();
    type Reply = ();
    fn init(&mut self) -> Result<(), ExitReason> {
        trap_exits(true);
        Ok(())
    }
    fn handle_call(&mut self, _: (), _: &ReplyTo<()>) -> CallResult<()> {
        CallResult::Reply(())
    }
    fn terminate(&mut self, _: &ExitReason) {
        self.1.lock().unwrap().push(format!("terminate {}", self.0));
    }
}

impl Application for App {
    fn name(&self) -> &str {
        self.name
    }
    fn dependencies(&self) -> Vec<String> {
        self.deps.clone()
    }
    fn start(&mut self) -> Result<Pid, StartError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("start {}", self.name));
        let (name, log) = (self.name, self.log.clone());
        Supervisor::new(Strategy::OneForOne)
            .child(ChildSpec::server(name, move || Worker(name, log.clone())))
            .start()
    }
    fn stop(&mut self) {
        self.log.lock().unwrap().push(format!("stop {}", self.name));
    }
}

fn app(name: &'static str, deps: &[&str], log: &Log) -> App {
    App {
        name,
        deps: deps.iter().map(|d| d.to_string()).collect(),
        log: log.clone(),
    }
}

#[test]
fn dependencies_start_first_and_stop_last_and_stop_with_sets_the_status() {
    let _one = serial();
    let _ = env_logger::builder().is_test(true).try_init();
    let log: Log = Arc::default();
    let code = application::Runner::new(NodeConfig::new("127.0.0.1:0").workers(2))
        .app(app("web", &["db", "cache"], &log))
        .app(app("cache", &["db"], &log))
        .app(app("db", &[], &log))
        .on_started(|_| {
            std::thread::spawn(|| assert!(application::stop_with(3)));
        })
        .run();
    assert_eq!(
        format!("{code:?}"),
        format!("{:?}", std::process::ExitCode::from(3))
    );
    assert_eq!(
        *log.lock().unwrap(),
        [
            "start db",
            "start cache",
            "start web",
            "terminate web",
            "stop web",
            "terminate cache",
            "stop cache",
            "terminate db",
            "stop db"
        ]
    );
    assert!(!application::stop(), "no runner any more");
}

#[test]
fn a_bad_application_list_is_refused_with_status_1() {
    let _one = serial();
    let log: Log = Arc::default();
    let cfg = || NodeConfig::new("127.0.0.1:0").workers(1);
    let one = format!("{:?}", std::process::ExitCode::from(1));
    let code = application::Runner::new(cfg())
        .app(app("a", &["missing"], &log))
        .run();
    assert_eq!(format!("{code:?}"), one);
    let code = application::Runner::new(cfg())
        .app(app("a", &["b"], &log))
        .app(app("b", &["a"], &log))
        .run();
    assert_eq!(format!("{code:?}"), one);
    assert!(log.lock().unwrap().is_empty(), "nothing started");
}

/// An application whose tree gives up restarting (OTP's permanent
/// application terminating): the runner stops the others and exits 1.
struct GivesUp(Log);
impl Application for GivesUp {
    fn name(&self) -> &str {
        "gives_up"
    }
    fn dependencies(&self) -> Vec<String> {
        vec!["db".into()]
    }
    fn start(&mut self) -> Result<Pid, StartError> {
        Supervisor::new(Strategy::OneForOne)
            .child(ChildSpec::new("crasher", || {
                Ok(spawn_link(|| {
                    sleep(std::time::Duration::from_millis(20));
                    panic!("crasher: on purpose")
                }))
            }))
            .start()
    }
    fn stop(&mut self) {
        self.0.lock().unwrap().push("stop gives_up".into());
    }
}

#[test]
fn a_tree_that_gives_up_stops_the_program_with_status_1() {
    let _one = serial();
    let log: Log = Arc::default();
    let code = application::Runner::new(NodeConfig::new("127.0.0.1:0").workers(2))
        .app(app("db", &[], &log))
        .app(GivesUp(log.clone()))
        .run();
    assert_eq!(
        format!("{code:?}"),
        format!("{:?}", std::process::ExitCode::from(1))
    );
    assert_eq!(
        *log.lock().unwrap(),
        ["start db", "stop gives_up", "terminate db", "stop db"]
    );
}

#[test]
fn the_runner_joins_the_nodes_it_is_told_to() {
    let _one = serial();
    let peer = Node::start(NodeConfig::new("127.0.0.1:0").cookie("app-join")).unwrap();
    let peer_id = peer.id();
    let (tx, rx) = std::sync::mpsc::channel();
    let log: Log = Arc::default();
    let code = application::Runner::new(NodeConfig::new("127.0.0.1:0").cookie("app-join"))
        .join(&peer.addr().to_string())
        .app(app("db", &[], &log))
        .on_started(move |node| {
            tx.send(node.nodes()).unwrap();
            application::stop();
        })
        .run();
    assert_eq!(
        format!("{code:?}"),
        format!("{:?}", std::process::ExitCode::SUCCESS)
    );
    assert_eq!(rx.recv().unwrap(), [peer_id]);
    peer.shutdown();
}
