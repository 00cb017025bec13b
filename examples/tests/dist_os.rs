//! Nodes in two OS processes: this test and a `graft-node` child, over TCP
//! on 127.0.0.1.

use graft::*;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `graft-node` child process, killed when dropped.
struct NodeProcess {
    child: Child,
    addr: SocketAddr,
    /// Its output, kept open (so that it never writes to a closed pipe).
    _out: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl NodeProcess {
    fn start(cookie: &str) -> NodeProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_graft-node"))
            .args(["--listen", "127.0.0.1:0", "--cookie", cookie])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start graft-node");
        let out = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(out).lines();
        let first = lines.next().expect("a line").expect("readable");
        let addr = first
            .strip_prefix("listening on ")
            .expect("listening line")
            .parse()
            .expect("an address");
        NodeProcess {
            child,
            addr,
            _out: lines,
        }
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn node(cookie: &str) -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .cookie(cookie)
            .heartbeat(Duration::from_millis(300)),
    )
    .expect("node")
}

#[test]
fn talk_to_a_node_in_another_os_process_and_see_it_die() {
    let mut other = NodeProcess::start("os-test");
    let me = node("os-test");
    let id = me.connect(other.addr).expect("connect");
    // Messages both ways, a registered name on the other node, a monitor.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let watcher = std::thread::spawn(move || {
        me.run(move || {
            let keeper = whereis_on("keeper", id)
                .unwrap()
                .expect("keeper registered");
            send(keeper, (self_pid(), String::from("ping")));
            assert_eq!(expect::<String>(), "ping");
            // A body that the other executable does not have: refused,
            // clearly, by its code id.
            let r = spawn_on(id, (), |()| {});
            assert!(
                matches!(&r, Err(Error::Remote(m)) if m.contains("no mobile function")),
                "{r:?}"
            );
            // A body both executables have (from the library they share):
            // same code id, so the other executable runs it.
            graft_examples::shared_code::greet_on(id, self_pid()).expect("a shared function");
            assert!(expect::<String>().starts_with("hello from"));
            let m = monitor(keeper);
            tx.send(()).unwrap();
            let t = Instant::now();
            let d: ProcessDied = expect();
            (d.monitor == m, d.reason, t.elapsed())
        })
        .map(|r| (r, me))
    });
    rx.recv().unwrap();
    // SIGKILL: no goodbye on the wire.
    other.child.kill().unwrap();
    let _ = other.child.wait();
    let ((same, reason, waited), _me) = watcher.join().unwrap().unwrap();
    assert!(same);
    assert_eq!(reason, ExitReason::NoConnection);
    // Within the heartbeat window (3 ticks of 300 ms), with slack for a
    // loaded machine (a hang guard, not a speed claim).
    assert!(waited < Duration::from_secs(10), "{waited:?}");
}

#[test]
fn a_node_in_another_os_process_with_another_cookie_is_refused() {
    let mut other = NodeProcess::start("cookie-one");
    let me = node("cookie-two");
    let r = me.connect(other.addr);
    assert!(
        matches!(&r, Err(Error::Remote(m)) if m.contains("cookie")),
        "{r:?}"
    );
    assert!(me.nodes().is_empty());
    // Refused, not gone: the other node still runs and still serves.
    assert!(
        other.child.try_wait().unwrap().is_none(),
        "graft-node exited"
    );
    let same = node("cookie-one");
    assert!(same.connect(other.addr).is_ok());
}
