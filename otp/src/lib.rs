//! graft-otp: OTP behaviours on graft.
#![forbid(unsafe_code)]

pub use graft;
