//! The folder manager and its scanner.
//!
//! The folder manager owns the set of tracked files: it starts one tracker
//! per path (on a local change or a remote announcement, whichever comes
//! first) and routes each event to it. Trackers are linked to it, so if
//! one crashes the folder restarts (under the supervisor) with a fresh
//! scan, and the trackers rebuild their state from disk and from peers.
//!
//! The scanner polls the directory through the accessor every period and
//! hands the listing to the folder manager, which asks a tracker to look
//! at its file when the file is new, its size or modification time
//! changed, or it is missing while the tracker holds content for it (the
//! last case catches a file that was written by a fetch and removed again
//! between two scans).

use super::accessor::{self, Done, Entry, Op};
use super::tracker::{self, Tracker};
use super::Announce;
use graft_otp::prelude::*;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// The name it registers.
const NAME: &str = "folder";

/// What the folder manager is told.
#[derive(Debug)]
pub(crate) enum FolderMsg {
    /// The scanner's latest listing.
    Listing(Vec<Entry>),
    /// A tracker holds content for `path` (or not).
    Holds(String, bool),
    /// A peer announced a version of a file.
    Remote(Announce),
}
impl Message for FolderMsg {}

/// The folder manager's state.
pub(crate) struct Folder {
    every: Duration,
    trackers: HashMap<String, Server<Tracker>>,
    /// The previous listing: path -> (size, mtime).
    seen: HashMap<String, (u64, u128)>,
    /// Paths whose tracker holds content.
    holds: HashSet<String>,
}

impl Folder {
    fn tracker(&mut self, path: &str) -> Option<Server<Tracker>> {
        if let Some(t) = self.trackers.get(path) {
            return Some(*t);
        }
        match tracker::start(path.to_string()) {
            Ok(t) => {
                self.trackers.insert(path.to_string(), t);
                Some(t)
            }
            Err(e) => {
                super::event(format!("cannot track {path}: {e}"));
                None
            }
        }
    }
}

impl GenServer for Folder {
    type Call = ();
    type Cast = FolderMsg;
    type Reply = usize;

    fn init(&mut self) -> Result<(), ExitReason> {
        let me = self_pid();
        let every = self.every;
        spawn_link(move || scanner(me, every));
        Ok(())
    }

    fn handle_call(&mut self, _: (), _: &ReplyTo<usize>) -> CallResult<usize> {
        CallResult::Reply(self.trackers.len())
    }

    fn handle_cast(&mut self, msg: FolderMsg) -> Flow {
        match msg {
            FolderMsg::Listing(list) => {
                let now: HashMap<String, (u64, u128)> = list
                    .into_iter()
                    .map(|(p, size, mtime)| (p, (size, mtime)))
                    .collect();
                let mut look: Vec<String> = now
                    .iter()
                    .filter(|(p, v)| self.seen.get(*p) != Some(*v))
                    .map(|(p, _)| p.clone())
                    .collect();
                look.extend(
                    self.seen
                        .keys()
                        .chain(self.holds.iter())
                        .filter(|p| !now.contains_key(*p))
                        .cloned()
                        .collect::<HashSet<_>>(),
                );
                for p in look {
                    if let Some(t) = self.tracker(&p) {
                        t.cast(tracker::TrackerMsg::Scan);
                    }
                }
                self.seen = now;
            }
            FolderMsg::Holds(p, true) => {
                self.holds.insert(p);
            }
            FolderMsg::Holds(p, false) => {
                self.holds.remove(&p);
            }
            FolderMsg::Remote(a) => {
                if let Some(t) = self.tracker(&a.path) {
                    t.cast(tracker::TrackerMsg::Remote(a));
                }
            }
        }
        Flow::Continue
    }
}

/// Polls the folder and hands each listing to the folder manager.
fn scanner(folder: Pid, every: Duration) {
    let folder = Server::<Folder>::from_pid(folder);
    loop {
        if let Ok(Done::Listing(list)) = accessor::call(Op::List) {
            folder.cast(FolderMsg::Listing(list));
        }
        sleep(every);
    }
}

/// Starts the folder manager (linked, registered as `folder`).
pub(crate) fn start(every: Duration) -> Result<Pid, StartError> {
    let folder = Folder {
        every,
        trackers: HashMap::new(),
        seen: HashMap::new(),
        holds: HashSet::new(),
    };
    gen_server::start_named(NAME, folder).map(|s| s.pid())
}

/// Hands a remote announcement to the folder manager.
pub(crate) fn remote(a: Announce) {
    if let Some(f) = Server::<Folder>::whereis(NAME) {
        f.cast(FolderMsg::Remote(a));
    }
}

/// Tells the folder manager whether the tracker of `path` holds content.
pub(crate) fn holds(path: &str, present: bool) {
    if let Some(f) = Server::<Folder>::whereis(NAME) {
        f.cast(FolderMsg::Holds(path.to_string(), present));
    }
}
