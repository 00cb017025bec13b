//! The folder manager and its scanner.
//!
//! The folder manager owns the set of tracked files: it starts one tracker
//! per path (on a local change or a remote announcement, whichever comes
//! first) and routes each event to it. Trackers are linked to it, so if
//! one crashes the folder restarts (under the supervisor) with a fresh
//! scan, and the trackers rebuild their state from disk and from peers.
//!
//! The scanner polls the directory through the accessor every period and
//! reports files that are new or whose size or modification time changed,
//! and files that disappeared.

use super::accessor::{self, Done, Op};
use super::tracker::{self, Tracker};
use super::Announce;
use graft_otp::prelude::*;
use std::collections::HashMap;
use std::time::Duration;

/// The name it registers.
const NAME: &str = "folder";

/// What the folder manager is told.
#[derive(Debug)]
pub(crate) enum FolderMsg {
    /// The scanner saw `path` appear or change.
    Changed(String),
    /// The scanner saw `path` disappear.
    Gone(String),
    /// A peer announced a version of a file.
    Remote(Announce),
}
impl Message for FolderMsg {}

/// The folder manager's state.
pub(crate) struct Folder {
    every: Duration,
    trackers: HashMap<String, Server<Tracker>>,
}

impl Folder {
    fn tracker(&mut self, path: &str) -> Option<Server<Tracker>> {
        if let Some(t) = self.trackers.get(path) {
            return Some(t.clone());
        }
        match tracker::start(path.to_string()) {
            Ok(t) => {
                self.trackers.insert(path.to_string(), t.clone());
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
        let (path, msg) = match msg {
            FolderMsg::Changed(p) => (p, tracker::TrackerMsg::Scan),
            FolderMsg::Gone(p) => (p, tracker::TrackerMsg::Scan),
            FolderMsg::Remote(a) => (a.path.clone(), tracker::TrackerMsg::Remote(a)),
        };
        if let Some(t) = self.tracker(&path) {
            t.cast(msg);
        }
        Flow::Continue
    }
}

/// Polls the folder and reports changes to the folder manager.
fn scanner(folder: Pid, every: Duration) {
    let folder = Server::<Folder>::from_pid(folder);
    let mut seen: HashMap<String, (u64, u128)> = HashMap::new();
    loop {
        if let Ok(Done::Listing(list)) = accessor::call(Op::List) {
            let mut now = HashMap::with_capacity(list.len());
            for (path, size, mtime) in list {
                if seen.get(&path) != Some(&(size, mtime)) {
                    folder.cast(FolderMsg::Changed(path.clone()));
                }
                now.insert(path, (size, mtime));
            }
            for path in seen.keys() {
                if !now.contains_key(path) {
                    folder.cast(FolderMsg::Gone(path.clone()));
                }
            }
            seen = now;
        }
        sleep(every);
    }
}

/// Starts the folder manager (linked, registered as `folder`).
pub(crate) fn start(every: Duration) -> Result<Pid, StartError> {
    let folder = Folder {
        every,
        trackers: HashMap::new(),
    };
    gen_server::start_named(NAME, folder).map(|s| s.pid())
}

/// Hands a remote announcement to the folder manager.
pub(crate) fn remote(a: Announce) {
    if let Some(f) = Server::<Folder>::whereis(NAME) {
        f.cast(FolderMsg::Remote(a));
    }
}
