//! Who monitors a process: (monitor reference, watcher) pairs, kept in the
//! process's `meta` (under its lock).
//!
//! Most processes have no watcher, or a few: then this is one word (`None`)
//! or a short vector searched from the front, as before. A server with many
//! callers in a call holds one watcher per waiting caller, and every reply
//! (and every demonitor) ends one, so a linear search made each call cost
//! O(callers): at 1,000 callers, the search was a sixth of all CPU time.
//! Past [`INDEX_AT`] entries a hash index by reference makes the removal
//! O(1) (Erlang keeps a process's monitors in a tree for the same reason);
//! it is dropped again when the list shrinks to half that.
//!
//! While indexed, references are unique: a second monitor with a reference
//! already present (only a confused or hostile peer makes one; our own
//! references are never reused) is not added, which is what Erlang's
//! monitor tree does too. In the short, unindexed form a duplicate is kept
//! and removed by the first search that finds it.

use crate::pid::{MonitorRef, Pid};
use ahash::AHashMap;

/// Entries past which removals by reference go through a hash index.
pub(crate) const INDEX_AT: usize = 32;

/// A process's watchers; see the module doc.
#[derive(Debug, Default)]
pub(crate) struct Watchers(Option<Box<Inner>>);

#[derive(Debug, Default)]
struct Inner {
    list: Vec<(MonitorRef, Pid)>,
    /// Position in `list` of each reference; empty while `list` is short.
    index: AHashMap<MonitorRef, usize>,
}

impl Inner {
    fn indexed(&self) -> bool {
        !self.index.is_empty()
    }

    /// Builds the index, dropping later duplicates of a reference.
    fn build_index(&mut self) {
        let mut index = AHashMap::with_capacity(self.list.len() * 2);
        self.list.retain(|&(r, _)| {
            let fresh = !index.contains_key(&r);
            if fresh {
                index.insert(r, index.len());
            }
            fresh
        });
        self.index = index;
    }

    fn find(&self, r: MonitorRef) -> Option<usize> {
        if self.indexed() {
            self.index.get(&r).copied()
        } else {
            self.list.iter().position(|&(wr, _)| wr == r)
        }
    }

    fn remove_at(&mut self, i: usize) -> (MonitorRef, Pid) {
        let gone = self.list.swap_remove(i);
        if self.indexed() {
            self.index.remove(&gone.0);
            if let Some(&(moved, _)) = self.list.get(i) {
                self.index.insert(moved, i);
            }
            if self.list.len() <= INDEX_AT / 2 {
                self.index = AHashMap::new();
            }
        }
        gone
    }
}

impl Watchers {
    /// Adds monitor `r` of `watcher`.
    pub(crate) fn push(&mut self, (r, watcher): (MonitorRef, Pid)) {
        let inner = self.0.get_or_insert_with(Default::default);
        if inner.indexed() {
            if inner.index.contains_key(&r) {
                return;
            }
            inner.index.insert(r, inner.list.len());
            inner.list.push((r, watcher));
        } else {
            inner.list.push((r, watcher));
            if inner.list.len() > INDEX_AT {
                inner.build_index();
            }
        }
    }

    /// Removes monitor `r`, whoever holds it; returns its watcher.
    pub(crate) fn remove(&mut self, r: MonitorRef) -> Option<Pid> {
        let inner = self.0.as_mut()?;
        let i = inner.find(r)?;
        Some(inner.remove_at(i).1)
    }

    /// Removes monitor `r` if `watcher` holds it.
    pub(crate) fn remove_of(&mut self, r: MonitorRef, watcher: Pid) -> bool {
        let Some(inner) = self.0.as_mut() else {
            return false;
        };
        match inner.find(r) {
            Some(i) if inner.list[i].1 == watcher => {
                inner.remove_at(i);
                true
            }
            _ => false,
        }
    }

    pub(crate) fn iter(&self) -> std::slice::Iter<'_, (MonitorRef, Pid)> {
        self.0.as_deref().map_or(&[][..], |i| &i.list[..]).iter()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |i| i.list.len())
    }
}

impl IntoIterator for Watchers {
    type Item = (MonitorRef, Pid);
    type IntoIter = std::vec::IntoIter<(MonitorRef, Pid)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.map(|b| b.list).unwrap_or_default().into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pid::NodeId;

    fn r(i: u64) -> MonitorRef {
        MonitorRef::new(NodeId(1), i)
    }
    fn p(i: u64) -> Pid {
        Pid::new(NodeId(1), 1, i)
    }

    /// The index and the list agree after every step of a long mixed run,
    /// across the thresholds both ways.
    #[test]
    fn index_stays_in_step_with_the_list() {
        let mut w = Watchers::default();
        let mut model: Vec<(MonitorRef, Pid)> = Vec::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = 0;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let grow = model.len() < 100 && (!x.is_multiple_of(3) || model.is_empty());
            if grow {
                next += 1;
                w.push((r(next), p(next)));
                model.push((r(next), p(next)));
            } else {
                let k = model.swap_remove((x as usize / 3) % model.len());
                assert_eq!(w.remove(k.0), Some(k.1));
                assert_eq!(w.remove(k.0), None, "removed once");
            }
            assert_eq!(w.len(), model.len());
            if let Some(inner) = &w.0 {
                if inner.indexed() {
                    assert_eq!(inner.index.len(), inner.list.len());
                    for (i, (wr, _)) in inner.list.iter().enumerate() {
                        assert_eq!(inner.index[wr], i);
                    }
                }
            }
        }
        let mut left: Vec<_> = w.into_iter().collect();
        left.sort();
        model.sort();
        assert_eq!(left, model);
    }

    #[test]
    fn remove_of_checks_the_watcher() {
        let mut w = Watchers::default();
        for i in 0..50 {
            w.push((r(i), p(i)));
        }
        assert!(!w.remove_of(r(7), p(8)));
        assert!(w.remove_of(r(7), p(7)));
        assert!(!w.remove_of(r(7), p(7)));
        assert_eq!(w.len(), 49);
    }

    /// A reference pushed twice is kept once once indexed (a peer's
    /// duplicate monitor), and short lists keep both as before.
    #[test]
    fn duplicates() {
        let mut w = Watchers::default();
        w.push((r(1), p(1)));
        w.push((r(1), p(1)));
        assert_eq!(w.len(), 2);
        for i in 2..40 {
            w.push((r(i), p(i)));
        }
        assert_eq!(w.len(), 39, "the duplicate went when the index was built");
        w.push((r(5), p(9)));
        assert_eq!(w.len(), 39);
        assert_eq!(w.remove(r(5)), Some(p(5)));
        assert_eq!(w.remove(r(5)), None);
    }
}
