//! graft-otp: OTP behaviours on graft: `gen_server` and supervisor trees.
//!
//! Everything here is ordinary library code on graft's public API (it is
//! re-exported as [`graft`]): a behaviour is a process running a loop of
//! selective receives, as in Erlang/OTP.
//!
//! ```
//! use graft_otp::prelude::*;
//! use std::time::Duration;
//!
//! /// The paper's counter server.
//! #[derive(Default)]
//! struct Counter(i64);
//!
//! impl GenServer for Counter {
//!     type Call = ();      // "what is the count?"
//!     type Cast = i64;     // "add this"
//!     type Reply = i64;
//!     fn handle_call(&mut self, _: (), _from: &ReplyTo<i64>) -> CallResult<i64> {
//!         CallResult::Reply(self.0)
//!     }
//!     fn handle_cast(&mut self, n: i64) -> Flow {
//!         self.0 += n;
//!         Flow::Continue
//!     }
//! }
//!
//! let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
//! let total = node.run(|| {
//!     let sup = Supervisor::new(Strategy::OneForOne)
//!         .intensity(3, Duration::from_secs(5))
//!         .child(ChildSpec::server("counter", Counter::default))
//!         .start()
//!         .unwrap();
//!     let counter = Server::<Counter>::from_pid(supervisor::get_child(sup, "counter").unwrap());
//!     counter.cast(40);
//!     counter.cast(2);
//!     counter.call(()).unwrap()
//! }).unwrap();
//! assert_eq!(total, 42);
//! node.shutdown();
//! ```
//!
//! # Contents
//!
//! * [`application`]: [`Application`](application::Application) (OTP's
//!   application behaviour) and the [`Runner`](application::Runner) a
//!   program's `main` calls: it starts the node from config and environment,
//!   the applications in dependency order, and stops their trees in reverse
//!   order on SIGTERM, SIGINT or [`application::stop`]. Start long-lived
//!   trees here: a tree started inside [`Node::run`](graft::Node::run) stops
//!   when its closure returns.
//! * [`gen_server`]: the [`GenServer`](gen_server::GenServer) trait, the
//!   [`Protocol`](gen_server::Protocol) a client names, the typed
//!   [`Server`](gen_server::Server) handle (`at`, `call`, `call_timeout`,
//!   `cast`, `stop`) with its typed [`CallError`](gen_server::CallError),
//!   `start`, `start_named`, `start_with` ([`StartOpts`](gen_server::StartOpts)),
//!   `start_on` (another node), `continue_with`, `run`.
//! * [`supervisor`]: [`Supervisor`](supervisor::Supervisor) with
//!   [`ChildSpec`](supervisor::ChildSpec)s (local, named, or on another
//!   node), strategies, restart types, intensity (OTP's default: 1 restart
//!   in 5 s), shutdown policies; the calls to a running supervisor
//!   (`start_child`, `terminate_child`, `restart_child`, `delete_child`,
//!   `which_children`, `get_child`, `count_children`); and
//!   [`DynamicSupervisor`](supervisor::DynamicSupervisor) for many children
//!   of one template.
//! * [`gen_statem`]: state machines ([`GenStatem`](gen_statem::GenStatem)),
//!   OTP's gen_statem: both callback modes, enter calls, postpone, event,
//!   state and generic timeouts, inserted events, across nodes.
//! * [`gen_server_multi`]: `multi_call` and `abcast` to a named gen_server
//!   on a set of nodes.
//! * [`task`]: Elixir's `Task` (`spawn` and `await_timeout`,
//!   `async_stream`, [`TaskSupervisor`](task::TaskSupervisor)).
//! * [`erpc`]: `call`, `cast` and `multicall` of mobile functions on other
//!   nodes.
//! * [`prelude`]: the names nearly every program imports.
//! * The runtime, re-exported: [`graft`] whole, and at this crate's root
//!   the items a program names most ([`graph`], [`MobileFn`], [`mobile_fn!`],
//!   [`registered`], [`SpawnOpts`], [`ProcessInfo`], ...), so that a crate
//!   depending on graft-otp alone needs no `graft` dependency (the derive
//!   finds graft through graft-otp by itself).
//!
//! Everything works across nodes: `gen_server::start_on`,
//! `ChildSpec::server_on` (a child on another node, restarted there),
//! `Server::at((name, node))`, and calls and casts to a server anywhere.
#![forbid(unsafe_code)]

pub mod erpc;

pub mod application;
mod call;
pub mod gen_server;
pub mod gen_server_multi;
pub mod gen_statem;
pub mod global;
pub mod pg;
pub mod prelude;
pub mod supervisor;
pub mod sys;
pub mod task;

pub use graft;
// What a user of graft-otp alone reaches without naming `graft`: the graph
// layer (mobile values and functions) and the runtime's own items.
pub use graft::graph;
pub use graft::graph::{MobileFn, MobileFnOnce};
pub use graft::{
    call_on, channel, clause, local, mobile_fn, mobile_fn_once, node_name, process_info,
    registered, spawn_on, Dest, Error, ExitReason, Message, Mobile, Node, NodeConfig, NodeId, Pid,
    ProcessInfo, SpawnOpts,
};
pub use graft::{signal, Local, MonitorRef, TimerRef, Unknown};
