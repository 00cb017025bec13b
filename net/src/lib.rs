//! graft-net: bytes and peers. Knows nothing of processes.
#![forbid(unsafe_code)]
