//! Mobile functions that every executable linking this library has: a
//! remote spawn of one of them works between *different* executables
//! (`graft-node` and a test, say), because its code id is the same in
//! both (see `graft::graph::MobileFn::code_id`).

use graft::{send, spawn_on, this_node, Error, NodeId, Pid};

/// Spawns on `node` a process that sends `to` the string
/// `"hello from NODE"` and ends.
///
/// # Errors
///
/// As [`graft::spawn_on`].
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let got = node.run(|| {
///     graft_examples::shared_code::greet_on(this_node(), self_pid()).unwrap();
///     expect::<String>()
/// }).unwrap();
/// assert!(got.starts_with("hello from"));
/// ```
pub fn greet_on(node: NodeId, to: Pid) -> Result<Pid, Error> {
    spawn_on(node, to, |to| {
        send(to, format!("hello from {}", this_node()))
    })
}
