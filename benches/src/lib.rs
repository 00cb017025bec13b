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
