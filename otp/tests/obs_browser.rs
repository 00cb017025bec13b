//! The web observer in a real browser: headless Chromium loads the pages of
//! a 3-node cluster, and the rendered DOM must show the three nodes, a
//! supervision tree and a known process with its mailbox length.
//!
//! Skips (with a message) where Chromium is missing, except under CI
//! (`CI=true`), where `.ci/run` installs it and a missing browser fails.
//! `GRAFT_SCREENSHOT=path.png` also saves a screenshot of a node's page
//! (docs/observer.png was made so).

use graft_otp::prelude::*;
use std::process::Command;
use std::time::Duration;

fn chromium() -> Option<String> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(String::from)
}

/// The DOM of `url` after its scripts ran (virtual time, so no sleeping).
fn dump_dom(browser: &str, url: &str) -> String {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // A fresh profile per page: a reused one may restore the last page.
    let profile = std::env::temp_dir().join(format!("graft-chromium-{}-{k}", std::process::id()));
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--virtual-time-budget=8000",
            &format!("--user-data-dir={}", profile.display()),
            "--dump-dom",
            url,
        ])
        .output()
        .expect("chromium runs");
    let _ = std::fs::remove_dir_all(&profile);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[derive(Debug, Default)]
struct Worker;
impl GenServer for Worker {
    type Call = ();
    type Cast = ();
    type Reply = ();
    fn handle_call(&mut self, _: (), _: &ReplyTo<()>) -> CallResult<()> {
        CallResult::Reply(())
    }
    fn format_status(&self) -> Option<String> {
        sys::debug(self)
    }
}

#[test]
fn the_observer_page_shows_the_cluster_a_supervision_tree_and_a_mailbox() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI must run the browser test: chromium is missing (apt-get install -y chromium)"
        );
        eprintln!(
            "SKIPPED: the observer browser test needs chromium (apt-get install -y chromium)"
        );
        return;
    };
    let config = |i: usize| {
        let c = NodeConfig::new("127.0.0.1:0")
            .workers(2)
            .cookie("browser")
            .name(&format!("observed{i}@127.0.0.1"));
        if i == 0 {
            c.observer("127.0.0.1:0")
        } else {
            c
        }
    };
    let nodes: Vec<Node> = (0..3).map(|i| Node::start(config(i)).unwrap()).collect();
    for n in &nodes[1..] {
        nodes[0].connect(n.addr()).unwrap();
    }
    // On the second node: a supervision tree, and a process with 7
    // messages it has not taken.
    let (tx, rx) = std::sync::mpsc::channel();
    nodes[1]
        .spawn(move || {
            let sup = Supervisor::new(Strategy::OneForOne)
                .child(ChildSpec::server("alpha", || Worker))
                .child(ChildSpec::server("beta", || Worker))
                .start()
                .unwrap();
            register("app_sup", sup).unwrap();
            let inbox = spawn(|| {
                register("inbox", self_pid()).unwrap();
                receive().on(|_: u8| ()).wait();
            });
            for i in 0..7u32 {
                send(inbox, i);
            }
            let _ = tx.send((sup, inbox));
            receive().on(|_: u8| ()).wait();
        })
        .unwrap();
    let (sup, inbox) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let t = std::time::Instant::now();
    while nodes[1].process_info(inbox).map(|i| i.mailbox_len) != Some(7) {
        assert!(t.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(5));
    }
    let base = format!("http://{}/", nodes[0].observer_addr().unwrap());

    // The cluster page: the three nodes.
    let dom = dump_dom(&browser, &base);
    assert!(dom.contains("Cluster: 3 nodes"), "{dom}");
    for n in &nodes {
        assert!(
            dom.contains(&format!("data-node=\"{}\"", n.name())),
            "{} missing:\n{dom}",
            n.name()
        );
    }

    // The second node's page, served by the first through distribution.
    let url = format!("{base}#/node/{}", nodes[1].id().0);
    let dom = dump_dom(&browser, &url);
    assert!(dom.contains("Supervision trees"), "{dom}");
    let trees = dom
        .split("id=\"trees\"")
        .nth(1)
        .expect("the trees")
        .split("</section>")
        .next()
        .unwrap();
    let shown = |p: Pid| p.to_string().replace('<', "&lt;").replace('>', "&gt;");
    assert!(
        trees.contains("class=\"sup\"") && trees.contains(&shown(sup)),
        "{trees}"
    );
    assert!(trees.contains("app_sup"), "{trees}");
    assert_eq!(
        trees.matches("class=\"child\"").count(),
        2,
        "two children under it: {trees}"
    );
    assert!(trees.contains("Worker"), "{trees}");
    // The children's ids, from the supervisor's state.
    assert!(
        trees.contains("<span class=\"cid\">alpha</span>"),
        "{trees}"
    );
    assert!(trees.contains("<span class=\"cid\">beta</span>"), "{trees}");
    let row = dom
        .split("<tr class=\"proc\"")
        .skip(1)
        .find(|r| r.contains("<td>inbox</td>"))
        .unwrap_or_else(|| panic!("no row for inbox:\n{dom}"));
    assert!(row.contains("<td class=\"num mailbox\">7</td>"), "{row}");

    // The process page of the supervisor: its state through sys.
    let url = format!(
        "{base}#/proc/{}/{}/{}",
        sup.node().0,
        sup.creation(),
        sup.serial()
    );
    let dom = dump_dom(&browser, &url);
    assert!(
        dom.contains("id=\"state\"") && dom.contains("child \"alpha\""),
        "{dom}"
    );

    if let Ok(path) = std::env::var("GRAFT_SCREENSHOT") {
        let url = format!("{base}#/node/{}", nodes[1].id().0);
        let profile =
            std::env::temp_dir().join(format!("graft-chromium-shot-{}", std::process::id()));
        let ok = Command::new(&browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--window-size=1280,1000",
                "--virtual-time-budget=8000",
                &format!("--user-data-dir={}", profile.display()),
                &format!("--screenshot={path}"),
                &url,
            ])
            .status()
            .expect("chromium runs");
        let _ = std::fs::remove_dir_all(&profile);
        assert!(ok.success());
    }
    for n in &nodes {
        n.shutdown();
    }
}
