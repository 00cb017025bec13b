//! Runs the distributed work pool with worker nodes as OS processes.

mod common;

use common::assert_has;
use std::time::Duration;

#[test]
fn work_pool_counts_primes_on_two_nodes() {
    let stdout = common::run_for(
        env!("CARGO_BIN_EXE_work_pool"),
        &["--nodes", "2", "--to", "300000", "--units", "24"],
        Duration::from_secs(90),
    );
    // pi(300 000) = 25 997.
    assert_has(&stdout, "2 worker node(s) joined");
    assert_has(&stdout, "sequential count 25997");
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(" 25997 ") && !l.contains("sequential"))
        .collect();
    assert_eq!(rows.len(), 2, "one row per node count:\n{stdout}");
    assert_has(&stdout, "every result matches the sequential count");
}
