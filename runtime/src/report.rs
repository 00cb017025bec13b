//! Crash reports, and the stderr logger a node installs when the program has
//! none (Erlang's default logger).
//!
//! A process that ends abnormally by its own doing (a panic, or
//! [`exit_self`](crate::exit_self) with a reason other than `Normal` or
//! `Shutdown`) gets one **crash report**, logged at `error` level with target
//! `graft::report`: its pid, registered name, initial call, ancestors, the
//! reason and, for a panic, where it panicked. A process ended by another
//! one's exit signal gets none (the process that crashed first has its own),
//! as in Erlang. Supervisors log their restarts and give-ups, and the node
//! logs peers coming and going, through `log` too.
//!
//! # Where reports go
//!
//! * A program that installs a `log` logger (env_logger, ...) gets them
//!   through that logger alone. **Install it before [`Node::start`]**:
//!   `log` takes one logger per program, and a node started first has
//!   installed its own (then `env_logger::init()` would panic, and
//!   `env_logger::try_init()` returns an error and changes nothing).
//! * With none installed, [`Node::start`] installs a small logger that writes
//!   `warn` and `error` records (and `info` records of supervisors and of
//!   node connections) to stderr, one block per record:
//!
//! ```text
//! =CRASH REPORT==== 19:52:03.117 UTC ===
//!   process: <4e1f.0.12> "worker" on graft-1c0ffee0@127.0.0.1
//!   initial call: examples/src/bin/crash_report.rs:21:19
//!   ancestors: [<4e1f.0.1>]
//!   reason: boom
//!   panicked at: examples/src/bin/crash_report.rs:23:13
//! ```
//!
//! `NodeConfig::default_logger(false)` keeps a node from installing it.
//! `RUST_LOG`-style filtering is the user's logger's business: the default
//! logger has a fixed level.
//!
//! [`Node::start`]: crate::Node::start

use crate::exit::ExitReason;
use crate::node::NodeShared;
use crate::process::{ExitUnwind, Process};
use std::fmt::Write as _;
use std::io::Write as _;

/// The logger [`Node::start`](crate::Node::start) installs when the program
/// has none: `warn` and `error` records to stderr (and `info` records from
/// supervisors and about node connections), Erlang-style.
///
/// ```
/// use log::Log;
/// let l = graft::report::StderrLogger;
/// let md = log::Metadata::builder().level(log::Level::Debug).target("x").build();
/// assert!(!l.enabled(&md));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct StderrLogger;

/// `info` records from these targets are shown too (restarts, nodes up and
/// down).
const INFO_TARGETS: [&str; 5] = [
    "graft_otp::supervisor",
    "graft_otp::sys",
    "graft::dist",
    "graft::report",
    "graft::trace",
];

impl log::Log for StderrLogger {
    fn enabled(&self, md: &log::Metadata<'_>) -> bool {
        match md.level() {
            log::Level::Error | log::Level::Warn => true,
            log::Level::Info => INFO_TARGETS.iter().any(|t| md.target().starts_with(t)),
            _ => false,
        }
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let msg = record.args().to_string();
        let kind = if record.target() == "graft::report" && msg.starts_with("  process:") {
            "CRASH REPORT"
        } else if record.target().starts_with("graft_otp::supervisor") {
            "SUPERVISOR REPORT"
        } else if record.target() == "graft::trace" {
            "TRACE"
        } else if record.target() == "graft::dist" && record.level() == log::Level::Info {
            "NODE REPORT"
        } else {
            match record.level() {
                log::Level::Error => "ERROR REPORT",
                log::Level::Warn => "WARNING REPORT",
                _ => "INFO REPORT",
            }
        };
        let mut out = format!("={kind}==== {} UTC ===\n", clock());
        out.push_str(&msg);
        out.push('\n');
        // One locked write per report, so reports from several threads
        // never mix (`eprint!`: a test harness captures it).
        eprint!("{out}");
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// Installs [`StderrLogger`] if no logger is installed yet; `true` if it
/// did. Called by [`Node::start`](crate::Node::start).
///
/// ```
/// // A program that installed a logger keeps it:
/// let _ = graft::report::install_default_logger();
/// assert!(!graft::report::install_default_logger());
/// ```
pub fn install_default_logger() -> bool {
    static LOGGER: StderrLogger = StderrLogger;
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
        true
    } else {
        false
    }
}

/// Wall-clock time of day, `HH:MM:SS.mmm` (UTC).
fn clock() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        now.subsec_millis()
    )
}

/// The body of process `me` unwound with `payload`: remember whether an
/// exit signal from elsewhere ended it (then it gets no crash report).
pub(crate) fn note_unwind(me: &Process, payload: &(dyn std::any::Any + Send)) {
    if payload
        .downcast_ref::<Box<ExitUnwind>>()
        .map(|u| !u.own)
        .or_else(|| payload.downcast_ref::<ExitUnwind>().map(|u| !u.own))
        .unwrap_or(false)
    {
        me.acct
            .signalled
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether an exit with `reason` is a crash worth a report.
fn is_crash(reason: &ExitReason) -> bool {
    !matches!(reason, ExitReason::Normal | ExitReason::Shutdown)
}

/// Process `p` ended with `reason` (called by `NodeShared::finish`, before
/// its name and table entry go).
pub(crate) fn on_exit(n: &NodeShared, p: &Process, reason: &ExitReason) {
    crate::observe::untrace_exited(p);
    if !is_crash(reason)
        || p.acct.signalled.load(std::sync::atomic::Ordering::Relaxed)
        || n.stopping.load(crate::loom::Ordering::Relaxed)
    {
        return;
    }
    n.stats
        .crashes
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    log::error!(target: "graft::report", "{}", crash_report(n, p, reason));
}

/// The text of a crash report.
fn crash_report(n: &NodeShared, p: &Process, reason: &ExitReason) -> String {
    let (name, label, panic) = {
        let m = p.meta.lock();
        (m.name.clone(), m.label.clone(), m.panic.clone())
    };
    let mut s = String::new();
    let _ = write!(s, "  process: {}", p.pid);
    if let Some(name) = name {
        let _ = write!(s, " {name:?}");
    }
    let _ = writeln!(s, " on {}", n.name);
    match label {
        Some(l) => {
            let _ = writeln!(s, "  initial call: {l} (spawned at {})", p.acct.spawned_at);
        }
        None => {
            let _ = writeln!(s, "  initial call: {}", p.acct.spawned_at);
        }
    }
    let ancestors = crate::stats::ancestors(n, p);
    let list: Vec<String> = ancestors.iter().map(|a| a.to_string()).collect();
    let _ = writeln!(s, "  ancestors: [{}]", list.join(", "));
    let _ = write!(s, "  reason: {reason}");
    if let (Some((at, msg)), ExitReason::Other(r)) = (panic.map(|b| *b), reason) {
        if *r == msg && !at.is_empty() {
            let _ = write!(s, "\n  panicked at: {at}");
        }
    }
    let queued = p.mailbox.len();
    if queued > 0 {
        let _ = write!(s, "\n  messages queued: {queued}");
    }
    s
}
