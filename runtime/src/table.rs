//! The process table and the name registry of one node.
//!
//! The table maps a pid's serial to its process. It is sharded by serial so
//! that concurrent spawns, sends and exits on different workers rarely meet
//! on one lock; a local send holds a shard's read lock only for the lookup.

use crate::loom::RwLock;
use crate::pid::Pid;
use crate::process::Process;
use ahash::AHashMap;
use std::sync::Arc;

const SHARDS: usize = 64;

/// serial -> process, in `SHARDS` shards.
#[derive(Debug)]
pub(crate) struct ProcessTable {
    shards: Vec<RwLock<AHashMap<u64, Arc<Process>>>>,
}

impl ProcessTable {
    pub(crate) fn new() -> ProcessTable {
        ProcessTable {
            shards: (0..SHARDS).map(|_| RwLock::new(AHashMap::new())).collect(),
        }
    }

    #[inline]
    fn shard(&self, serial: u64) -> &RwLock<AHashMap<u64, Arc<Process>>> {
        &self.shards[(serial as usize) % SHARDS]
    }

    pub(crate) fn insert(&self, p: Arc<Process>) {
        let s = p.pid.serial();
        self.shard(s).write().insert(s, p);
    }

    pub(crate) fn remove(&self, serial: u64) -> Option<Arc<Process>> {
        self.shard(serial).write().remove(&serial)
    }

    #[inline]
    pub(crate) fn get(&self, serial: u64) -> Option<Arc<Process>> {
        self.shard(serial).read().get(&serial).cloned()
    }

    /// Runs `f` on the process under the shard's read lock (no refcount
    /// traffic on the hot send path).
    #[inline]
    pub(crate) fn with<R>(&self, serial: u64, f: impl FnOnce(&Arc<Process>) -> R) -> Option<R> {
        self.shard(serial).read().get(&serial).map(f)
    }

    /// Every live pid.
    pub(crate) fn pids(&self) -> Vec<Pid> {
        let mut v = Vec::new();
        for s in &self.shards {
            v.extend(s.read().values().map(|p| p.pid));
        }
        v.sort();
        v
    }

    /// Runs `f` on every live process (shard by shard, under its read lock:
    /// `f` must not touch the table).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Arc<Process>)) {
        for s in &self.shards {
            for p in s.read().values() {
                f(p);
            }
        }
    }

    /// Takes every process out (node shutdown).
    pub(crate) fn drain(&self) -> Vec<Arc<Process>> {
        let mut v = Vec::new();
        for s in &self.shards {
            v.extend(s.write().drain().map(|(_, p)| p));
        }
        v
    }
}

/// name -> pid.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    names: RwLock<AHashMap<String, Pid>>,
}

impl Registry {
    pub(crate) fn lookup(&self, name: &str) -> Option<Pid> {
        self.names.read().get(name).copied()
    }

    /// Inserts unless taken; `check` runs under the write lock and may veto.
    pub(crate) fn insert_with(
        &self,
        name: &str,
        pid: Pid,
        check: impl FnOnce() -> Result<(), crate::Error>,
    ) -> Result<(), crate::Error> {
        let mut names = self.names.write();
        if names.contains_key(name) {
            return Err(crate::Error::NameTaken(name.to_string()));
        }
        check()?;
        names.insert(name.to_string(), pid);
        Ok(())
    }

    /// Removes `name` if it still names `pid`.
    pub(crate) fn remove_if(&self, name: &str, pid: Pid) {
        let mut names = self.names.write();
        if names.get(name) == Some(&pid) {
            names.remove(name);
        }
    }

    /// Removes `name`, returning who had it.
    pub(crate) fn remove(&self, name: &str) -> Option<Pid> {
        self.names.write().remove(name)
    }

    pub(crate) fn names(&self) -> Vec<(String, Pid)> {
        let mut v: Vec<_> = self
            .names
            .read()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        v.sort();
        v
    }
}
