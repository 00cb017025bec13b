//! pg: process groups on one node, on three, and through a partition of
//! four.

mod common;

use common::{cluster_node as node, eventually, idle};
use graft_otp::graft::testing;
use graft_otp::pg::{self, PgError, PgEvent};
use graft_otp::prelude::*;
use std::time::Duration;

const S: &str = pg::DEFAULT_SCOPE;

fn members(n: &Node, group: &'static str) -> Vec<Pid> {
    let mut v = n.run(move || pg::get_members(S, group)).unwrap();
    v.sort();
    v
}

#[test]
fn one_node_join_leave_monitor_and_member_death() {
    let n = node("pg1");
    n.run(|| {
        assert_eq!(
            pg::join("nope", "g", self_pid()),
            Err(PgError::NoScope("nope".into()))
        );
        pg::start().unwrap();
        assert!(pg::start().is_err());
        let (id, now) = pg::monitor(S, "g").unwrap();
        assert!(now.is_empty());
        let a = idle();
        let b = idle();
        pg::join(S, "g", a).unwrap();
        pg::join_many(S, "g", &[a, b]).unwrap();
        let mut m = pg::get_members(S, "g");
        m.sort();
        let mut want = vec![a, a, b];
        want.sort();
        assert_eq!(m, want);
        assert_eq!(pg::get_local_members(S, "g").len(), 3);
        assert_eq!(pg::which_groups(S), vec!["g".to_string()]);
        let ev: PgEvent = expect();
        assert_eq!((ev.id, ev.joined, ev.pids), (id, true, vec![a]));
        let ev: PgEvent = expect();
        assert_eq!((ev.joined, ev.pids), (true, vec![a, b]));
        // One leave takes one membership.
        assert_eq!(pg::leave(S, "g", a), Ok(true));
        assert_eq!(pg::get_members(S, "g").len(), 2);
        let ev: PgEvent = expect();
        assert_eq!((ev.joined, ev.pids), (false, vec![a]));
        assert_eq!(pg::leave(S, "other", a), Ok(false));
        // A member that ends leaves everything.
        send(a, ());
        let ev: PgEvent = expect();
        assert_eq!((ev.joined, ev.pids), (false, vec![a]));
        assert_eq!(pg::get_members(S, "g"), vec![b]);
        pg::demonitor(S, id).unwrap();
        send(b, ());
        sleep(Duration::from_millis(50));
        assert!(pg::get_members(S, "g").is_empty());
        assert!(pg::which_groups(S).is_empty());
        assert!(receive()
            .on(|e: PgEvent| e)
            .timeout(Duration::from_millis(50))
            .is_none());
        // Other scopes are separate.
        pg::start_scope("other").unwrap();
        pg::join("other", "g", self_pid()).unwrap();
        assert!(pg::get_members(S, "g").is_empty());
        assert_eq!(pg::get_members("other", "g"), vec![self_pid()]);
    })
    .unwrap();
}

#[test]
fn three_nodes_share_groups_and_repair_after_node_loss() {
    let ns: Vec<Node> = (0..3).map(|_| node("pg3")).collect();
    for n in &ns[1..] {
        ns[0].connect(n.addr()).unwrap();
    }
    eventually("mesh", || ns.iter().all(|n| n.nodes().len() == 2));
    let mut all = Vec::new();
    for n in &ns {
        let p = n
            .run(|| {
                pg::start().unwrap();
                let p = idle();
                pg::join(S, "g", p).unwrap();
                p
            })
            .unwrap();
        all.push(p);
    }
    all.sort();
    for n in &ns {
        eventually("all three everywhere", || members(n, "g") == all);
    }
    // A watcher on node 0 sees the join of node 2's new member.
    let (tx, rx) = std::sync::mpsc::channel::<PgEvent>();
    ns[0]
        .spawn(move || {
            let (_, now) = pg::monitor(S, "g").unwrap();
            assert_eq!(now.len(), 3);
            tx.send(PgEvent {
                id: 0,
                group: "ready".into(),
                joined: true,
                pids: vec![],
            })
            .unwrap();
            loop {
                let e: PgEvent = expect();
                tx.send(e).unwrap();
            }
        })
        .unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(20)).unwrap().group,
        "ready"
    );
    let extra = ns[2]
        .run(|| {
            let p = idle();
            pg::join(S, "g", p).unwrap();
            p
        })
        .unwrap();
    let e = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!((e.joined, e.pids), (true, vec![extra]));
    // A member that ends is gone everywhere.
    ns[2].send(extra, ());
    let e = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!((e.joined, e.pids), (false, vec![extra]));
    for n in &ns {
        eventually("extra gone", || members(n, "g") == all);
    }
    // Node 2 goes: its member is removed on the others.
    let lost = all
        .iter()
        .copied()
        .find(|p| p.node() == ns[2].id())
        .unwrap();
    let ns2 = ns.into_iter().collect::<Vec<_>>();
    let (keep, gone) = ns2.split_at(2);
    gone[0].shutdown();
    let rest: Vec<Pid> = all.iter().copied().filter(|p| *p != lost).collect();
    for n in keep {
        eventually("lost node's member removed", || members(n, "g") == rest);
    }
    let e = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!((e.joined, e.pids), (false, vec![lost]));
}

#[test]
fn a_partition_splits_groups_and_the_heal_merges_them() {
    let ns: Vec<Node> = (0..4).map(|_| node("pg4")).collect();
    for n in &ns[1..] {
        ns[0].connect(n.addr()).unwrap();
    }
    eventually("mesh", || ns.iter().all(|n| n.nodes().len() == 3));
    let mut all = Vec::new();
    for n in &ns {
        all.push(
            n.run(|| {
                pg::start().unwrap();
                let p = idle();
                pg::join(S, "g", p).unwrap();
                p
            })
            .unwrap(),
        );
    }
    let sorted = |mut v: Vec<Pid>| {
        v.sort();
        v
    };
    let everyone = sorted(all.clone());
    for n in &ns {
        eventually("four everywhere", || members(n, "g") == everyone);
    }
    testing::partition(&[&ns[0], &ns[1]], &[&ns[2], &ns[3]]);
    let left = sorted(all[..2].to_vec());
    let right = sorted(all[2..].to_vec());
    for n in &ns[..2] {
        eventually("left half", || members(n, "g") == left);
    }
    for n in &ns[2..] {
        eventually("right half", || members(n, "g") == right);
    }
    // Each half changes on its own meanwhile.
    let new_right = ns[3]
        .run(|| {
            let p = idle();
            pg::join(S, "g", p).unwrap();
            p
        })
        .unwrap();
    ns[0].send(all[0], ()); // a left member ends
    let left_now = sorted(vec![all[1]]);
    eventually("left half after its change", || {
        members(&ns[1], "g") == left_now
    });
    testing::heal(&[&ns[0], &ns[1]], &[&ns[2], &ns[3]]);
    let merged = sorted(vec![all[1], all[2], all[3], new_right]);
    for n in &ns {
        eventually("merged", || members(n, "g") == merged);
    }
}
