//! Shared helpers for the benchmark bins.

/// Prints one figure as a JSON line in the shape of the Erlang anchors.
///
/// ```
/// graft_benches::report("ring", "ns_per_hop", "ns", 212.4);
/// ```
pub fn report(bench: &str, metric: &str, unit: &str, value: f64) {
    println!(
        "{{\"system\":\"graft\",\"bench\":\"{bench}\",\"metric\":\"{metric}\",\"unit\":\"{unit}\",\"value\":{value:.1}}}"
    );
}

/// Resident set size of this process, from `/proc/self/status`.
pub fn rss_bytes() -> i64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<i64>().ok())
        .map_or(0, |kb| kb * 1024)
}
