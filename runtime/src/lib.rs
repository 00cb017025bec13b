//! graft: Erlang/OTP-style processes for Rust.
#![deny(unsafe_op_in_unsafe_fn)]

mod pid;

pub use pid::{MonitorRef, NodeId, Pid};
