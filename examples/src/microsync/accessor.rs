//! The file accessor: the only process that reads or writes the folder.
//! Every operation runs on the blocking pool ([`graft::blocking`]), so disk
//! I/O never stalls a scheduler thread.
//!
//! Writes are atomic: the new version is assembled in a temporary file
//! (`.microsync-tmp-*`, which the scanner ignores) and renamed over the
//! old one.

use super::chunk::{self, ChunkRef, Hash, Manifest};
use graft_otp::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The name it registers.
const NAME: &str = "accessor";

/// Names starting with this are the accessor's own temporary files.
pub(crate) const TMP_PREFIX: &str = ".microsync-tmp-";

/// How long a caller waits for a disk operation.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The accessor's state: the folder it owns.
pub(crate) struct Accessor {
    dir: PathBuf,
    /// Numbers the temporary files.
    tmp: u64,
}

/// One entry of a directory listing: path, size, modification time (ns).
pub(crate) type Entry = (String, u64, u128);

/// A disk operation.
#[derive(Debug)]
pub(crate) enum Op {
    /// Every regular file under the folder (recursively).
    List,
    /// The manifest of a file (`None` if it does not exist).
    Manifest(String),
    /// Reads chunks of a file, checking each hash.
    Read(String, Vec<ChunkRef>),
    /// Writes `manifest`'s version of its file from `fresh` chunks plus
    /// those already in the local copy.
    Write(Manifest, HashMap<Hash, Vec<u8>>),
    /// Removes a file.
    Delete(String),
}
impl Message for Op {}

/// The result of an [`Op`].
#[derive(Debug)]
pub(crate) enum Done {
    /// For `List`.
    Listing(Vec<Entry>),
    /// For `Manifest`.
    Manifest(Option<Manifest>),
    /// For `Read`.
    Chunks(Vec<Option<Vec<u8>>>),
    /// For `Write` and `Delete`.
    Result(Result<(), String>),
}
impl Message for Done {}

impl GenServer for Accessor {
    type Call = Op;
    type Cast = ();
    type Reply = Done;

    fn handle_call(&mut self, op: Op, _: &ReplyTo<Done>) -> CallResult<Done> {
        let dir = self.dir.clone();
        self.tmp += 1;
        let tmp = dir.join(format!("{TMP_PREFIX}{}-{}", std::process::id(), self.tmp));
        CallResult::Reply(graft::blocking(move || run(&dir, &tmp, op)))
    }
}

/// Runs one operation (on the blocking pool).
fn run(dir: &Path, tmp: &Path, op: Op) -> Done {
    match op {
        Op::List => {
            let mut out = Vec::new();
            walk(dir, "", &mut out);
            Done::Listing(out)
        }
        Op::Manifest(path) => Done::Manifest(
            std::fs::read(dir.join(&path))
                .ok()
                .map(|data| chunk::manifest(&path, &data)),
        ),
        Op::Read(path, refs) => {
            use std::os::unix::fs::FileExt;
            // Only the chunks asked for are read, each checked against its hash.
            let file = std::fs::File::open(dir.join(&path)).ok();
            Done::Chunks(
                refs.iter()
                    .map(|c| {
                        let mut bytes = vec![0; c.len as usize];
                        file.as_ref()?.read_exact_at(&mut bytes, c.offset).ok()?;
                        (blake3::hash(&bytes).as_bytes() == &c.hash).then_some(bytes)
                    })
                    .collect(),
            )
        }
        Op::Write(m, fresh) => Done::Result(write(dir, tmp, &m, &fresh)),
        Op::Delete(path) => Done::Result(match std::fs::remove_file(dir.join(&path)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
            _ => Ok(()),
        }),
    }
}

/// Assembles `m` from `fresh` and the chunks of the current local copy.
fn write(
    dir: &Path,
    tmp: &Path,
    m: &Manifest,
    fresh: &HashMap<Hash, Vec<u8>>,
) -> Result<(), String> {
    let target = dir.join(&m.path);
    let old = std::fs::read(&target).unwrap_or_default();
    let have: HashMap<Hash, &[u8]> = chunk::chunks(&old)
        .iter()
        .map(|c| {
            (
                c.hash,
                &old[c.offset as usize..(c.offset + u64::from(c.len)) as usize],
            )
        })
        .collect();
    let mut data = Vec::with_capacity(m.size as usize);
    for c in &m.chunks {
        match fresh
            .get(&c.hash)
            .map(|v| v.as_slice())
            .or_else(|| have.get(&c.hash).copied())
        {
            Some(bytes) => data.extend_from_slice(bytes),
            None => return Err(format!("chunk {} missing", chunk::short(&c.hash))),
        }
    }
    if blake3::hash(&data).as_bytes() != &m.hash {
        return Err("assembled file does not match its manifest".into());
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
    }
    std::fs::write(tmp, &data).map_err(|e| e.to_string())?;
    std::fs::rename(tmp, &target).map_err(|e| {
        let _ = std::fs::remove_file(tmp);
        e.to_string()
    })
}

/// Lists the regular files under `dir/rel`, skipping temporary files.
fn walk(dir: &Path, rel: &str, out: &mut Vec<Entry>) {
    let Ok(rd) = std::fs::read_dir(dir.join(rel)) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(TMP_PREFIX) {
            continue;
        }
        let path = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            walk(dir, &path, out);
        } else if meta.is_file() {
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            out.push((path, meta.len(), mtime));
        }
    }
}

/// Starts the accessor (linked to the caller, registered as `accessor`).
pub(crate) fn start(dir: PathBuf) -> Result<Pid, StartError> {
    gen_server::start_named(NAME, Accessor { dir, tmp: 0 }).map(|s| s.pid())
}

/// Runs `op` through the accessor.
pub(crate) fn call(op: Op) -> Result<Done, String> {
    let s = Server::<Accessor>::whereis(NAME).ok_or("no accessor")?;
    s.call_timeout(op, TIMEOUT).map_err(|e| e.to_string())
}
