//! Registered names on this node.

use crate::context;
use crate::error::Error;
use crate::pid::Pid;

/// Registers `pid` under `name` on this node.
///
/// # Errors
///
/// `NameTaken` if another process holds the name, `AlreadyRegistered` if
/// `pid` has a name, `NoProc` if `pid` is not alive here, `NotInProcess`
/// outside a process.
pub fn register(name: &str, pid: Pid) -> Result<(), Error> {
    let Some(w) = context::worker() else {
        return Err(Error::NotInProcess("register"));
    };
    let n = &w.node;
    if !n.is_local(pid) || pid.creation() != n.creation {
        return Err(Error::NoProc(pid));
    }
    let Some(p) = n.table.get(pid.serial()) else {
        return Err(Error::NoProc(pid));
    };
    n.registry.insert_with(name, pid, || {
        let mut m = p.meta.lock();
        if m.exited {
            return Err(Error::NoProc(pid));
        }
        if let Some(old) = &m.name {
            return Err(Error::AlreadyRegistered(pid, old.clone()));
        }
        m.name = Some(name.to_string());
        Ok(())
    })
}

/// Removes a registered name; returns who had it.
pub fn unregister(name: &str) -> Option<Pid> {
    let w = context::worker()?;
    let pid = w.node.registry.remove(name)?;
    w.node.table.with(pid.serial(), |p| {
        let mut m = p.meta.lock();
        if m.name.as_deref() == Some(name) {
            m.name = None;
        }
    });
    Some(pid)
}

/// The pid registered under `name` on this node.
pub fn whereis(name: &str) -> Option<Pid> {
    context::worker()?.node.registry.lookup(name)
}

/// Every registered name on this node, sorted.
pub fn registered() -> Vec<(String, Pid)> {
    context::worker().map_or_else(Vec::new, |w| w.node.registry.names())
}
