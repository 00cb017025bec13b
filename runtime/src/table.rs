//! The process table and the name registry of one node.
//!
//! The table maps a pid's serial to its process. Serials are handed out in
//! increasing order (in blocks of 1,024 per worker) and never reused, so the
//! table is paged by serial: a *chunk* holds the entries of 64 consecutive
//! serials, a slot per serial, and a shard maps chunk numbers to chunks.
//! A burst of spawns fills neighbouring slots of one chunk (eight entries to
//! a cache line) instead of scattering over a hash table of a million
//! buckets, and a lookup is one probe in a small map (a few hundred chunks a
//! shard at a million processes: it stays in cache) plus one slot. A chunk
//! goes once its last process has exited (each shard keeps one emptied
//! chunk for its next new one). Because a serial is never given twice, a
//! slot only ever holds one process: a pid of a process that has exited
//! finds an empty slot or no chunk, never a newer process.
//!
//! Shards (by chunk) keep concurrent spawns, sends and exits on different
//! workers from meeting on one lock; a local send holds a shard's read lock
//! only for the lookup.
//!
//! Memory: an entry costs a slot (8 bytes) while its chunk lives; at worst,
//! one survivor keeps a whole chunk (520 bytes), an eighth of the stack page
//! every process holds anyway.

use crate::loom::RwLock;
use crate::pid::Pid;
use crate::process::Process;
use ahash::AHashMap;
use std::sync::Arc;

const SHARDS: usize = 64;
/// Serials per chunk (a power of two).
const CHUNK_BITS: u32 = 6;
const CHUNK: usize = 1 << CHUNK_BITS;

/// The entries of `CHUNK` consecutive serials.
#[derive(Debug)]
struct Chunk {
    /// Slots holding a process.
    live: u32,
    slots: [Option<Arc<Process>>; CHUNK],
}

impl Chunk {
    fn new() -> Box<Chunk> {
        Box::new(Chunk {
            live: 0,
            slots: [const { None }; CHUNK],
        })
    }
}

/// One shard: chunk number -> chunk, and one emptied chunk kept for the
/// next new one. Processes that spawn and end one after another (a remote
/// spawn's reply, a short task) empty their chunk at every exit and need a
/// new one at the next spawn: without the spare that was an allocation, 520
/// bytes zeroed and 64 slots checked in the drop, for every spawn.
#[derive(Debug, Default)]
struct Shard {
    chunks: AHashMap<u64, Box<Chunk>>,
    spare: Option<Box<Chunk>>,
}

/// serial -> process, paged by serial, in `SHARDS` shards (module docs).
#[derive(Debug)]
pub(crate) struct ProcessTable {
    shards: Vec<RwLock<Shard>>,
}

/// The chunk number and the slot of `serial`.
#[inline]
fn place(serial: u64) -> (u64, usize) {
    (serial >> CHUNK_BITS, (serial as usize) & (CHUNK - 1))
}

impl ProcessTable {
    pub(crate) fn new() -> ProcessTable {
        ProcessTable {
            shards: (0..SHARDS).map(|_| RwLock::new(Shard::default())).collect(),
        }
    }

    #[inline]
    fn shard(&self, chunk: u64) -> &RwLock<Shard> {
        &self.shards[(chunk as usize) % SHARDS]
    }

    pub(crate) fn insert(&self, p: Arc<Process>) {
        let (c, i) = place(p.pid.serial());
        let mut shard = self.shard(c).write();
        let Shard { chunks, spare } = &mut *shard;
        let chunk = chunks
            .entry(c)
            .or_insert_with(|| spare.take().unwrap_or_else(Chunk::new));
        if chunk.slots[i].replace(p).is_none() {
            chunk.live += 1;
        } else {
            debug_assert!(false, "a serial was given twice");
        }
    }

    pub(crate) fn remove(&self, serial: u64) -> Option<Arc<Process>> {
        let (c, i) = place(serial);
        let mut shard = self.shard(c).write();
        let chunk = shard.chunks.get_mut(&c)?;
        let p = chunk.slots[i].take()?;
        chunk.live -= 1;
        if chunk.live == 0 {
            // Empty now: kept as the spare, or freed under the lock (an
            // empty chunk holds nothing whose drop could run user code).
            let empty = shard.chunks.remove(&c);
            if shard.spare.is_none() {
                shard.spare = empty;
            }
        }
        Some(p)
    }

    #[inline]
    pub(crate) fn get(&self, serial: u64) -> Option<Arc<Process>> {
        self.with(serial, Arc::clone)
    }

    /// Runs `f` on the process under the shard's read lock (no refcount
    /// traffic on the hot send path).
    #[inline]
    pub(crate) fn with<R>(&self, serial: u64, f: impl FnOnce(&Arc<Process>) -> R) -> Option<R> {
        let (c, i) = place(serial);
        self.shard(c).read().chunks.get(&c)?.slots[i]
            .as_ref()
            .map(f)
    }

    /// Every live pid.
    pub(crate) fn pids(&self) -> Vec<Pid> {
        let mut v = Vec::new();
        self.for_each(|p| v.push(p.pid));
        v.sort();
        v
    }

    /// Runs `f` on every live process (shard by shard, under its read lock:
    /// `f` must not touch the table).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Arc<Process>)) {
        for s in &self.shards {
            for chunk in s.read().chunks.values() {
                chunk.slots.iter().flatten().for_each(&mut f);
            }
        }
    }

    /// Takes every process out (node shutdown).
    pub(crate) fn drain(&self) -> Vec<Arc<Process>> {
        let mut v = Vec::new();
        for s in &self.shards {
            for (_, mut chunk) in s.write().chunks.drain() {
                v.extend(chunk.slots.iter_mut().filter_map(Option::take));
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pid::NodeId;

    fn proc_of(serial: u64) -> Arc<Process> {
        let guard = crate::stack::Guard {
            lo: 0,
            len: 0,
            size: 0,
        };
        let pid = Pid::new(NodeId(1), 7, serial);
        Arc::new(Process::new(pid, None, false, guard))
    }

    #[test]
    fn entries_are_found_by_serial_and_chunks_go_when_empty() {
        let t = ProcessTable::new();
        let serials: Vec<u64> = (0..300).chain([1 << 40, u64::MAX - 3]).collect();
        for &s in &serials {
            t.insert(proc_of(s));
        }
        for &s in &serials {
            assert_eq!(t.get(s).map(|p| p.pid.serial()), Some(s));
        }
        assert!(t.get(300).is_none(), "never inserted");
        assert_eq!(t.pids().len(), serials.len());
        for &s in &serials {
            assert_eq!(t.remove(s).map(|p| p.pid.serial()), Some(s));
            assert!(t.remove(s).is_none(), "removed once");
        }
        let chunks: usize = t.shards.iter().map(|s| s.read().chunks.len()).sum();
        assert_eq!(chunks, 0, "every chunk freed with its last entry");
    }

    #[test]
    fn an_emptied_chunk_is_kept_once_per_shard_and_reused() {
        let t = ProcessTable::new();
        let spares =
            |t: &ProcessTable| t.shards.iter().filter(|s| s.read().spare.is_some()).count();
        // Spawned and ended one after another: the chunk is kept, then reused.
        for s in 0..10 {
            t.insert(proc_of(s));
            assert_eq!(spares(&t), 0, "the spare was taken");
            t.remove(s);
            assert_eq!(spares(&t), 1, "the emptied chunk was kept");
        }
        // Chunks 0 and SHARDS share shard 0: emptying both keeps one.
        let far = (SHARDS * CHUNK) as u64;
        t.insert(proc_of(20));
        t.insert(proc_of(far));
        t.remove(20);
        t.remove(far);
        assert_eq!(spares(&t), 1);
        let chunks: usize = t.shards.iter().map(|s| s.read().chunks.len()).sum();
        assert_eq!(chunks, 0);
        assert!(t.get(20).is_none() && t.get(far).is_none());
    }

    #[test]
    fn an_exited_serial_never_names_a_newer_process() {
        let t = ProcessTable::new();
        // 10 and 11 share a chunk: 10 exits, 11 lives on, 12 is new.
        t.insert(proc_of(10));
        t.insert(proc_of(11));
        t.remove(10);
        t.insert(proc_of(12));
        assert!(t.get(10).is_none());
        assert!(t.with(10, |_| ()).is_none());
        assert_eq!(t.get(11).map(|p| p.pid.serial()), Some(11));
        assert_eq!(t.get(12).map(|p| p.pid.serial()), Some(12));
        let drained: Vec<u64> = t.drain().iter().map(|p| p.pid.serial()).collect();
        assert_eq!(drained.len(), 2);
        assert!(t.get(11).is_none() && t.get(12).is_none());
    }
}
