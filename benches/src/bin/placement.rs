//! placement: the cost of a cache line's round trip between the first two
//! CPUs this process may use, as `machine.core_to_core_ns`. Run it beside
//! any figure that shares data between two threads (the dist benches, the
//! callers): on a virtual machine it moves by 5× from minute to minute
//! with where the host puts the vCPUs (see `docs/decisions.md`, "The
//! callers' bimodal tail"), and such figures are comparable only between
//! runs of the same placement.

fn main() {
    match graft_benches::core_to_core_ns() {
        Some(ns) => graft_benches::report("machine", "core_to_core_ns", "ns", ns),
        None => eprintln!("placement: fewer than two CPUs"),
    }
}
