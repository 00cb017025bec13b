//! graft: Erlang/OTP-style processes for Rust, on plain OS threads.
//!
//! Processes are green threads (stackful coroutines on pooled, guarded
//! stacks) run by an M:N work-stealing scheduler. They share nothing and talk
//! by messages; they monitor and link to each other; a panic ends only the
//! process that panicked.
//!
//! ```
//! use graft::*;
//!
//! let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
//! let total = node.run(|| {
//!     let me = self_pid();
//!     for i in 0..10u64 {
//!         spawn(move || send(me, i * i));
//!     }
//!     (0..10).map(|_| expect::<u64>()).sum::<u64>()
//! }).unwrap();
//! assert_eq!(total, 285);
//! node.shutdown();
//! ```
//!
//! # Key concepts
//!
//! * [`Node`]: owns the scheduler threads, the timer, the blocking pool and
//!   every process. [`Node::run`] runs a root process and returns its value.
//! * [`Pid`]: names a process for ever (pids are never reused).
//! * Messages ([`Message`]): any [`Mobile`] value (`#[derive(Mobile)]`),
//!   moved (never encoded) on its node and encoded as a graph for another node;
//!   [`Local<T>`](Local) for values that must stay on their node. [`send`]
//!   never blocks; [`receive`] is selective (by type, then guard), [`expect`]
//!   takes the next message of one type.
//! * Distribution: [`Node::connect`] / [`connect`] join a full mesh over TCP
//!   (cookie-authenticated); [`spawn_on`] and [`call_on`] run a body on
//!   another node (its environment travels explicitly; the code reference is
//!   checked against the build); pids, monitors, links and registered names
//!   ([`send_to`]) work across nodes; losing a node is `NoConnection`.
//! * Mobile values and functions: [`graph`] (sharing and cycles kept,
//!   descriptors checked before decoding, [`graph::MobileFn`]).
//! * Failure: [`monitor`] gives [`ProcessDied`]; [`link`] ties lifetimes;
//!   [`trap_exits`] turns exit signals into [`ExitSignal`] messages;
//!   [`exit`](fn@exit) sends a signal.
//! * Typed channels: [`channel`](fn@channel) and [`bounded`] make a [`SendPort`] /
//!   [`ReceivePort`] pair (`bounded(0)` is a rendezvous). A process waiting
//!   on a port parks its green thread, never its worker; ports also work
//!   from plain OS threads. [`select`] and [`merge_ports`] read several ports
//!   fairly; [`ReceivePort::into_mailbox`] puts a port's messages in
//!   `receive()` clauses. A `SendPort` of a [`Mobile`] type is `Mobile`: it
//!   can be sent to another node and used there.
//! * [`promise`] makes a one-shot [`Promise`] / [`Future`] pair; a future
//!   keeps its value and may be waited on by many, before or after.
//! * [`Generator`]: a body that [`Yielder::yield_`]s values on its own
//!   pooled stack, consumed as an `Iterator`.
//! * [`park`] / [`Unparker`]: the wait primitive under all of these, for
//!   building more.
//!
//! # Processes move between threads
//!
//! A process may resume on another worker thread after any call that can
//! yield (`receive`, `expect`, `sleep`, `yield_now`, `blocking`, a `send`
//! that blocks on a full channel). **Never hold a `thread_local!` borrow, a
//! `std`/`parking_lot` lock guard, or any `!Send` value across such a call**:
//! the borrow would point into another thread's storage, and the guard would
//! be released on a thread that did not take it. Keep per-process state in
//! [`local`] (it moves with the process), or spawn with
//! [`spawn_opts`]`().pinned()` to stay on one worker.
//!
//! A process yields only at runtime calls: a loop that never makes one keeps
//! its worker (other workers steal the rest of the work). Put blocking
//! system calls in [`blocking`].
//!
//! Supervision needs unwinding: build with `panic = "unwind"` (the default).
//!
//! # What stays inside a process
//!
//! * A panic ends the process that panicked, with its message as the reason.
//! * An exit signal acted on is not an exception: a `catch_unwind` that
//!   swallows its unwind is overridden at the process's next runtime call,
//!   and when its body returns, by the same reason.
//! * A stack overflow (a fault in the guard page below a process stack) ends
//!   that process with [`ExitReason::StackOverflow`]; links, monitors and
//!   supervisors see it like any crash. **Its frames are abandoned, not
//!   unwound: their destructors do not run**, so heap memory they owned
//!   leaks and a lock held at that moment stays held. The log line names the
//!   process, its initial call and its stack size; give it a larger
//!   [`spawn_opts`]`().stack_size(..)`. An overflow of an OS thread's own
//!   stack is reported by std and aborts, as in any Rust program.
//! * A panic in the `Drop` of a message that could not be delivered (its
//!   receiver is dead) is logged; the sender goes on.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

// `#[derive(Mobile)]` names `::graft::...`; let it work inside this crate too.
extern crate self as graft;

mod alias;
mod api;
mod arrivals;
mod channel;
mod context;
mod coroutine;
pub mod discovery;
mod dist;
mod error;
mod exit;
mod future;
mod generator;
pub mod graph;
mod hibernate;
mod limits;
mod loom;
mod message;
mod netmon;
mod node;
pub mod observe;
pub mod observer;
mod overflow;
pub mod overlay;
mod pid;
mod process;
pub mod report;
mod sched;
pub mod signal;
mod stack;
mod stats;
mod sysmon;
mod table;
mod wakeup;

#[doc(hidden)]
pub use api::spawn_encoded_on;

pub use alias::{
    alias, receive_response, reply, request, send_alias, send_request, unalias, Alias,
    RequestError, RequestId,
};
pub use api::demonitor_flush_after;
pub use api::{
    blocking, call_on, cancel_timer, connect, demonitor, demonitor_flush, disconnect, exit,
    exit_self, is_alive, link, local, mailbox_len, make_ref, monitor, node_name, nodes,
    process_count, process_info, process_status, processes, register, registered, self_exit_reason,
    self_pid, send, send_after, send_to, sleep, spawn, spawn_link, spawn_link_on, spawn_monitor,
    spawn_on, spawn_opts, terminate, this_node, trap_exits, try_self_pid, unlink, unregister,
    whereis, whereis_on, yield_now, Dest, Message, ProcessInfo, SpawnOpts,
};
pub use channel::{
    bounded, channel, merge_ports, select, select_timeout, MergedPorts, PortClosed, PortId,
    PortIntoIter, PortIter, PortMessage, PortTryIter, ReceivePort, RecvError, RecvTimeoutError,
    SendError, SendPort, SendTimeoutError, TryRecvError, TrySendError,
};
pub use error::Error;
pub use exit::{ExitReason, ExitSignal, ProcessDied};
pub use future::{promise, Future, Promise, PromiseDropped, WaitTimeoutError};
pub use generator::{Generator, GeneratorState, Yielder};
pub use graft_derive::Mobile;
pub use graft_net::TlsConfig;
pub use graph::Mobile;
pub use hibernate::hibernate;
pub use limits::{dropped_messages, Overflow};
pub use message::Local;
pub use netmon::{
    connect_name, monitor_name, monitor_node, monitor_nodes, testing, AutoConnect, NodeDown, NodeUp,
};
pub use node::{Node, NodeConfig};
pub use overlay::Topology;
pub use pid::{MonitorRef, NodeId, Pid};
pub use process::receive::{expect, expect_timeout, mark, receive, Mark, Receive, Unknown};
pub use process::state::Status;
pub use sched::timer::TimerRef;
pub use stack::{ensure_map_count, max_map_count};
pub use sysmon::{system_monitor, system_monitor_off, SysMonConfig, SysMonEvent};
pub use wakeup::{park, park_until, Unparker};

/// The receive clause types (named in signatures only).
pub mod clause {
    pub use crate::process::receive::{Any, Clause, Clauses, On, When};
    #[doc(hidden)]
    pub use crate::process::Mail;
}

/// The concurrent protocols, exposed for the loom models in
/// `graft-loom-tests`. Not part of the API.
#[doc(hidden)]
pub mod __loom {
    pub use crate::process::mailbox::{Drained, Mailbox};
    pub use crate::process::state::ProcState;
    pub use crate::sched::idle::{Idle, Parker, Quiet};
    pub use crate::sched::run_queue::Slot;
    pub use crate::sched::spare::Spare;
}
