//! The web observer (stub while being written).

use crate::node::NodeShared;
use std::sync::Arc;

/// How to serve the web observer.
#[derive(Clone, Debug)]
pub struct ObserverConfig {
    pub(crate) addr: String,
    pub(crate) token: Option<String>,
}

impl ObserverConfig {
    /// Serve on `addr`.
    pub fn new(addr: &str) -> ObserverConfig {
        ObserverConfig {
            addr: addr.to_string(),
            token: None,
        }
    }
}

pub(crate) fn start(_n: &Arc<NodeShared>, _cfg: &ObserverConfig) -> std::io::Result<()> {
    Ok(())
}
