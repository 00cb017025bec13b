//! MicroSync: keeps a directory in sync between two or more nodes (the
//! paper's case study; see `graft_examples::microsync` for the design).
//!
//! ```text
//! microsync --dir D [--listen ADDR] [--join ADDR] [--name N] [--cookie C]
//!           [--log FILE] [--once | --for SECS]
//! ```
//!
//! Prints `listening on ADDR` once started, then one line per event
//! (`microsync NODE: ...`), among them `fetched K of T chunks ... for PATH`
//! for each transfer. `--for SECS` stops after that long; `--once` stops
//! once a peer has been seen and nothing happened for 1.5 s; otherwise it
//! runs until killed.

use graft_examples::microsync::{self, Options};
use graft_otp::prelude::*;
use std::io::Write;
use std::time::{Duration, Instant};

fn main() {
    env_logger::init();
    let args = graft_examples::NodeArgs::from_env("microsync");
    let Some(dir) = args.get("--dir").filter(|d| !d.is_empty()) else {
        eprintln!("microsync: --dir D is required");
        std::process::exit(2)
    };
    let dir = std::path::PathBuf::from(dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("microsync: {}: {e}", dir.display());
        std::process::exit(1)
    }
    let run_for = args.num("--for").map(Duration::from_secs_f64);
    let once = args.get("--once").is_some();
    // Large stacks: a remote send of a big message (a batch of chunks)
    // deflates it on the sender's stack, and in debug builds flate2's
    // compressor state is built on the stack (well over the 64 KiB
    // default; see the report in `microsync/mod.rs`).
    let mut config = args.config().stack_size(1 << 20);
    if args.cookie.is_none() {
        config = config.cookie("microsync");
    }
    if args.name.is_none() {
        let n = format!("microsync-{}@127.0.0.1", std::process::id());
        config = config.name(&n);
    }
    let node = Node::start(config).unwrap_or_else(|e| {
        eprintln!("microsync: cannot start: {e}");
        std::process::exit(1)
    });
    println!("listening on {}", node.addr());
    println!("node {}", node.name());
    let _ = std::io::stdout().flush();
    let opts = Options {
        dir,
        join: args.join,
        log: args.get("--log").map(Into::into),
        scan_every: Duration::from_millis(150),
    };
    let started = Instant::now();
    let result = node.run(move || {
        let sup = microsync::start(opts).map_err(|e| e.to_string())?;
        let m = monitor(sup);
        loop {
            if let Some(d) = expect_timeout::<ProcessDied>(Duration::from_millis(100)) {
                if d.monitor == m {
                    return Err(format!("the supervisor stopped: {}", d.reason));
                }
            }
            if run_for.is_some_and(|t| started.elapsed() >= t) {
                break;
            }
            if once {
                if let Some((quiet, peers)) = microsync::quiet_for() {
                    if peers > 0 && quiet >= Duration::from_millis(1500) {
                        break;
                    }
                }
            }
        }
        microsync::event("stopping");
        // Let the logger print the last line.
        sleep(Duration::from_millis(50));
        Ok(())
    });
    node.shutdown();
    if let Err(e) = result.map_err(|e| e.to_string()).and_then(|r| r) {
        eprintln!("microsync: {e}");
        std::process::exit(1)
    }
}
