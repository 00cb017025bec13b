//! The event logger: one named gen_server that every part of the instance
//! sends its events to. It prints them on stdout (one line each, prefixed
//! with the node name) and appends them to the `--log` file if there is one.

use graft_otp::prelude::*;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The name it registers.
const NAME: &str = "eventlogger";

/// The logger's state.
pub(crate) struct EventLogger {
    /// Where to append events.
    file: Option<PathBuf>,
    /// This node's name, the prefix of each line.
    node: String,
    /// When the last event came.
    last: Instant,
    /// `peer up` events seen.
    peers: u64,
}

/// A question to the logger.
#[derive(Debug, Clone, Mobile)]
pub(crate) struct Quiet;

impl GenServer for EventLogger {
    type Call = Quiet;
    type Cast = String;
    type Reply = (Duration, u64);

    fn init(&mut self) -> Result<(), ExitReason> {
        self.node = super::me();
        Ok(())
    }

    fn handle_call(
        &mut self,
        _: Quiet,
        _: &ReplyTo<(Duration, u64)>,
    ) -> CallResult<(Duration, u64)> {
        CallResult::Reply((self.last.elapsed(), self.peers))
    }

    fn handle_cast(&mut self, event: String) -> Flow {
        self.last = Instant::now();
        if event.starts_with("peer up") {
            self.peers += 1;
        }
        let line = format!("microsync {}: {event}", self.node);
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
        drop(out);
        if let Some(path) = self.file.clone() {
            // Appending is disk access, but to the log, not the folder:
            // still off the scheduler.
            graft::blocking(move || {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path);
                if let Ok(mut f) = f {
                    let _ = writeln!(f, "{line}");
                }
            });
        }
        Flow::Continue
    }
}

/// Starts the logger (linked to the caller, registered as `eventlogger`).
pub(crate) fn start(file: Option<PathBuf>) -> Result<Pid, StartError> {
    let logger = EventLogger {
        file,
        node: String::new(),
        last: Instant::now(),
        peers: 0,
    };
    gen_server::start_named(NAME, logger).map(|s| s.pid())
}

/// Logs an event (on stderr if the logger is not running).
pub(crate) fn log(event: String) {
    match Server::<EventLogger>::whereis(NAME) {
        Some(s) => s.cast(event),
        None => eprintln!("microsync (no logger): {event}"),
    }
}

/// How long since the last event, and how many peers came up.
pub(crate) fn quiet_for() -> Option<(Duration, u64)> {
    Server::<EventLogger>::whereis(NAME)?.call(Quiet).ok()
}
