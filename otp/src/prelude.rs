//! The names nearly every graft program uses: `use graft_otp::prelude::*;`.
//!
//! The process calls and types of [`graft`] (spawn, send, receive, monitors,
//! links, names, time), and the OTP behaviours: [`GenServer`] with its
//! [`Server`] handle and callback results, and [`Supervisor`] with
//! [`ChildSpec`]. The modules [`gen_server`] and [`supervisor`] are in
//! scope too, for their functions (`gen_server::start`,
//! `supervisor::which_children`, ...).
//!
//! ```
//! use graft_otp::prelude::*;
//!
//! let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
//! let v = node.run(|| {
//!     let me = self_pid();
//!     spawn(move || send(me, 7u8));
//!     expect::<u8>()
//! }).unwrap();
//! assert_eq!(v, 7);
//! node.shutdown();
//! ```

pub use crate::application::{self, Application};
pub use crate::gen_server::{
    self, CallError, CallResult, Continue, Flow, GenServer, Protocol, ReplyTo, Server, StartError,
    StartOpts,
};
pub use crate::supervisor::{
    self, ChildKind, ChildSpec, DynamicSupervisor, Restart, Shutdown, Strategy, Supervisor,
};
pub use crate::sys;
pub use graft::graph::{MobileFn, MobileFnOnce};
pub use graft::{
    blocking, call_on, connect, disconnect, mobile_fn, mobile_fn_once, node_name, nodes,
    process_info, processes, registered, spawn_link_on, spawn_on, whereis_on, ProcessInfo,
    SpawnOpts,
};
pub use graft::{
    demonitor, demonitor_flush, exit, exit_self, expect, expect_timeout, is_alive, link, make_ref,
    monitor, receive, register, self_pid, send, send_after, send_to, sleep, spawn, spawn_link,
    spawn_monitor, spawn_opts, terminate, this_node, trap_exits, unlink, unregister, whereis,
    yield_now, Error, ExitReason, ExitSignal, Local, Message, Mobile, MonitorRef, Node, NodeConfig,
    NodeId, Pid, ProcessDied, Unknown,
};
pub use graft::{demonitor_flush_after, mark, Mark};
