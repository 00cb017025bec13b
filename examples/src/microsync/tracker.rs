//! The file tracker: one gen_server per file, registered as
//! `tracker:PATH`, the owner of that file's version.
//!
//! * On a scan it asks the accessor for a fresh manifest; if the content
//!   differs from the version it holds (or the file is gone), that is a
//!   local change: it takes version `counter + 1` and announces it.
//! * On a remote announcement with a higher version it fetches the chunks
//!   it lacks from the announcing tracker, in batches, and has the accessor
//!   write the new version (or delete the file, for a tombstone). Failed
//!   fetches (the remote file changed meanwhile, a timeout) are retried a
//!   few times; a newer announcement replaces a pending one.
//! * On a remote announcement with a *lower* version it answers the
//!   announcing tracker with its own, so a peer that fell behind (its
//!   folder manager restarted and forgot the versions) catches up.
//! * It serves [`ChunkRequest`]s from remote trackers out of its file.

use super::accessor::{self, Done, Op};
use super::chunk::{self, Hash, Manifest};
use super::{event, folder, me, peer, Announce, ChunkReply, ChunkRequest, PeerMsg, Version};
use graft_otp::prelude::*;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// Chunks asked for in one request (about 256 KiB).
const BATCH: usize = 32;
/// How long a chunk request may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Tries of one fetch before it is dropped.
const RETRIES: u32 = 20;
/// Pause between tries.
const RETRY_AFTER: Duration = Duration::from_millis(250);

/// What a tracker is told (locally).
#[derive(Debug)]
pub(crate) enum TrackerMsg {
    /// Look at the file on disk.
    Scan,
    /// A peer's version.
    Remote(Announce),
}
impl Message for TrackerMsg {}

/// Time to retry a pending fetch.
#[derive(Debug, Clone, Mobile)]
struct Retry;

/// One file's tracker.
pub(crate) struct Tracker {
    path: String,
    /// The version this node holds (zero: none yet).
    version: Version,
    /// Its content (`None`: absent or deleted).
    manifest: Option<Manifest>,
    /// A newer remote version still to fetch, and tries left.
    pending: Option<(Announce, u32)>,
    /// Numbers chunk requests.
    req: u64,
}

impl Tracker {
    fn announcement(&self) -> Announce {
        Announce {
            path: self.path.clone(),
            version: self.version.clone(),
            manifest: self.manifest.clone(),
            tracker: self_pid(),
        }
    }

    fn announce(&self) {
        folder::holds(&self.path, self.manifest.is_some());
        peer::broadcast(self.announcement());
    }

    fn scan(&mut self) {
        let fresh = match accessor::call(Op::Manifest(self.path.clone())) {
            Ok(Done::Manifest(m)) => m,
            _ => return,
        };
        let same = match (&fresh, &self.manifest) {
            (None, None) => true,
            (Some(a), Some(b)) => a.hash == b.hash,
            _ => false,
        };
        if same {
            return;
        }
        self.version = Version {
            counter: self.version.counter + 1,
            node: me(),
        };
        match &fresh {
            Some(m) => event(format!(
                "local change: {} ({} bytes, {} chunks) is version {}",
                self.path,
                m.size,
                m.chunks.len(),
                self.version
            )),
            None => event(format!(
                "local deletion: {} is version {}",
                self.path, self.version
            )),
        }
        self.manifest = fresh;
        self.announce();
    }

    fn remote(&mut self, a: Announce) {
        if a.version < self.version {
            // The sender is behind (it restarted, or missed a broadcast):
            // tell its tracker directly what we hold.
            send(a.tracker, PeerMsg::Announce(self.announcement()));
            return;
        }
        if a.version == self.version {
            return;
        }
        if matches!(&self.pending, Some((p, _)) if p.version >= a.version) {
            return;
        }
        self.pending = Some((a, RETRIES));
        self.try_fetch();
    }

    fn try_fetch(&mut self) {
        let Some((a, tries)) = self.pending.take() else {
            return;
        };
        if a.version <= self.version {
            return;
        }
        match self.fetch(&a) {
            Ok(()) => {
                self.version = a.version.clone();
                self.manifest = a.manifest.clone();
                self.announce();
            }
            Err(e) if tries > 1 => {
                log::debug!(
                    "microsync: fetch of {} {}: {e}; retrying",
                    a.path,
                    a.version
                );
                self.pending = Some((a, tries - 1));
                send_after(RETRY_AFTER, self_pid(), Retry);
            }
            Err(e) => event(format!(
                "giving up on {} version {}: {e}",
                a.path, a.version
            )),
        }
    }

    /// Makes the local file what `a` says.
    fn fetch(&mut self, a: &Announce) -> Result<(), String> {
        let from = graft::node_name(a.tracker.node()).unwrap_or_default();
        let Some(m) = &a.manifest else {
            match accessor::call(Op::Delete(a.path.clone()))? {
                Done::Result(r) => r?,
                _ => return Err("accessor answered oddly".into()),
            }
            event(format!(
                "deleted {} (version {} from {from})",
                a.path, a.version
            ));
            return Ok(());
        };
        let local = match accessor::call(Op::Manifest(a.path.clone()))? {
            Done::Manifest(m) => m,
            _ => return Err("accessor answered oddly".into()),
        };
        let have: HashSet<Hash> = local
            .iter()
            .flat_map(|l| l.chunks.iter().map(|c| c.hash))
            .collect();
        let mut wanted = HashSet::new();
        let missing: Vec<_> = m
            .chunks
            .iter()
            .filter(|c| !have.contains(&c.hash) && wanted.insert(c.hash))
            .cloned()
            .collect();
        let mut fresh: HashMap<Hash, Vec<u8>> = HashMap::new();
        let mut bytes = 0;
        for batch in missing.chunks(BATCH) {
            self.req += 1;
            let req = self.req;
            send(
                a.tracker,
                ChunkRequest {
                    req,
                    path: a.path.clone(),
                    chunks: batch.to_vec(),
                    reply_to: self_pid(),
                },
            );
            let reply = receive()
                .when(move |r: &ChunkReply| r.req == req, |r: ChunkReply| r)
                .timeout(FETCH_TIMEOUT)
                .ok_or("chunk request timed out")?;
            for (c, data) in batch.iter().zip(reply.chunks) {
                let data = data.ok_or("the remote file changed meanwhile")?;
                if blake3::hash(&data).as_bytes() != &c.hash {
                    return Err("a chunk does not match its hash".into());
                }
                bytes += data.len();
                fresh.insert(c.hash, data);
            }
        }
        if local.as_ref().map(|l| l.hash) != Some(m.hash) {
            match accessor::call(Op::Write(m.clone(), fresh))? {
                Done::Result(r) => r?,
                _ => return Err("accessor answered oddly".into()),
            }
        }
        event(format!(
            "fetched {} of {} chunks ({bytes} bytes) for {} (version {} from {from}, {})",
            missing.len(),
            m.chunks.len(),
            a.path,
            a.version,
            chunk::short(&m.hash)
        ));
        Ok(())
    }

    fn serve(&mut self, r: ChunkRequest) {
        let chunks = match accessor::call(Op::Read(r.path, r.chunks)) {
            Ok(Done::Chunks(c)) => c,
            _ => Vec::new(),
        };
        send(r.reply_to, ChunkReply { req: r.req, chunks });
    }
}

impl GenServer for Tracker {
    type Call = ();
    type Cast = TrackerMsg;
    type Reply = Version;

    fn init(&mut self) -> Result<(), ExitReason> {
        // The name helps discovery and debugging; the folder manager's map
        // is what routes. A tracker of a crashed folder manager may still
        // hold the name for a moment (it dies at its next scheduling
        // point): wait for it.
        let name = format!("tracker:{}", self.path);
        for _ in 0..20 {
            if register(&name, self_pid()).is_ok() {
                return Ok(());
            }
            if let Some(old) = whereis(&name) {
                let m = monitor(old);
                let _ = receive()
                    .when(move |d: &ProcessDied| d.monitor == m, |_: ProcessDied| ())
                    .timeout(Duration::from_millis(100));
                demonitor_flush(m);
            }
        }
        event(format!("{name} is taken: running unregistered"));
        Ok(())
    }

    fn handle_call(&mut self, _: (), _: &ReplyTo<Version>) -> CallResult<Version> {
        CallResult::Reply(self.version.clone())
    }

    fn handle_cast(&mut self, msg: TrackerMsg) -> Flow {
        match msg {
            TrackerMsg::Scan => self.scan(),
            TrackerMsg::Remote(a) => self.remote(a),
        }
        Flow::Continue
    }

    fn handle_info(&mut self, msg: Unknown) -> Flow {
        let msg = match msg.downcast::<ChunkRequest>() {
            Ok(r) => {
                self.serve(r);
                return Flow::Continue;
            }
            Err(msg) => msg,
        };
        let msg = match msg.downcast::<PeerMsg>() {
            Ok(PeerMsg::Announce(a)) => {
                self.remote(a);
                return Flow::Continue;
            }
            Err(msg) => msg,
        };
        if msg.downcast::<Retry>().is_ok() {
            self.try_fetch();
        }
        // Anything else (a late ChunkReply) is dropped.
        Flow::Continue
    }
}

/// Starts a tracker for `path` (linked to the caller).
pub(crate) fn start(path: String) -> Result<Server<Tracker>, StartError> {
    gen_server::start(Tracker {
        path,
        version: Version::default(),
        manifest: None,
        pending: None,
        req: 0,
    })
}

/// The version the tracker registered for `path` holds.
pub(crate) fn version_of(path: &str) -> Option<Version> {
    let pid = whereis(&format!("tracker:{path}"))?;
    Server::<Tracker>::from_pid(pid).call(()).ok()
}
