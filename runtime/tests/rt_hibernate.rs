//! `hibernate` gives a waiting process's dead stack pages back: the RSS of
//! many processes that used deep stacks drops, and they still work after.
//! (One test in this binary: RSS is per OS process.)

use graft::*;
use std::time::Duration;

const PROCS: usize = 200;
/// Levels of 1 KiB (at least) of stack each process touches before it
/// hibernates.
const DEEP_KIB: u32 = 128;

fn rss_bytes() -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Recurses `n` levels, each with 1 KiB of stack that is really written.
#[inline(never)]
fn deep(n: u32) -> u64 {
    let buf = std::hint::black_box([n as u8; 1024]);
    if n == 0 {
        u64::from(buf[0])
    } else {
        deep(n - 1) + u64::from(buf[1])
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Mobile)]
enum Step {
    Hibernate,
    Work(u32),
}

#[test]
fn hibernated_processes_give_their_stack_pages_back_and_still_work() {
    let _ = env_logger::builder().is_test(true).try_init();
    let node = Node::start(NodeConfig::new("127.0.0.1:0").workers(2)).unwrap();
    node.run(|| {
        let me = self_pid();
        let pids: Vec<Pid> = (0..PROCS)
            .map(|_| {
                spawn_opts()
                    .stack_size(2 * 1024 * 1024)
                    .spawn(move || {
                        send(me, Local(("deep", deep(DEEP_KIB))));
                        loop {
                            match expect::<Step>() {
                                Step::Hibernate => {
                                    let freed = hibernate();
                                    send(me, Local(("freed", freed as u64)));
                                }
                                Step::Work(n) => send(me, Local(("work", deep(n)))),
                            }
                        }
                    })
                    .unwrap()
            })
            .collect();
        let collect = |what: &'static str| -> Vec<u64> {
            (0..PROCS)
                .map(|_| {
                    let Local((w, v)) =
                        expect_timeout::<Local<(&'static str, u64)>>(Duration::from_secs(30))
                            .expect("every process answers");
                    assert_eq!(w, what);
                    v
                })
                .collect()
        };
        collect("deep");
        let before = rss_bytes();
        for &p in &pids {
            send(p, Step::Hibernate);
        }
        let freed = collect("freed");
        let after = rss_bytes();
        let touched = PROCS * DEEP_KIB as usize * 1024;
        assert!(
            freed
                .iter()
                .all(|&f| f as usize >= (DEEP_KIB as usize - 32) * 1024),
            "each process gave back its deep pages: {:?}",
            &freed[..4]
        );
        let dropped = before.saturating_sub(after);
        eprintln!(
            "RSS {before} -> {after} bytes after {PROCS} hibernates ({touched} touched at least)"
        );
        assert!(
            dropped >= touched / 2,
            "RSS {before} -> {after}: dropped {dropped} of {touched} bytes touched"
        );
        // They still work, deep stacks included.
        for &p in &pids {
            send(p, Step::Work(DEEP_KIB / 2));
        }
        let sums = collect("work");
        let want: u64 = (1..=DEEP_KIB / 2).map(|k| u64::from(k as u8)).sum();
        assert!(sums.iter().all(|&s| s == want), "{:?}", &sums[..4]);
        for p in pids {
            exit(p, ExitReason::Kill);
        }
    })
    .unwrap();
    node.shutdown();
}
