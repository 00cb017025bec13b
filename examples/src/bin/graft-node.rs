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
//! Discovery (see `graft::discovery`): `--seeds ADDR_OR_NAME,...`,
//! `--seed-file PATH` (one seed per line, read again at every poll) or
//! `--dns NAME[:PORT]` (every address of NAME, default port 4370), polled
//! every `--discovery-every MS` (default 5000).
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
    let config = with_discovery(args.config(), &args).unwrap_or_else(|e| {
        eprintln!("graft-node: {e}");
        std::process::exit(2)
    });
    let node = match Node::start(config) {
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

/// The discovery flags, if any, on top of `cfg`.
fn with_discovery(cfg: NodeConfig, args: &NodeArgs) -> Result<NodeConfig, String> {
    let cfg = if let Some(list) = args.get("--seeds") {
        let seeds = discovery::StaticSeeds::parse(list.split(',').filter(|s| !s.is_empty()))
            .map_err(|e| format!("--seeds: {e}"))?;
        cfg.discovery(seeds)
    } else if let Some(path) = args.get("--seed-file") {
        cfg.discovery(discovery::SeedFile::new(path))
    } else if let Some(name) = args.get("--dns") {
        let (host, port) = match name.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().map_err(|e| format!("--dns {name:?}: {e}"))?),
            None => (name, discovery::DEFAULT_PORT),
        };
        cfg.discovery(discovery::Dns::new(host, port))
    } else {
        return Ok(cfg);
    };
    Ok(match args.num::<u64>("--discovery-every") {
        Some(ms) => cfg.discovery_interval(std::time::Duration::from_millis(ms)),
        None => cfg,
    })
}
