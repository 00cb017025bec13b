//! global: cluster-wide names on one node, on three (concurrent claims),
//! and through a partition of four with a conflict at the merge.

mod common;

use common::{cluster_node as node, eventually, idle};
use graft_otp::global::{self, GlobalError};
use graft_otp::graft::testing;
use graft_otp::prelude::*;
use std::time::{Duration, Instant};

fn cluster(n: usize, cookie: &str) -> Vec<Node> {
    let ns: Vec<Node> = (0..n).map(|_| node(cookie)).collect();
    for x in &ns[1..] {
        ns[0].connect(x.addr()).unwrap();
    }
    eventually("mesh", || ns.iter().all(|x| x.nodes().len() == n - 1));
    for x in &ns {
        x.run(|| global::start().map(|_| ())).unwrap().unwrap();
    }
    ns
}

fn whereis(n: &Node, name: &'static str) -> Option<Pid> {
    n.run(move || global::whereis_name(name)).unwrap()
}

#[test]
fn one_node_names_and_a_holder_that_ends() {
    let n = node("g1");
    n.run(|| {
        assert_eq!(
            global::register_name("x", self_pid()),
            Err(GlobalError::NoServer)
        );
        global::start().unwrap();
        let p = idle();
        global::register_name("x", p).unwrap();
        // Again with the same pid: fine; with another: taken.
        global::register_name("x", p).unwrap();
        assert_eq!(
            global::register_name("x", self_pid()),
            Err(GlobalError::Taken(Some(p)))
        );
        assert_eq!(global::registered_names(), vec!["x".to_string()]);
        assert_eq!(global::send("x", ()), Ok(p));
        // p ends: the name goes.
        let t = Instant::now();
        while global::whereis_name("x").is_some() {
            assert!(t.elapsed() < Duration::from_secs(20));
            sleep(Duration::from_millis(5));
        }
        assert_eq!(
            global::unregister_name("x"),
            Err(GlobalError::NotRegistered("x".into()))
        );
        assert!(matches!(
            global::send("x", ()),
            Err(GlobalError::NotRegistered(_))
        ));
    })
    .unwrap();
}

#[test]
fn three_nodes_agree_and_concurrent_claims_have_one_winner() {
    let ns = cluster(3, "g3");
    // Let the servers meet.
    std::thread::sleep(Duration::from_millis(200));
    let p = ns[0]
        .run(|| {
            let p = idle();
            global::register_name("svc", p).unwrap();
            p
        })
        .unwrap();
    for n in &ns {
        eventually("svc everywhere", || whereis(n, "svc") == Some(p));
    }
    let r = ns[1]
        .run(|| global::register_name("svc", self_pid()))
        .unwrap();
    assert_eq!(r, Err(GlobalError::Taken(Some(p))));
    // Concurrent claims for the same names from nodes 1 and 2.
    const NAMES: usize = 10;
    let (tx, rx) = std::sync::mpsc::channel::<(usize, usize, bool, Pid)>();
    let mut starters = Vec::new();
    for (k, n) in ns.iter().enumerate().skip(1) {
        let tx = tx.clone();
        starters.push(
            n.spawn(move || {
                expect::<()>();
                for i in 0..NAMES {
                    let tx = tx.clone();
                    spawn(move || {
                        let holder = idle();
                        let ok = global::register_name(&format!("n{i}"), holder).is_ok();
                        tx.send((i, k, ok, holder)).unwrap();
                    });
                }
            })
            .unwrap(),
        );
    }
    ns[1].send(starters[0], ());
    ns[2].send(starters[1], ());
    let mut winners: Vec<Option<Pid>> = vec![None; NAMES];
    for _ in 0..2 * NAMES {
        let (i, _k, ok, holder) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        if ok {
            assert!(winners[i].is_none(), "two winners for n{i}");
            winners[i] = Some(holder);
        }
    }
    for (i, w) in winners.iter().enumerate() {
        let w = w.unwrap_or_else(|| panic!("no winner for n{i}"));
        let name: &'static str = Box::leak(format!("n{i}").into_boxed_str());
        for n in &ns {
            eventually("the winner everywhere", || whereis(n, name) == Some(w));
        }
    }
    // A lost node's names go.
    let on2 = ns[2]
        .run(|| {
            let p = idle();
            global::register_name("on2", p).unwrap();
            p
        })
        .unwrap();
    eventually("on2 seen", || whereis(&ns[0], "on2") == Some(on2));
    ns[2].shutdown();
    eventually("on2 gone", || whereis(&ns[0], "on2").is_none());
    assert_eq!(whereis(&ns[0], "svc"), Some(p));
}

#[test]
fn a_partition_merge_keeps_the_older_name_and_exits_the_other() {
    let ns = cluster(4, "g4");
    std::thread::sleep(Duration::from_millis(200));
    let old = ns[0]
        .run(|| {
            let p = idle();
            global::register_name("leader", p).unwrap();
            p
        })
        .unwrap();
    for n in &ns {
        eventually("leader everywhere", || whereis(n, "leader") == Some(old));
    }
    testing::partition(&[&ns[0], &ns[1]], &[&ns[2], &ns[3]]);
    // The right half lost the holder's node: the name is free there.
    for n in &ns[2..] {
        eventually("leader gone on the right", || {
            whereis(n, "leader").is_none()
        });
    }
    assert_eq!(whereis(&ns[1], "leader"), Some(old));
    // The right half registers its own leader, and a name of its own.
    let (tx, rx) = std::sync::mpsc::channel::<ExitReason>();
    let young = ns[3]
        .run(move || {
            let p = idle();
            global::register_name("leader", p).unwrap();
            global::register_name("right_only", p).unwrap();
            spawn(move || {
                let m = monitor(p);
                let d: ProcessDied = receive()
                    .when(move |d: &ProcessDied| d.monitor == m, |d| d)
                    .wait();
                tx.send(d.reason).unwrap();
            });
            p
        })
        .unwrap();
    eventually("young leader on the right", || {
        whereis(&ns[2], "leader") == Some(young)
    });
    testing::heal(&[&ns[0], &ns[1]], &[&ns[2], &ns[3]]);
    // The older registration wins everywhere; the younger holder is told.
    for n in &ns {
        eventually("old leader everywhere", || {
            whereis(n, "leader") == Some(old)
        });
    }
    let reason = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(reason, global::conflict_reason("leader"));
    // Its other name went with it.
    for n in &ns {
        eventually("right_only gone", || whereis(n, "right_only").is_none());
    }
}
