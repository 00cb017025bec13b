//! A node shut down from inside: by one of its own processes, or by the
//! drop of its last handle there. (Its own binary: it counts the node's
//! worker threads.)

use graft::*;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Error lines logged so far (a process's panic is logged as one).
static ERRORS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Errors;

impl log::Log for Errors {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Error
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            ERRORS.lock().unwrap().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

/// Threads named `graft-worker-*` in this process.
fn workers() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("graft-worker"))
        .count()
}

/// Waits (a hang guard) until the node's workers are all joined.
fn until_no_workers(what: &str) {
    let t = Instant::now();
    while workers() > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{what}: workers left"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn node() -> Arc<Node> {
    let config = NodeConfig::new("127.0.0.1:0")
        .workers(2)
        .shutdown_timeout(Duration::from_secs(5));
    Arc::new(Node::start(config).unwrap())
}

#[test]
fn a_node_stops_when_shut_down_from_its_own_process_or_dropped_there() {
    log::set_logger(&Errors).unwrap();
    log::set_max_level(log::LevelFilter::Error);
    assert_eq!(workers(), 0);
    // `shutdown` called by a process of the node: it returns, the node
    // stops, and the caller is stopped with the rest.
    let n = node();
    // (A thread names itself once it runs.)
    let t = Instant::now();
    while workers() < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "workers never started"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let handle = n.clone();
    n.spawn(move || {
        handle.shutdown();
        loop {
            sleep(Duration::from_millis(1));
        }
    })
    .unwrap();
    until_no_workers("shutdown from a process");
    assert_eq!(n.process_count(), 0);
    assert!(matches!(n.spawn(|| {}), Err(Error::NodeDown)));
    drop(n);

    // The last handle dropped by a process of the node (ours goes first).
    let n = node();
    let handle = n.clone();
    let go = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ours_gone = go.clone();
    n.spawn(move || {
        let _last = handle;
        while !ours_gone.load(std::sync::atomic::Ordering::SeqCst) {
            sleep(Duration::from_millis(1));
        }
    })
    .unwrap();
    drop(n);
    go.store(true, std::sync::atomic::Ordering::SeqCst);
    until_no_workers("last handle dropped in a process");
    // Nothing panicked on the way (joining its own thread would have).
    assert_eq!(*ERRORS.lock().unwrap(), Vec::<String>::new());
}
