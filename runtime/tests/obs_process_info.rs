//! Every `process_info` field and node statistic (issue 14).

use graft::*;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn node() -> Node {
    Node::start(NodeConfig::new("127.0.0.1:0").workers(2).cookie("obs")).unwrap()
}

/// Polls `f` until it holds (hang guard 30 s).
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(30), "never: {what}");
        sleep(Duration::from_millis(2));
    }
}

#[test]
fn mailbox_length_status_name_links_monitors_and_lineage() {
    let n = node();
    n.run(|| {
        let me = self_pid();
        // Waits for a u8 only: the strings stay queued.
        let p = spawn(|| {
            register("picky", self_pid()).unwrap();
            trap_exits(true);
            receive().on(|_: u8| ()).wait();
        });
        for i in 0..5 {
            send(p, format!("m{i}"));
        }
        until("5 messages queued while waiting", || {
            process_info(p).is_some_and(|i| i.mailbox_len == 5 && i.status == Status::Waiting)
        });
        link(p);
        let r = monitor(p);
        let info = process_info(p).unwrap();
        assert_eq!(info.registered_name.as_deref(), Some("picky"));
        assert!(info.trap_exits);
        assert_eq!(info.links, vec![me]);
        assert_eq!(info.monitored_by, vec![me]);
        assert_eq!(info.parent, Some(me));
        assert_eq!(info.ancestors.first(), Some(&me));
        assert!(
            info.spawned_at
                .starts_with("runtime/tests/obs_process_info.rs:"),
            "{info:?}"
        );
        assert_eq!(info.initial_call, info.spawned_at);
        assert!(info.stack_size >= 64 * 1024, "{info:?}");
        assert!(
            info.stack_in_use > 0 && info.stack_in_use < info.stack_size,
            "{info:?}"
        );
        assert!(info.runs >= 1);
        // Whom we monitor: p.
        assert!(process_info(me).unwrap().monitors.is_empty(), "not scanned");
        let mine = observe::process_info_full(me).unwrap().unwrap();
        assert_eq!(mine.monitors, vec![p]);
        assert_eq!(mine.status, Status::Running);
        demonitor(r);
        unlink(p);
        send(p, 1u8);
        until("p exits", || process_info(p).is_none());
    })
    .unwrap();
    n.shutdown();
}

#[test]
fn run_time_and_runs_grow_while_a_process_spins() {
    let n = node();
    n.run(|| {
        let p = spawn(|| loop {
            let t = Instant::now();
            let mut x = 0u64;
            while t.elapsed() < Duration::from_micros(500) {
                x = black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            yield_now();
        });
        until("it ran", || process_info(p).is_some_and(|i| i.runs > 2));
        let a = process_info(p).unwrap();
        until("its run time grew by 5 ms", || {
            process_info(p).unwrap().run_time_ns > a.run_time_ns + 5_000_000
        });
        let b = process_info(p).unwrap();
        assert!(b.runs > a.runs, "{a:?} {b:?}");
        assert!(b.run_time_ns > a.run_time_ns, "{a:?} {b:?}");
        exit(p, ExitReason::Kill);
        // The node saw it busy.
        let s = observe::node_stats();
        assert!(
            s.utilisation.iter().all(|u| (0.0..=1.0).contains(u)),
            "{s:?}"
        );
        let wall = observe::scheduler_wall_time();
        assert_eq!(wall.len(), 2);
        let busy: u64 = wall.iter().map(|(b, _)| b).sum();
        // Every period charged to a process is charged to its worker too.
        assert!(busy >= b.run_time_ns, "{wall:?} {b:?}");
        assert!(wall.iter().all(|(b, t)| b <= t));
    })
    .unwrap();
    n.shutdown();
}

#[test]
fn a_waiting_process_is_not_charged_run_time() {
    let n = node();
    n.run(|| {
        let p = spawn(|| {
            receive().on(|_: u8| ()).wait();
        });
        until("it waits", || {
            process_info(p).is_some_and(|i| i.status == Status::Waiting)
        });
        // Two equal readings around a sleep (a sample may still land just
        // as it parks: a second round is past that).
        let mut stable = false;
        for _ in 0..5 {
            let a = process_info(p).unwrap().run_time_ns;
            sleep(Duration::from_millis(50));
            if process_info(p).unwrap().run_time_ns == a {
                stable = true;
                break;
            }
        }
        assert!(stable, "{:?}", process_info(p));
        send(p, 0u8);
    })
    .unwrap();
    n.shutdown();
}

/// Recurses `depth` frames of about 1 KiB each.
#[inline(never)]
fn recurse(depth: u32) -> u64 {
    let frame = black_box([depth as u8; 1024]);
    if depth == 0 {
        return frame[0] as u64;
    }
    recurse(depth - 1) + black_box(frame[7]) as u64
}

#[test]
fn the_stack_high_water_mark_grows_with_recursion() {
    let n = node();
    n.run(|| {
        let me = self_pid();
        let p = spawn_opts()
            .stack_size(2 << 20)
            .spawn(move || loop {
                let depth = expect::<u32>();
                black_box(recurse(depth));
                send(me, depth);
            })
            .unwrap();
        send(p, 16u32);
        assert_eq!(expect::<u32>(), 16);
        let shallow = observe::process_info_full(p)
            .unwrap()
            .unwrap()
            .stack_high_water;
        send(p, 600u32);
        assert_eq!(expect::<u32>(), 600);
        let deep = observe::process_info_full(p).unwrap().unwrap();
        assert!(deep.stack_high_water >= 600 * 1024, "{deep:?}");
        assert!(
            deep.stack_high_water > shallow + 400 * 1024,
            "{shallow} {deep:?}"
        );
        // Back at the top of its loop: far less in use than the mark.
        assert!(deep.stack_in_use < deep.stack_high_water / 4, "{deep:?}");
        exit(p, ExitReason::Kill);
    })
    .unwrap();
    n.shutdown();
}

#[test]
fn node_statistics_and_remote_process_info() {
    let a = node();
    let b = node();
    let b_addr = b.addr();
    let b_name = b.name().to_string();
    a.run(move || {
        let bn = connect(b_addr).unwrap();
        // A process on b with 3 messages it has not taken.
        let remote = spawn_on(bn, (), |()| {
            receive().on(|_: u8| ()).wait();
        })
        .unwrap();
        for i in 0..3u64 {
            send(remote, i);
        }
        until("3 messages queued on b", || {
            observe::process_info_on(remote)
                .unwrap()
                .is_some_and(|i| i.mailbox_len == 3)
        });
        let info = observe::process_info_on(remote).unwrap().unwrap();
        assert_eq!(info.pid, remote);
        assert_eq!(info.status, Status::Waiting);
        let sb = observe::node_stats_on(bn).unwrap();
        assert_eq!(sb.name, b_name);
        assert!(sb.mail_queued >= 3, "{sb:?}");
        assert!(sb.processes >= 1);
        let sa = observe::node_stats();
        assert_eq!(sa.workers, 2);
        assert_eq!(sa.run_queue.len(), 2);
        assert!(sa.processes >= 1);
        assert!(
            sa.stacks_mapped > 0 && sa.stacks_resident <= sa.stacks_mapped,
            "{sa:?}"
        );
        assert!(sa.uptime_ms < 600_000);
        let peer = sa
            .peers
            .iter()
            .find(|p| p.name == b_name)
            .expect("b is a peer");
        assert!(peer.frames_out >= 4 && peer.bytes_out > 0, "{peer:?}");
        assert!(peer.frames_in >= 1 && peer.bytes_in > 0, "{peer:?}");
        // The process list, here and there.
        let list = observe::process_list_on(bn).unwrap();
        let line = list.iter().find(|s| s.pid == remote).expect("listed");
        assert_eq!(line.mailbox_len, 3);
        assert!(observe::process_list().iter().any(|s| s.pid == self_pid()));
        send(remote, 0u8);
    })
    .unwrap();
    a.shutdown();
    b.shutdown();
}
