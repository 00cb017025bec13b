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
//! * [`gen_server`]: the [`GenServer`](gen_server::GenServer) trait, the
//!   typed [`Server`](gen_server::Server) handle (`call`, `call_timeout`,
//!   `cast`, `stop`), `start`, `start_named`, `run`.
//! * [`supervisor`]: [`Supervisor`](supervisor::Supervisor) with
//!   [`ChildSpec`](supervisor::ChildSpec)s, strategies, restart types,
//!   intensity, shutdown policies; the calls to a running supervisor
//!   (`start_child`, `terminate_child`, `restart_child`, `delete_child`,
//!   `which_children`, `get_child`, `count_children`); and
//!   [`DynamicSupervisor`](supervisor::DynamicSupervisor) for many children
//!   of one template.
//! * [`prelude`]: the names nearly every program imports.
//!
//! # Not yet
//!
//! The remote parts (`gen_server::start_on`, children on other nodes) wait
//! for graft's distribution layer.
#![forbid(unsafe_code)]

pub mod gen_server;
pub mod prelude;
pub mod supervisor;
pub mod sys;

pub use graft;
