//! Node monitors against a peer in another OS process: `NodeDown` when it
//! is killed with SIGKILL, `NodeUp` when it comes back.

use graft::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `graft-node` child, killed (SIGKILL) when dropped.
struct Peer {
    child: Child,
    _out: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Peer {
    fn start(name: &str, listen: &str, join: std::net::SocketAddr) -> Peer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_graft-node"))
            .args(["--name", name, "--listen", listen, "--cookie", "nodemon"])
            .args(["--join", &join.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start graft-node");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = lines.next().expect("a line").expect("readable");
        assert!(first.starts_with("listening on "), "{first}");
        Peer { child, _out: lines }
    }

    /// SIGKILL, and reap it.
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill9();
    }
}

#[test]
fn node_down_on_kill_9_and_node_up_on_return() {
    let _ = env_logger::builder().is_test(true).try_init();
    let me = Node::start(
        NodeConfig::new("127.0.0.1:0")
            .cookie("nodemon")
            .heartbeat(Duration::from_millis(300)),
    )
    .expect("node");
    let my_addr = me.addr();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let name = format!("peer@127.0.0.1:{port}");
    let peer_id = NodeId::from_name(&name);
    let (to_test, events) = std::sync::mpsc::channel::<String>();
    let (go, wait_go) = std::sync::mpsc::channel::<()>();
    let wait_go = std::sync::Mutex::new(wait_go);
    let watcher = me
        .spawn(move || {
            monitor_nodes(true);
            let next = |what: &str| {
                receive()
                    .when(move |u: &NodeUp| u.node == peer_id, |_| "up".to_string())
                    .when(
                        move |d: &NodeDown| d.node == peer_id,
                        |d: NodeDown| format!("down {}", d.reason),
                    )
                    .timeout(Duration::from_secs(30))
                    .unwrap_or_else(|| format!("nothing while waiting for {what}"))
            };
            to_test.send("ready".into()).unwrap();
            to_test.send(next("up")).unwrap();
            // And a one-shot monitor on that node, made while it is up.
            monitor_node(peer_id, true);
            let _ = blocking(move || wait_go.lock().unwrap().recv());
            to_test.send(next("down")).unwrap();
            let d = receive()
                .on(|d: NodeDown| d.node == peer_id)
                .timeout(Duration::from_secs(30));
            to_test
                .send(format!("monitor_node {}", d == Some(true)))
                .unwrap();
            to_test.send(next("up again")).unwrap();
        })
        .unwrap();
    let recv = || {
        events
            .recv_timeout(Duration::from_secs(60))
            .expect("an event")
    };
    assert_eq!(recv(), "ready");
    let mut peer = Peer::start(&name, &listen, my_addr);
    assert_eq!(recv(), "up");
    peer.kill9();
    go.send(()).unwrap();
    let down = recv();
    assert!(down.starts_with("down"), "{down}");
    assert_eq!(recv(), "monitor_node true");
    assert!(!me.nodes().contains(&peer_id));
    // It comes back (same name, same address), and joins us.
    let _again = Peer::start(&name, &listen, my_addr);
    assert_eq!(recv(), "up");
    assert!(me.nodes().contains(&peer_id));
    let _ = watcher;
    me.shutdown();
}
