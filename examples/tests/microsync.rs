//! Runs two MicroSync instances as OS processes on two temporary
//! directories and checks that they converge, byte for byte, after
//! creations, edits, deletions and a conflict, and that an edit in the
//! middle of a large file transfers only nearby chunks.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Hang guard for each wait.
const BOUND: Duration = Duration::from_secs(30);

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!(
            "graft-microsync-{}-{nanos}-{tag}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running instance: its stdout lines are collected; killed on drop.
struct Instance {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Instance {
    fn start(dir: &Path, name: &str, join: Option<&str>) -> Instance {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_microsync"));
        cmd.arg("--dir").arg(dir);
        cmd.args(["--listen", "127.0.0.1:0", "--name", name, "--for", "120"]);
        cmd.args(["--cookie", "microsync-test"]);
        if let Some(j) = join {
            cmd.args(["--join", j]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("microsync starts");
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                sink.lock().unwrap().push(l);
            }
        });
        Instance { child, lines }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn wait_line(&self, what: &str, f: impl Fn(&str) -> bool) -> String {
        let t = Instant::now();
        loop {
            if let Some(l) = self.lines().into_iter().find(|l| f(l)) {
                return l;
            }
            assert!(
                t.elapsed() < BOUND,
                "no {what} in:\n{}",
                self.lines().join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every regular file under `dir` (but temporary ones) with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, rel: &str, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(rd) = std::fs::read_dir(root.join(rel)) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".microsync-tmp-") {
                continue;
            }
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                walk(root, &path, out);
            } else if let Ok(data) = std::fs::read(e.path()) {
                out.insert(path, data);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, "", &mut out);
    out
}

/// Waits until both directories hold the same files with the same bytes
/// and `check` holds for that content.
fn converge(
    a: &Path,
    b: &Path,
    what: &str,
    check: impl Fn(&BTreeMap<String, Vec<u8>>) -> bool,
) -> BTreeMap<String, Vec<u8>> {
    let t = Instant::now();
    loop {
        let (sa, sb) = (snapshot(a), snapshot(b));
        if sa == sb && check(&sa) {
            return sa;
        }
        if t.elapsed() > BOUND {
            let names = |s: &BTreeMap<String, Vec<u8>>| {
                s.iter()
                    .map(|(k, v)| format!("{k} ({} bytes)", v.len()))
                    .collect::<Vec<_>>()
            };
            panic!(
                "{what}: no convergence\n a: {:?}\n b: {:?}",
                names(&sa),
                names(&sb)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes a file whole, through a rename (as editors do), so a scan never
/// sees it half written.
fn put(dir: &Path, rel: &str, data: &[u8]) {
    let target = dir.join(rel);
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    let tmp = dir.join(format!(".microsync-tmp-test-{}", rel.replace('/', "_")));
    std::fs::write(&tmp, data).unwrap();
    std::fs::rename(&tmp, &target).unwrap();
}

fn noise(n: usize, mut s: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

fn has(s: &BTreeMap<String, Vec<u8>>, path: &str, data: &[u8]) -> bool {
    s.get(path).map(Vec::as_slice) == Some(data)
}

/// `(fetched, total)` of the last "fetched K of T chunks ... for PATH" line.
fn last_fetch(inst: &Instance, path: &str) -> Option<(usize, usize)> {
    let tag = format!(" for {path} (");
    inst.lines()
        .iter()
        .rev()
        .find(|l| l.contains(&tag))
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let i = words.iter().position(|w| *w == "fetched").unwrap();
            (words[i + 1].parse().unwrap(), words[i + 3].parse().unwrap())
        })
}

#[test]
fn two_instances_converge() {
    let (da, db) = (TempDir::new("a"), TempDir::new("b"));
    let (a, b) = (&da.0, &db.0);
    // Before they meet: different files on each side, and one path with
    // different content on both (a conflict: 1@b beats 1@a).
    put(a, "a.txt", b"from a\n");
    put(a, "sub/deep/x.txt", b"nested\n");
    put(b, "b.txt", b"from b\n");
    put(a, "both.txt", b"a's version\n");
    put(b, "both.txt", b"b's version\n");

    let ia = Instance::start(a, "a", None);
    let listen = ia.wait_line("listening line", |l| l.starts_with("listening on "));
    let addr = listen.trim_start_matches("listening on ").to_string();
    let ib = Instance::start(b, "b", Some(&addr));
    ib.wait_line("peer up", |l| l.contains("peer up"));

    converge(a, b, "initial exchange", |s| {
        has(s, "a.txt", b"from a\n")
            && has(s, "b.txt", b"from b\n")
            && has(s, "sub/deep/x.txt", b"nested\n")
            && has(s, "both.txt", b"b's version\n")
    });

    // Edits and deletions on both sides.
    put(b, "a.txt", b"from a, edited on b\n");
    std::fs::remove_file(a.join("b.txt")).unwrap();
    put(a, "new/on_a.txt", b"created on a\n");
    std::fs::remove_file(b.join("sub/deep/x.txt")).unwrap();
    converge(a, b, "edits and deletions", |s| {
        has(s, "a.txt", b"from a, edited on b\n")
            && !s.contains_key("b.txt")
            && !s.contains_key("sub/deep/x.txt")
            && has(s, "new/on_a.txt", b"created on a\n")
    });

    // A deleted file comes back with a later version.
    put(b, "b.txt", b"b again\n");
    converge(a, b, "re-creation", |s| has(s, "b.txt", b"b again\n"));

    // Concurrent edits of one file: both sides end with the same winner.
    put(a, "both.txt", b"a edits concurrently\n");
    put(b, "both.txt", b"b edits concurrently\n");
    converge(a, b, "conflict", |s| {
        has(s, "both.txt", b"a edits concurrently\n")
            || has(s, "both.txt", b"b edits concurrently\n")
    });

    // A large file, then an edit in its middle: only nearby chunks move.
    let mut big = noise(4 << 20, 0x5eed);
    put(a, "big.bin", &big);
    converge(a, b, "large file", |s| has(s, "big.bin", &big));
    // (The log line follows the write: wait for it.)
    ib.wait_line("fetch of big.bin", |l| l.contains(" for big.bin ("));
    let (k, total) = last_fetch(&ib, "big.bin").expect("b fetched big.bin");
    assert_eq!(k, total, "b had none of big.bin");
    assert!(total > 200, "{total} chunks in 4 MiB");

    let mid = 2 << 20;
    big[mid..mid + 16].copy_from_slice(b"EDITED IN PLACE!");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(a.join("big.bin"))
        .unwrap();
    f.seek(SeekFrom::Start(mid as u64)).unwrap();
    f.write_all(b"EDITED IN PLACE!").unwrap();
    drop(f);
    converge(a, b, "edit in the middle", |s| has(s, "big.bin", &big));
    let t = Instant::now();
    let (k, total) = loop {
        match last_fetch(&ib, "big.bin") {
            Some((k, t)) if k < t => break (k, t),
            _ => {
                assert!(t.elapsed() < BOUND, "no second fetch of big.bin");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    assert!(
        (1..=3).contains(&k),
        "an edit of 16 bytes fetched {k} of {total} chunks"
    );
    drop((ia, ib));
}

/// `--once` stops by itself once in sync, and `--log` keeps the events.
#[test]
fn once_syncs_then_stops_and_logs() {
    let (da, db) = (TempDir::new("once-a"), TempDir::new("once-b"));
    let log = TempDir::new("once-log");
    put(&da.0, "hello.txt", b"hello\n");
    let ia = Instance::start(&da.0, "a", None);
    let listen = ia.wait_line("listening line", |l| l.starts_with("listening on "));
    let addr = listen.trim_start_matches("listening on ");
    let log_file = log.0.join("events.log");
    // Fails unless b stops by itself, successfully, within the bound.
    common::run_for(
        env!("CARGO_BIN_EXE_microsync"),
        &[
            "--dir",
            db.0.to_str().unwrap(),
            "--log",
            log_file.to_str().unwrap(),
            "--name",
            "b",
            "--cookie",
            "microsync-test",
            "--once",
            "--join",
            addr,
        ],
        BOUND,
    );
    assert_eq!(
        std::fs::read(db.0.join("hello.txt")).unwrap(),
        b"hello\n".to_vec()
    );
    let events = std::fs::read_to_string(&log_file).unwrap();
    assert!(events.contains("microsync b: peer up: a"), "{events}");
    assert!(
        events.contains("for hello.txt (version 1@a from a"),
        "{events}"
    );
    assert!(events.contains("microsync b: stopping"), "{events}");
}

/// The helpers are permanent children of a one-for-one supervisor: kill
/// the accessor, then the folder manager (with its scanner and trackers),
/// and syncing goes on. Two nodes in this OS process, over TCP.
#[test]
fn crashed_helpers_are_restarted() {
    use graft_examples::microsync::{self, Options};
    use graft_otp::prelude::*;

    let (da, db) = (TempDir::new("sup-a"), TempDir::new("sup-b"));
    let node = |name: &str| {
        Node::start(
            NodeConfig::new("127.0.0.1:0")
                .name(name)
                .cookie("microsync-sup")
                .stack_size(1 << 20),
        )
        .expect("node starts")
    };
    let (a, b) = (node("sa"), node("sb"));
    let opts = |dir: &Path, join| Options {
        dir: dir.to_path_buf(),
        join,
        log: None,
        scan_every: Duration::from_millis(100),
    };
    let (oa, ob) = (opts(&da.0, None), opts(&db.0, Some(a.addr())));
    // Each tree lives under a root process that outlives this test's calls.
    a.spawn(move || {
        microsync::start(oa).expect("tree starts");
        expect::<()>();
    })
    .unwrap();
    b.spawn(move || {
        microsync::start(ob).expect("tree starts");
        expect::<()>();
    })
    .unwrap();

    put(&da.0, "first.txt", b"1\n");
    converge(&da.0, &db.0, "before the crashes", |s| {
        has(s, "first.txt", b"1\n")
    });
    let restart = |victim: &'static str| {
        let old = a.whereis(victim).expect("running");
        a.run(move || exit(old, ExitReason::Kill)).unwrap();
        let t = Instant::now();
        while a.whereis(victim).is_none_or(|p| p == old) {
            assert!(t.elapsed() < BOUND, "{victim} was not restarted");
            std::thread::sleep(Duration::from_millis(10));
        }
    };

    restart("accessor");
    put(&da.0, "after-accessor.txt", b"a\n");
    converge(&da.0, &db.0, "after the accessor", |s| {
        has(s, "after-accessor.txt", b"a\n")
    });

    // b moves first.txt on (version 2@sb); then a's folder manager dies
    // and forgets every version. Its fresh tracker announces 1@sa, b
    // answers with 2@sb, and a catches up without a transfer...
    put(&db.0, "first.txt", b"2\n");
    converge(&da.0, &db.0, "b's edit", |s| has(s, "first.txt", b"2\n"));
    restart("folder");
    let t = Instant::now();
    loop {
        let v = a.run(|| microsync::version_of("first.txt")).unwrap();
        if v.as_ref().is_some_and(|v| v.counter == 2 && v.node == "sb") {
            break;
        }
        assert!(t.elapsed() < BOUND, "a's tracker holds {v:?}, not 2@sb");
        std::thread::sleep(Duration::from_millis(20));
    }
    // ...so that its next edit (3@sa) wins over b's 2@sb.
    put(&da.0, "first.txt", b"3\n");
    put(&da.0, "after-folder.txt", b"f\n");
    converge(&da.0, &db.0, "after the folder manager", |s| {
        has(s, "first.txt", b"3\n") && has(s, "after-folder.txt", b"f\n")
    });
    a.shutdown();
    b.shutdown();
}
