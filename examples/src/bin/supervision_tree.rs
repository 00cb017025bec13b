//! A small supervision tree that survives injected crashes, printing what
//! happens:
//!
//! ```text
//! root (one_for_one)
//! ├── counter            a gen_server
//! └── storage (rest_for_one)
//!     ├── db
//!     └── cache          depends on db: restarted when db is
//! ```
//!
//! Run with `cargo run -p graft-examples --bin supervision_tree` (add
//! `RUST_LOG=info` to see the supervisors' crash and restart reports).
use graft_otp::prelude::*;
use std::time::Duration;

/// A worker that prints its life and crashes on request.
struct Worker {
    name: &'static str,
    count: u64,
}

/// What the demo asks of a worker.
#[derive(Debug, graft::Mobile)]
enum Ask {
    Bump,
    Crash,
}

impl GenServer for Worker {
    type Call = Ask;
    type Cast = ();
    type Reply = u64;

    fn init(&mut self) -> Result<(), ExitReason> {
        // Trap exits so that a supervisor's shutdown runs `terminate`.
        trap_exits(true);
        println!("  + {} started as {}", self.name, self_pid());
        Ok(())
    }

    fn handle_call(&mut self, ask: Ask, _: &ReplyTo<u64>) -> CallResult<u64> {
        match ask {
            Ask::Bump => {
                self.count += 1;
                CallResult::Reply(self.count)
            }
            Ask::Crash => panic!("{} was told to crash", self.name),
        }
    }

    fn terminate(&mut self, reason: &ExitReason) {
        println!("  - {} stopped: {reason}", self.name);
    }
}

fn worker(name: &'static str) -> ChildSpec {
    ChildSpec::server(name, move || Worker { name, count: 0 })
        .shutdown(Shutdown::Timeout(Duration::from_millis(500)))
}

fn storage() -> Supervisor {
    Supervisor::new(Strategy::RestForOne)
        .intensity(3, Duration::from_secs(5))
        .child(worker("db"))
        .child(worker("cache"))
}

/// The running worker `path` names (`["storage", "db"]`), from the root;
/// `None` while one on the way is being restarted.
fn find_opt(root: Pid, path: &[&str]) -> Option<Server<Worker>> {
    let mut at = root;
    for id in path {
        at = supervisor::get_child(at, id)?;
    }
    Some(Server::from_pid(at))
}

/// [`find_opt`] for a worker that must be running.
fn find(root: Pid, path: &[&str]) -> Server<Worker> {
    find_opt(root, path).expect("child running")
}

/// Crashes a worker and waits until its supervisor has replaced it.
fn inject_crash(root: Pid, path: &[&str]) {
    let victim = find(root, path);
    println!("injecting a crash into {}", path.join("/"));
    let r = victim.call(Ask::Crash);
    println!("  the caller saw: {}", r.expect_err("it crashed"));
    while find_opt(root, path).is_none_or(|s| s == victim) {
        sleep(Duration::from_millis(1));
    }
}

fn main() {
    env_logger::init();
    let node = Node::start(NodeConfig::new("127.0.0.1:0")).expect("node starts");
    node.run(|| {
        trap_exits(true);
        println!("starting the tree");
        let root = Supervisor::new(Strategy::OneForOne)
            .intensity(5, Duration::from_secs(5))
            .child(worker("counter"))
            .child(ChildSpec::supervisor("storage", storage))
            .start()
            .expect("tree starts");

        let counter = find(root, &["counter"]);
        for _ in 0..3 {
            counter.call(Ask::Bump).expect("bump");
        }
        println!("counter is at {}", counter.call(Ask::Bump).expect("bump"));

        inject_crash(root, &["counter"]);
        println!(
            "counter restarted with fresh state: {}",
            find(root, &["counter"]).call(Ask::Bump).expect("bump")
        );

        inject_crash(root, &["storage", "db"]);
        // rest_for_one: cache was restarted with db; wait for it.
        while find_opt(root, &["storage", "cache"]).is_none() {
            sleep(Duration::from_millis(1));
        }
        inject_crash(root, &["storage", "cache"]);

        let storage = supervisor::get_child(root, "storage").expect("storage");
        let children = supervisor::which_children(storage).expect("which_children");
        println!(
            "storage now runs: {}",
            children
                .iter()
                .map(|c| c.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!("the tree survived 3 crashes; shutting it down");
        exit(root, ExitReason::Shutdown);
        let sig: ExitSignal = expect();
        println!("root stopped: {}", sig.reason);
    })
    .expect("the root process finishes");
    node.shutdown();
    println!("done");
}
