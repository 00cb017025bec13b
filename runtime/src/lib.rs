//! graft: Erlang/OTP-style processes for Rust.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod graph;
mod pid;

pub use graft_derive::Mobile;
pub use graph::Mobile;
pub use pid::{MonitorRef, NodeId, Pid};
