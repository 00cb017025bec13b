//! A plain graft node: starts on an address, joins a seed node, and serves
//! until killed. It registers `keeper`, a process that answers pings
//! (`(Pid, String)` → the same string back), so that other nodes have
//! something to monitor, link to, and talk to (`"greet me"` also gets a
//! greeting from `graft_examples::shared_code::greet_on`).
//!
//! ```text
//! graft-node --name worker1@127.0.0.1 --listen 127.0.0.1:0 --join 127.0.0.1:4000 --cookie secret
//! ```
//!
//! Prints `listening on ADDR` and `node NAME` (one line each) once ready.
//!
//! `--observer 127.0.0.1:PORT` serves the web observer there (and
//! `/metrics`; `--observer-token T` requires a token), printing
//! `observer on http://ADDR/`.
//!
//! `graft-node top --node ADDR [--cookie C] [--count N] [--every MS]`
//! joins the node at ADDR and prints its busiest processes, refreshing, like
//! Erlang's `etop`.

use graft::*;
use graft_examples::NodeArgs;
use std::io::Write;

fn main() {
    env_logger::init();
    if std::env::args().nth(1).as_deref() == Some("top") {
        let args = NodeArgs::parse(std::env::args().skip(2)).unwrap_or_else(|e| {
            eprintln!("graft-node top: {e}");
            std::process::exit(2)
        });
        std::process::exit(graft_examples::top::run(&args));
    }
    let args = NodeArgs::from_env("graft-node");
    let node = match Node::start(args.config()) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("graft-node: cannot start: {e}");
            std::process::exit(1);
        }
    };
    if let Some(seed) = args.join {
        if let Err(e) = node.connect(seed) {
            eprintln!("graft-node: cannot join {seed}: {e}");
            std::process::exit(1);
        }
    }
    let started = node.run(|| {
        let keeper = spawn(|| loop {
            let (from, s): (Pid, String) = expect();
            if s == "greet me" {
                // Also links `shared_code`'s mobile function into this
                // executable, so that other executables may spawn it here.
                let _ = graft_examples::shared_code::greet_on(this_node(), from);
            }
            send(from, s);
        });
        register("keeper", keeper)
    });
    if let Err(e) = started.and_then(|r| r) {
        eprintln!("graft-node: {e}");
        std::process::exit(1);
    }
    // A reader that stopped listening is no reason to stop serving.
    let mut out = std::io::stdout();
    let _ = writeln!(out, "listening on {}", node.addr());
    let _ = writeln!(out, "node {}", node.name());
    if let Some(addr) = args.get("--observer") {
        let mut cfg = graft::observer::ObserverConfig::new(addr);
        if let Some(t) = args.get("--observer-token") {
            cfg = cfg.token(t);
        }
        match graft::observer::serve(&node, &cfg) {
            Ok(a) => {
                let _ = writeln!(out, "observer on http://{a}/");
            }
            Err(e) => {
                eprintln!("graft-node: observer: {e}");
                std::process::exit(1);
            }
        }
    }
    let _ = out.flush();
    // Serve until killed.
    loop {
        std::thread::park();
    }
}
