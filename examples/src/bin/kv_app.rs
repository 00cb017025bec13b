//! An application program: two applications (`store`, and `api` which
//! depends on it), each a supervision tree of gen_servers, run by
//! `application::Runner` until SIGTERM, SIGINT (Ctrl-C) or
//! `application::stop()`.
//!
//! ```text
//! RUST_LOG=info cargo run -p graft-examples --bin kv_app
//! # in another terminal: kill -TERM <pid>   (or Ctrl-C here)
//! ```
//!
//! On a stop, the trees stop in reverse start order (`api` before `store`,
//! and within `api`, `audit` before `front`), each `terminate` runs and
//! prints, then each application's `stop`, and the program exits 0.
//!
//! With `KV_APP_STUCK=1` the `api` tree has one more child whose
//! `terminate` never returns: it is killed after its shutdown time (300 ms)
//! and the stop goes on.

use graft_otp::prelude::*;
use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

/// Prints one line at once (the test reads them as they come).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A key-value store.
#[derive(Default)]
struct Kv(HashMap<String, String>);

/// What the store takes (a client names only this).
#[derive(Debug, Clone, Mobile)]
enum KvCall {
    Get(String),
    Put(String, String),
}

impl GenServer for Kv {
    type Call = KvCall;
    type Cast = ();
    type Reply = Option<String>;
    fn init(&mut self) -> Result<(), ExitReason> {
        trap_exits(true); // so that terminate runs on shutdown
        Ok(())
    }
    fn handle_call(
        &mut self,
        req: KvCall,
        _: &ReplyTo<Option<String>>,
    ) -> CallResult<Option<String>> {
        CallResult::Reply(match req {
            KvCall::Get(k) => self.0.get(&k).cloned(),
            KvCall::Put(k, v) => self.0.insert(k, v),
        })
    }
    fn terminate(&mut self, reason: &ExitReason) {
        say(&format!("terminate kv ({reason}, {} keys)", self.0.len()));
    }
}

/// A worker that only reports its own end.
struct Named(&'static str);

impl GenServer for Named {
    type Call = ();
    type Cast = ();
    type Reply = ();
    fn init(&mut self) -> Result<(), ExitReason> {
        trap_exits(true);
        Ok(())
    }
    fn handle_call(&mut self, _: (), _: &ReplyTo<()>) -> CallResult<()> {
        CallResult::Reply(())
    }
    fn terminate(&mut self, reason: &ExitReason) {
        say(&format!("terminate {} ({reason})", self.0));
        if self.0 == "stuck" {
            // Never returns: the supervisor kills it after its shutdown time.
            loop {
                sleep(Duration::from_secs(3600));
            }
        }
    }
}

struct Store;

impl Application for Store {
    fn name(&self) -> &str {
        "store"
    }
    fn start(&mut self) -> Result<Pid, StartError> {
        Supervisor::new(Strategy::OneForOne)
            .child(ChildSpec::server_named("kv", Kv::default))
            .start()
    }
    fn stop(&mut self) {
        say("application store stopped");
    }
}

struct Api;

impl Application for Api {
    fn name(&self) -> &str {
        "api"
    }
    fn dependencies(&self) -> Vec<String> {
        vec!["store".into()]
    }
    fn start(&mut self) -> Result<Pid, StartError> {
        // The store is up: its server answers by name.
        let kv = Server::<Kv>::at("kv")
            .map_err(|e| StartError::Init(ExitReason::Other(e.to_string())))?;
        kv.call(KvCall::Put("greeting".into(), "hello".into()))
            .map_err(|e| StartError::Init(ExitReason::Other(e.to_string())))?;
        let mut sup = Supervisor::new(Strategy::OneForOne)
            .child(ChildSpec::server("front", || Named("front")))
            .child(ChildSpec::server("audit", || Named("audit")));
        if std::env::var_os("KV_APP_STUCK").is_some() {
            sup = sup.child(
                ChildSpec::server("stuck", || Named("stuck"))
                    .shutdown(Shutdown::Timeout(Duration::from_millis(300))),
            );
        }
        sup.start()
    }
    fn stop(&mut self) {
        say("application api stopped");
    }
}

fn main() -> std::process::ExitCode {
    let _ = env_logger::try_init();
    application::Runner::from_env()
        .app(Api) // added first, started second: it depends on store
        .app(Store)
        .on_started(|node| {
            say(&format!(
                "ready: node {} pid {}",
                node.name(),
                std::process::id()
            ))
        })
        .run()
}
