//! The paper's distributed work pool: counting primes over an interval.
//!
//! The master splits `[0, N)` into units of work. A unit is a mobile
//! function (`MobileFnOnce<u64>`: code plus its `(lo, hi)` environment),
//! the paper's "unit of work modelled as a `ProcessM a` computation". The
//! master spawns one worker process on each worker node with `spawn_on`;
//! each worker asks for work, runs the unit it is handed, and asks again
//! with its result, until the master answers `Done`. The master monitors the
//! workers and hands a lost worker's unit to another one.
//!
//! Worker nodes are OS processes running *this* executable (mobile code
//! only runs on an identical build): the master re-executes itself as
//! `work_pool --worker --join MASTER --cookie C`, waits until all of them
//! are connected, runs the pool on 1, 2, ..., K nodes, checks every answer
//! against a sequential count, prints a speedup table, and kills and waits
//! for its children.
//!
//! ```text
//! work_pool [--nodes K] [--to N] [--units U]
//! ```

use graft_examples::work_pool;
use graft_otp::prelude::*;
use std::time::Instant;

fn main() {
    env_logger::init();
    let args = graft_examples::NodeArgs::from_env("work_pool");
    if args.get("--worker").is_some() {
        work_pool::serve(&args);
    }
    let k = args.num("--nodes").unwrap_or(2usize).max(1);
    let to = args.num("--to").unwrap_or(2_000_000);
    let units = args.num("--units").unwrap_or(64u32).max(1);
    let cookie = format!("work-pool-{}", std::process::id());
    let node = Node::start(
        NodeConfig::new("127.0.0.1:0")
            .name("master@127.0.0.1")
            .cookie(&cookie),
    )
    .expect("master node starts");
    let (workers, children) = work_pool::start_workers(&node, k, &cookie);
    println!("work_pool: {k} worker node(s) joined; counting primes below {to} in {units} units");

    let mut rows = Vec::new();
    for n in 1..=k {
        let on = workers[..n].to_vec();
        let t = Instant::now();
        let count = node
            .run(move || work_pool::pool(&on, to, units))
            .expect("the master finishes");
        rows.push((n, count, t.elapsed()));
    }
    let t = Instant::now();
    let expected = work_pool::count_primes(0, to);
    let seq = t.elapsed();
    println!(
        "work_pool: sequential count {expected} in {} ms",
        seq.as_millis()
    );
    println!("work_pool: nodes  primes  time_ms  speedup");
    let base = rows[0].2.as_secs_f64();
    let mut ok = true;
    for (n, count, time) in &rows {
        println!(
            "work_pool: {n:>5}  {count:>6}  {:>7}  {:>7.2}",
            time.as_millis(),
            base / time.as_secs_f64()
        );
        ok &= *count == expected;
    }
    node.shutdown();
    drop(children);
    if ok {
        println!("work_pool: every result matches the sequential count");
    } else {
        println!("work_pool: MISMATCH against the sequential count {expected}");
        std::process::exit(1);
    }
}
