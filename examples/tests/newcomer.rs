//! The newcomer's path as a test: the README's first program, in a crate
//! of its own outside the workspace that depends on graft-otp alone (the
//! derive, an Application with a supervised gen_server, `Server::at` from a
//! second node), built with cargo and run: a server, two client runs from
//! other OS processes, then SIGTERM.
//!
//! The crate lives under the workspace's target dir
//! (`target/newcomer/`) with its own `CARGO_TARGET_DIR` there, so a rerun
//! only rebuilds what changed. It is built `--offline` (the workspace's
//! lock file pins every registry crate, already downloaded for the
//! workspace), falling back to the network if that fails.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("examples/ is in the workspace")
        .to_path_buf()
}

/// The README's program, between its markers.
fn readme_program() -> String {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let begin = readme
        .find("<!-- newcomer:main.rs begin")
        .expect("the README marks its first program");
    let rest = &readme[begin..];
    let start = rest.find("```rust\n").expect("a rust block") + "```rust\n".len();
    let end = rest[start..].find("```\n").expect("the block ends") + start;
    rest[start..end].to_string()
}

/// Writes the crate and builds it; returns the binary's path.
fn build() -> PathBuf {
    let root = workspace();
    let dir = root.join("target").join("newcomer");
    let krate = dir.join("kv");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"kv\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\ngraft-otp = {{ path = {:?} }}\nlog = \"0.4\"\nenv_logger = \"0.11\"\n\n\
         [workspace]\n",
        root.join("otp").display().to_string()
    );
    write_if_changed(&krate.join("Cargo.toml"), &manifest);
    write_if_changed(&krate.join("src/main.rs"), &readme_program());
    if !krate.join("Cargo.lock").exists() {
        std::fs::copy(root.join("Cargo.lock"), krate.join("Cargo.lock")).unwrap();
    }
    let cargo = |offline: bool| {
        let mut c = Command::new(env!("CARGO"));
        c.arg("build")
            .arg("--quiet")
            .arg("--manifest-path")
            .arg(krate.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", dir.join("target"))
            // Cheap: no debug info, no incremental state.
            .env("CARGO_PROFILE_DEV_DEBUG", "0")
            .env("CARGO_INCREMENTAL", "0")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS");
        if offline {
            c.arg("--offline");
        }
        c.output().expect("cargo runs")
    };
    let mut out = cargo(true);
    if !out.status.success() {
        out = cargo(false);
    }
    assert!(
        out.status.success(),
        "the newcomer's crate did not build:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("target/debug/kv")
}

fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).unwrap();
    }
}

/// Runs the client once; returns what it printed.
fn client(bin: &Path, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .env("GRAFT_COOKIE", "newcomer")
        .env("RUST_LOG", "warn")
        .output()
        .expect("the client runs");
    assert!(
        out.status.success(),
        "client {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_readme_program_builds_alone_and_serves_another_node() {
    let bin = build();
    let mut server = Command::new(&bin)
        .env("GRAFT_COOKIE", "newcomer")
        .env("GRAFT_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the server starts");
    let (tx, rx) = mpsc::channel();
    let out = server.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let err = server.stderr.take().unwrap();
    let logs = std::thread::spawn(move || {
        let mut s = String::new();
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            s.push_str(&l);
            s.push('\n');
        }
        s
    });
    let line = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(l) => l,
        Err(_) => {
            let _ = server.kill();
            panic!("the server never said it serves: {}", logs.join().unwrap());
        }
    };
    let addr = line
        .strip_prefix("kv: serving on ")
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    assert_eq!(client(&bin, &[&addr, "greeting", "hello"]), "None");
    assert_eq!(client(&bin, &[&addr, "greeting"]), "Some(\"hello\")");
    let kill = Command::new("kill")
        .arg("-TERM")
        .arg(server.id().to_string())
        .status()
        .unwrap();
    assert!(kill.success());
    let mut status = None;
    for _ in 0..600 {
        if let Some(s) = server.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some(status) = status else {
        let _ = server.kill();
        panic!("the server did not stop on SIGTERM");
    };
    let logs = logs.join().unwrap();
    assert!(status.success(), "{status}: {logs}");
    // The logs are visible, and the tree stopped cleanly.
    assert!(logs.contains("kv: started as"), "{logs}");
    assert!(
        logs.contains("kv: stopping (shutdown) with 1 keys"),
        "{logs}"
    );
    assert!(logs.contains("application kv stopped"), "{logs}");
}
