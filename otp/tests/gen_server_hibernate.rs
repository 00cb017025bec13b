//! `StartOpts::hibernate_after`: an idle server gives its stack back and
//! still serves afterwards, with its state.

use graft_otp::gen_server::StartOpts;
use graft_otp::prelude::*;
use std::time::{Duration, Instant};

/// Counts calls; a call with `deep` set first recurses through ~512 KiB of
/// stack, so that the pages are resident when it goes idle.
#[derive(Default)]
struct Deep {
    calls: u64,
}

#[inline(never)]
fn recurse(n: u32) -> u64 {
    let buf = std::hint::black_box([n as u8; 1024]);
    if n == 0 {
        buf[0] as u64
    } else {
        recurse(n - 1) + buf[7] as u64
    }
}

impl GenServer for Deep {
    type Call = bool;
    type Cast = ();
    type Reply = u64;
    fn handle_call(&mut self, deep: bool, _: &ReplyTo<u64>) -> CallResult<u64> {
        if deep {
            std::hint::black_box(recurse(480));
        }
        self.calls += 1;
        CallResult::Reply(self.calls)
    }
    fn handle_cast(&mut self, (): ()) -> Flow {
        Flow::Continue
    }
}

fn high_water(pid: Pid) -> u64 {
    graft::observe::process_info_full(pid)
        .unwrap()
        .expect("the server is alive")
        .stack_high_water
}

#[test]
fn an_idle_server_hibernates_and_still_serves() {
    let node = Node::start(NodeConfig::new("127.0.0.1:0").workers(2)).unwrap();
    node.run(|| {
        let opts = StartOpts::new()
            .hibernate_after(Duration::from_millis(50))
            .spawn_opts(graft::spawn_opts().stack_size(1 << 20));
        let server = gen_server::start_with(Deep::default(), opts).unwrap();
        assert_eq!(server.call(true), Ok(1));
        // Right after the deep call (within the idle time) the pages are
        // still there...
        let before = high_water(server.pid());
        assert!(
            before >= 400 * 1024,
            "deep call left {before} bytes resident"
        );
        // ...and once it has hibernated, they are given back.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let now = high_water(server.pid());
            if now < 128 * 1024 {
                break;
            }
            assert!(Instant::now() < deadline, "still {now} bytes resident");
            sleep(Duration::from_millis(20));
        }
        // It still serves, with its state, and can hibernate again.
        assert_eq!(server.call(true), Ok(2));
        assert_eq!(server.call(false), Ok(3));
        sleep(Duration::from_millis(200));
        assert_eq!(server.call(false), Ok(4));
    })
    .unwrap();
    node.shutdown();
}
