//! The web observer's HTTP side: `/metrics` parsed as the Prometheus text
//! format, the token, and the JSON the page reads (issue 14).

use graft::*;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// GET `path`; returns (status, body).
fn get(addr: SocketAddr, path: &str, header: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let extra = header.map(|h| format!("{h}\r\n")).unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n"
    )
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let status = buf[9..12].parse().unwrap();
    let body = buf
        .split_once("\r\n\r\n")
        .map(|x| x.1.to_string())
        .unwrap_or_default();
    (status, body)
}

/// One sample of the text format: name, labels, value.
type Sample = (String, HashMap<String, String>, f64);

/// Parses the Prometheus text exposition format (0.0.4) strictly enough
/// to catch a malformed line: metric names and label names by the spec's
/// character classes, quoted label values with escapes, a float value, and
/// `# HELP` / `# TYPE` lines before a family's samples.
fn parse_prometheus(text: &str) -> Vec<Sample> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    let mut typed: HashMap<String, String> = HashMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut it = rest.splitn(3, ' ');
            let kw = it.next().unwrap();
            let name = it.next().expect("a family name");
            assert!(name_ok(name), "bad family name in {line:?}");
            if kw == "TYPE" {
                let t = it.next().expect("a type");
                assert!(
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(&t),
                    "{line:?}"
                );
                assert!(
                    typed.insert(name.to_string(), t.to_string()).is_none(),
                    "TYPE twice: {line:?}"
                );
            } else {
                assert_eq!(kw, "HELP", "{line:?}");
            }
            continue;
        }
        let (name, rest) = match line.find('{') {
            Some(i) => (&line[..i], &line[i..]),
            None => line.split_once(' ').expect("name value"),
        };
        assert!(name_ok(name), "bad metric name in {line:?}");
        assert!(typed.contains_key(name), "sample before its TYPE: {line:?}");
        let mut labels = HashMap::new();
        let value_part;
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices().peekable();
            let end;
            loop {
                let (start, c) = chars.next().expect("unterminated labels");
                if c == '}' {
                    end = start;
                    break;
                }
                if c == ',' {
                    continue;
                }
                let mut lname = String::from(c);
                loop {
                    let (_, c) = chars.next().expect("label name");
                    if c == '=' {
                        break;
                    }
                    lname.push(c);
                }
                assert!(name_ok(&lname), "bad label name {lname:?} in {line:?}");
                assert_eq!(chars.next().map(|x| x.1), Some('"'), "{line:?}");
                let mut v = String::new();
                loop {
                    let (_, c) = chars.next().expect("label value");
                    match c {
                        '"' => break,
                        '\\' => match chars.next().expect("escape").1 {
                            'n' => v.push('\n'),
                            '\\' => v.push('\\'),
                            '"' => v.push('"'),
                            e => panic!("bad escape \\{e} in {line:?}"),
                        },
                        c => v.push(c),
                    }
                }
                labels.insert(lname, v);
            }
            value_part = body[end + 1..].trim();
        } else {
            value_part = rest.trim();
        }
        let value: f64 = value_part
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|e| panic!("bad value in {line:?}: {e}"));
        out.push((name.to_string(), labels, value));
    }
    out
}

fn cluster(n: usize, observer: bool) -> Vec<Node> {
    (0..n)
        .map(|i| {
            let mut c = NodeConfig::new("127.0.0.1:0").workers(2).cookie("web");
            if observer && i == 0 {
                c = c.observer("127.0.0.1:0");
            }
            Node::start(c).unwrap()
        })
        .collect()
}

#[test]
fn metrics_are_prometheus_text_with_the_named_families() {
    let nodes = cluster(2, true);
    let addr = nodes[0].observer_addr().expect("serving");
    nodes[0].connect(nodes[1].addr()).unwrap();
    // Some mail waiting, so that a gauge is not zero.
    let (tx, rx) = std::sync::mpsc::channel();
    nodes[0]
        .spawn(move || {
            let p = spawn(|| {
                receive().on(|_: u8| ()).wait();
            });
            for i in 0..4u32 {
                send(p, i);
            }
            let _ = tx.send(p);
        })
        .unwrap();
    let waiting = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    // (Its receive has skipped the four once it suspends.)
    let t = std::time::Instant::now();
    while nodes[0].process_info(waiting).map(|i| i.mailbox_len) != Some(4) {
        assert!(t.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(5));
    }
    let (status, body) = get(addr, "/metrics", None);
    assert_eq!(status, 200, "{body}");
    let samples = parse_prometheus(&body);
    let one = |name: &str| -> Vec<&Sample> { samples.iter().filter(|s| s.0 == name).collect() };
    assert!(one("graft_processes")[0].2 >= 1.0);
    assert_eq!(
        one("graft_run_queue_length").len(),
        3,
        "two workers and the global queue"
    );
    let util = one("graft_scheduler_utilization");
    assert_eq!(util.len(), 2);
    assert!(util
        .iter()
        .all(|s| (0.0..=1.0).contains(&s.2) && s.1.contains_key("worker")));
    assert!(one("graft_mailbox_messages")[0].2 >= 4.0, "{body}");
    assert_eq!(one("graft_restarts_total").len(), 1);
    let bytes = one("graft_dist_bytes_total");
    assert_eq!(bytes.len(), 2, "in and out for one peer: {body}");
    assert!(bytes
        .iter()
        .all(|s| s.1.get("peer").map(String::as_str) == Some(nodes[1].name())));
    let dirs: Vec<&str> = bytes.iter().map(|s| s.1["direction"].as_str()).collect();
    assert!(dirs.contains(&"in") && dirs.contains(&"out"));
    assert!(one("graft_uptime_seconds")[0].2 >= 0.0);
    // The same text from any thread.
    parse_prometheus(&observer::metrics_text(&nodes[1]));
    for n in &nodes {
        n.shutdown();
    }
}

#[test]
fn a_token_is_required_when_set_and_bad_requests_are_refused() {
    let cfg = observer::ObserverConfig::new("127.0.0.1:0").token("t0k");
    let n = Node::start(
        NodeConfig::new("127.0.0.1:0")
            .workers(1)
            .observer_config(cfg),
    )
    .unwrap();
    let addr = n.observer_addr().unwrap();
    assert_eq!(get(addr, "/metrics", None).0, 401);
    assert_eq!(get(addr, "/metrics?token=nope", None).0, 401);
    assert_eq!(get(addr, "/metrics?token=t0k", None).0, 200);
    assert_eq!(get(addr, "/", Some("Authorization: Bearer t0k")).0, 200);
    assert_eq!(get(addr, "/api/node/xyz?token=t0k", None).0, 400);
    assert_eq!(get(addr, "/api/process/1/2?token=t0k", None).0, 404);
    assert_eq!(get(addr, "/api/process/1/2/3?token=t0k", None).0, 404);
    assert_eq!(get(addr, "/api/node/12345?token=t0k", None).0, 404);
    // A second observer on the same node is refused.
    assert!(observer::serve(&n, &observer::ObserverConfig::new("127.0.0.1:0")).is_err());
    n.shutdown();
}

#[test]
fn the_json_api_shows_every_node_and_remote_processes() {
    let nodes = cluster(3, true);
    for other in &nodes[1..] {
        nodes[0].connect(other.addr()).unwrap();
    }
    let addr = nodes[0].observer_addr().unwrap();
    let (s, body) = get(addr, "/api/cluster", None);
    assert_eq!(s, 200);
    for n in &nodes {
        assert!(
            body.contains(&format!("\"name\":\"{}\"", n.name())),
            "{body}"
        );
    }
    // A process on the third node with 2 messages queued.
    let (tx, rx) = std::sync::mpsc::channel();
    nodes[2]
        .spawn(move || {
            register("queued", self_pid()).unwrap();
            let _ = tx.send(self_pid());
            send(self_pid(), 1u64);
            send(self_pid(), 2u64);
            receive().on(|_: u8| ()).wait();
        })
        .unwrap();
    let pid = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let t = std::time::Instant::now();
    let body = loop {
        let (s, body) = get(addr, &format!("/api/node/{}", nodes[2].id().0), None);
        assert_eq!(s, 200, "{body}");
        if body.contains("\"name\":\"queued\"") && body.contains("\"mailbox\":2") {
            break body;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{body}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(body.contains("\"processes\":["));
    let path = format!(
        "/api/process/{}/{}/{}",
        pid.node().0,
        pid.creation(),
        pid.serial()
    );
    let (s, p) = get(addr, &path, None);
    assert_eq!(s, 200, "{p}");
    assert!(
        p.contains("\"mailbox_len\":2") && p.contains("\"registered_name\":\"queued\""),
        "{p}"
    );
    assert!(p.contains("\"status\":\"waiting\""), "{p}");
    let (s, html) = get(addr, "/", None);
    assert_eq!(s, 200);
    assert!(
        html.contains("graft observer") && !html.contains("http://") && !html.contains("https://"),
        "no CDN"
    );
    for n in &nodes {
        n.shutdown();
    }
}

/// Reads until the server closes `s` (a hang guard, not a timing check);
/// returns what it sent.
fn until_closed(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut buf = Vec::new();
    match s.read_to_end(&mut buf) {
        Ok(_) => {}
        // Cut off (a reset): also closed.
        Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => {}
        Err(e) => panic!("the observer kept a slow client for 60 s: {e}"),
    }
    String::from_utf8_lossy(&buf).into_owned()
}

// Before its own server, the observer ran on tiny_http, whose pool loses a
// wakeup: four clients holding half a request (its four idle pool threads)
// left the next connection queued with no thread, for as long as they
// stayed (seen once in CI; every time with four holders in a burst).
#[test]
fn slow_and_garbage_clients_do_not_hold_up_the_observer() {
    let n = Node::start(
        NodeConfig::new("127.0.0.1:0")
            .workers(1)
            .observer("127.0.0.1:0"),
    )
    .unwrap();
    let addr = n.observer_addr().unwrap();
    // Clients that send half a request and wait: more than the observer
    // serves at once, so that some are dropped to make room.
    let mut slow: Vec<TcpStream> = (0..40)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            s
        })
        .collect();
    // Garbage with no line end; a body that never ends; a byte a while.
    let mut junk = TcpStream::connect(addr).unwrap();
    junk.write_all(&[0xff; 4096]).unwrap();
    let mut body = TcpStream::connect(addr).unwrap();
    body.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\nabc")
        .unwrap();
    let dripping = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let drip = {
        let mut s = TcpStream::connect(addr).unwrap();
        let on = dripping.clone();
        std::thread::spawn(move || {
            for b in b"GET /metrics HTTP/1.1\r\nHost: x".iter().cycle() {
                if !on.load(std::sync::atomic::Ordering::Relaxed) || s.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    // A client that asked for keep-alive and stays idle after its answer.
    let mut idle = TcpStream::connect(addr).unwrap();
    idle.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let answer = until_closed(&mut idle);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(TcpStream::connect(addr).unwrap());
    // Whole requests are still answered, again and again.
    for _ in 0..5 {
        let (status, body) = get(addr, "/metrics", None);
        assert_eq!(status, 200);
        parse_prometheus(&body);
    }
    // A huge URL is refused, never crashes the node.
    let long = format!("/api/node/{}", "9".repeat(10_000));
    let (status, _) = get(addr, &long, None);
    assert_eq!(status, 431);
    // The garbage is refused; the never-ending body is answered (GET only)
    // without being read; the slowest are cut off by the head deadline.
    assert!(until_closed(&mut junk).starts_with("HTTP/1.1 4"));
    assert!(until_closed(&mut body).starts_with("HTTP/1.1 405"));
    for s in slow.iter_mut() {
        let a = until_closed(s);
        assert!(a.is_empty() || a.starts_with("HTTP/1.1 408"), "{a}");
    }
    dripping.store(false, std::sync::atomic::Ordering::Relaxed);
    drip.join().unwrap();
    slow.clear();
    assert_eq!(get(addr, "/metrics", None).0, 200);
    n.shutdown();
}
