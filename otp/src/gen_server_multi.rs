//! gen_server across a set of nodes: [`multi_call`] and [`abcast`] (OTP's
//! `gen_server:multi_call/4` and `gen_server:abcast/3`) to the servers
//! registered under one name on each node.
//!
//! # The protocol
//!
//! Built on gen_server's public API only. For each node, a short-lived
//! local helper process looks the name up there ([`graft::whereis_on`]) and
//! makes an ordinary [`Server::call_timeout`] with what is left of the
//! timeout; all nodes are asked at once. The caller waits until the
//! deadline for the helpers' answers. A node that is not connected, has no
//! server under that name, whose server dies, or that does not answer in
//! time is a **bad node**, as in OTP. Helpers report through a gate that
//! the caller closes when it stops waiting, so a late answer never lands in
//! the caller's mailbox.
//!
//! An abcast hands its casts to the caller's **courier**: one helper process
//! per calling process (made on first use, kept in process-local storage,
//! ending when the caller does) that resolves each name and casts, in
//! order. So `abcast` returns at once, and the abcasts of one process reach
//! each server in the order they were made. A node without the server
//! drops the cast silently, as in OTP.
//!
//! # Examples
//!
//! ```
//! use graft_otp::prelude::*;
//! use graft_otp::gen_server_multi::{abcast, multi_call};
//! use std::time::Duration;
//!
//! #[derive(Default, Mobile)]
//! struct Count(u64);
//! impl GenServer for Count {
//!     type Call = ();
//!     type Cast = u64;
//!     type Reply = u64;
//!     fn handle_call(&mut self, _: (), _: &ReplyTo<u64>) -> CallResult<u64> {
//!         CallResult::Reply(self.0)
//!     }
//!     fn handle_cast(&mut self, n: u64) -> Flow {
//!         self.0 += n;
//!         Flow::Continue
//!     }
//! }
//!
//! let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
//! let (replies, bad) = node.run(|| {
//!     gen_server::start_named("count", Count::default()).unwrap();
//!     let here = [this_node()];
//!     abcast::<Count>(&here, "count", 5);
//!     // The abcast travels through the courier, the call does not: poll.
//!     loop {
//!         let (replies, bad) = multi_call::<Count>(&here, "count", (), Duration::from_secs(5));
//!         if replies[0].1 == 5 {
//!             break (replies, bad);
//!         }
//!         sleep(Duration::from_millis(1));
//!     }
//! }).unwrap();
//! assert_eq!(replies, [(node.id(), 5)]);
//! assert!(bad.is_empty());
//! node.shutdown();
//! ```

use crate::erpc::Gate;
use crate::gen_server::{GenServer, Server};
use graft::{
    make_ref, monitor, receive, self_pid, send, spawn, whereis_on, Local, MonitorRef, NodeId, Pid,
    ProcessDied,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One helper's answer: `Some(reply)` or a bad node.
struct Answer<R> {
    tag: MonitorRef,
    index: usize,
    reply: Option<R>,
}
impl<R: Send + 'static> graft::Message for Answer<R> {}

/// Calls the server registered as `name` on each of `nodes` (this node
/// included) with `request`, all at once, waiting until `timeout` in all
/// (OTP's `gen_server:multi_call/4`). Returns the replies, as `(node,
/// reply)` in the order of `nodes`, and the bad nodes: not connected, no
/// such server, the server died, or no reply in time.
///
/// # Panics
///
/// Outside a graft process.
pub fn multi_call<S>(
    nodes: &[NodeId],
    name: &str,
    request: S::Call,
    timeout: Duration,
) -> (Vec<(NodeId, S::Reply)>, Vec<NodeId>)
where
    S: GenServer,
    S::Call: graft::Mobile + Clone,
    S::Reply: graft::Mobile,
{
    let deadline = Instant::now() + timeout;
    let me = self_pid();
    let tag = make_ref();
    let gate = Gate::open();
    for (index, &node) in nodes.iter().enumerate() {
        let (name, request, gate) = (name.to_string(), request.clone(), gate.clone());
        spawn(move || {
            let reply = match whereis_on(&name, node) {
                Ok(Some(pid)) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    Server::<S>::from_pid(pid).call_timeout(request, left).ok()
                }
                _ => None,
            };
            gate.send_if_open(|| send(me, Answer { tag, index, reply }));
        });
    }
    let mut got: Vec<Option<Option<S::Reply>>> = nodes.iter().map(|_| None).collect();
    let mut left = nodes.len();
    while left > 0 {
        let Some(a) = receive()
            .when(
                move |a: &Answer<S::Reply>| a.tag == tag,
                |a: Answer<S::Reply>| a,
            )
            .deadline(deadline)
        else {
            break;
        };
        if let Some(slot) = got.get_mut(a.index) {
            if slot.is_none() {
                left -= 1;
            }
            *slot = Some(a.reply);
        }
    }
    gate.close();
    while receive()
        .when(
            move |a: &Answer<S::Reply>| a.tag == tag,
            |_: Answer<S::Reply>| (),
        )
        .timeout(Duration::ZERO)
        .is_some()
    {}
    let (mut replies, mut bad) = (Vec::new(), Vec::new());
    for (&node, r) in nodes.iter().zip(got) {
        match r {
            Some(Some(reply)) => replies.push((node, reply)),
            _ => bad.push(node),
        }
    }
    (replies, bad)
}

/// A job for the courier.
type Job = Local<Box<dyn FnOnce() + Send>>;

/// The calling process's courier (see the module docs).
#[derive(Debug, Clone, Copy)]
struct Courier(Pid);

fn courier() -> Pid {
    if let Some(Courier(pid)) = graft::local::get::<Courier>() {
        if graft::is_alive(pid) {
            return pid;
        }
    }
    let owner = self_pid();
    let pid = spawn(move || {
        let m = monitor(owner);
        loop {
            let job = receive()
                .on(|Local(job): Job| Some(job))
                .when(move |d: &ProcessDied| d.monitor == m, |_: ProcessDied| None)
                .wait();
            match job {
                Some(job) => job(),
                None => return,
            }
        }
    });
    graft::local::set(Courier(pid));
    pid
}

/// Casts `msg` to the server registered as `name` on each of `nodes`
/// (OTP's `gen_server:abcast/3`); returns at once. Nodes that are down or
/// have no such server drop it silently.
///
/// # Panics
///
/// Outside a graft process.
pub fn abcast<S>(nodes: &[NodeId], name: &str, msg: S::Cast)
where
    S: GenServer,
    S::Cast: graft::Mobile + Clone,
{
    let nodes: Arc<[NodeId]> = nodes.into();
    let name = name.to_string();
    let job: Box<dyn FnOnce() + Send> = Box::new(move || {
        for &node in nodes.iter() {
            if let Ok(Some(pid)) = whereis_on(&name, node) {
                Server::<S>::from_pid(pid).cast(msg.clone());
            }
        }
    });
    send(courier(), Local(job));
}
