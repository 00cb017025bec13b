//! A program that installs its own logger gets crash reports through `log`
//! alone (the node installs nothing then).

use graft::*;
use std::sync::Mutex;
use std::time::Duration;

static RECORDS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

struct Capture;
impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        RECORDS
            .lock()
            .unwrap()
            .push((r.target().to_string(), r.args().to_string()));
    }
    fn flush(&self) {}
}

#[test]
fn a_crash_report_goes_through_the_installed_logger() {
    log::set_logger(&Capture).unwrap();
    log::set_max_level(log::LevelFilter::Error);
    let node = Node::start(NodeConfig::new("127.0.0.1:0").workers(2)).unwrap();
    // The node did not replace our logger.
    assert!(!report::install_default_logger());
    node.run(|| {
        let (_, _m) = spawn_monitor(|| {
            register("doomed", self_pid()).unwrap();
            panic!("kaboom");
        });
        expect::<ProcessDied>();
        // Killed by a signal: no report of its own.
        let victim = spawn(|| loop {
            sleep(Duration::from_millis(10));
        });
        let _r = monitor(victim);
        exit(victim, ExitReason::Other("stop it".into()));
        expect::<ProcessDied>();
    })
    .unwrap();
    node.shutdown();
    let records = RECORDS.lock().unwrap();
    let reports: Vec<_> = records
        .iter()
        .filter(|(t, _)| t == "graft::report")
        .collect();
    assert_eq!(reports.len(), 1, "{records:?}");
    let text = &reports[0].1;
    assert!(text.contains("\"doomed\""), "{text}");
    assert!(text.contains("reason: kaboom"), "{text}");
    assert!(
        text.contains("panicked at: runtime/tests/obs_report_logger.rs:"),
        "{text}"
    );
    assert!(
        text.contains("initial call: runtime/tests/obs_report_logger.rs:"),
        "{text}"
    );
}
