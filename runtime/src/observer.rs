//! The web observer: a live view of the cluster served by a node, and
//! Prometheus metrics.
//!
//! Start it with [`NodeConfig::observer`](crate::NodeConfig::observer)
//! (`"127.0.0.1:9090"`), [`NodeConfig::observer_config`] for a token or
//! another address, or [`serve`] on a running node; `graft-node --observer
//! 127.0.0.1:9090` does the same. It is a small blocking HTTP server
//! of its own (one thread per connection, bounded; slow or hostile clients
//! are cut off by deadlines: see `observer/http.rs`); it binds where it is told
//! (keep it on 127.0.0.1 unless the network is trusted, and set a token
//! otherwise: anyone who can reach it sees every process).
//!
//! * `/`: the cluster: every connected node with its statistics,
//!   refreshing live; per node the process table (sortable by mailbox
//!   length, run time, memory; filtered by name), the supervision trees
//!   (each supervisor with the processes it started), the registered names,
//!   and scheduler utilisation over the last five minutes as a chart; per
//!   process everything [`process_info`](crate::process_info) and
//!   `sys::get_state` give, links and monitors as links. Other nodes are
//!   asked through distribution. Everything is embedded: no CDN.
//! * `/metrics`: this node in the Prometheus text format (`graft_processes`,
//!   `graft_run_queue_length{worker}`, `graft_scheduler_utilization{worker}`,
//!   `graft_mailbox_messages`, `graft_dist_bytes_total{peer,direction}`,
//!   `graft_dist_frames_total{peer,direction}`, `graft_restarts_total`,
//!   `graft_crashes_total`, `graft_stack_bytes{kind}`, `graft_uptime_seconds`).
//! * `/api/...`: the JSON the page reads (`cluster`, `node/<id>`,
//!   `process/<node>/<creation>/<serial>`).
//!
//! With a token, every request must carry it: `?token=...` (the page keeps
//! passing it on), or an `Authorization: Bearer ...` header.
//!
//! [`NodeConfig::observer_config`]: crate::NodeConfig::observer_config

use crate::api::ProcessInfo;
use crate::node::NodeShared;
use crate::observe::{self, NodeStats, ProcessSummary};
use crate::pid::{NodeId, Pid};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How to serve the web observer.
///
/// ```
/// let cfg = graft::observer::ObserverConfig::new("127.0.0.1:0").token("s3cret");
/// let node = graft::Node::start(graft::NodeConfig::new("127.0.0.1:0").observer_config(cfg)).unwrap();
/// assert!(node.observer_addr().is_some());
/// node.shutdown();
/// ```
#[derive(Clone, Debug)]
pub struct ObserverConfig {
    pub(crate) addr: String,
    pub(crate) token: Option<String>,
}

impl ObserverConfig {
    /// Serve on `addr` (`"127.0.0.1:0"` picks a port; see
    /// [`Node::observer_addr`](crate::Node::observer_addr)).
    pub fn new(addr: &str) -> ObserverConfig {
        ObserverConfig {
            addr: addr.to_string(),
            token: None,
        }
    }

    /// Require `token` on every request.
    pub fn token(mut self, token: &str) -> ObserverConfig {
        self.token = Some(token.to_string());
        self
    }
}

/// Serves the observer of a running node; returns the bound address.
///
/// # Errors
///
/// `Error::Io` if the address cannot be bound; `Error::Remote` if this node
/// serves one already.
pub fn serve(node: &crate::Node, cfg: &ObserverConfig) -> Result<SocketAddr, crate::Error> {
    start(node.shared(), cfg)?;
    node.observer_addr()
        .ok_or_else(|| crate::Error::Remote("the observer did not start".into()))
}

impl crate::Node {
    /// Where this node's observer listens, if it serves one.
    pub fn observer_addr(&self) -> Option<SocketAddr> {
        self.shared().stats.observer.get().copied()
    }
}

mod http;

/// Utilisation samples kept (one a second: five minutes).
pub(crate) const SAMPLES: usize = 300;

pub(crate) fn start(n: &Arc<NodeShared>, cfg: &ObserverConfig) -> std::io::Result<()> {
    let server = http::Server::bind(&cfg.addr)
        .map_err(|e| std::io::Error::other(format!("observer on {}: {e}", cfg.addr)))?;
    let addr = server.addr();
    if n.stats.observer.set(addr).is_err() {
        return Err(std::io::Error::other(
            "this node serves an observer already",
        ));
    }
    log::info!(target: "graft::report", "graft: {} serves its observer on http://{addr}/", n.name);
    let token = cfg.token.clone();
    let weak = Arc::downgrade(n);
    let handler: Arc<http::Handler> = Arc::new(move |req: &http::Request| match weak.upgrade() {
        Some(n) => respond(&n, req, token.as_deref()),
        None => (503, "text/plain", b"the node is stopping\n".to_vec()),
    });
    let stopper = server.stopper();
    std::thread::Builder::new()
        .name("graft-observer".into())
        .spawn(move || server.run(handler))?;
    let weak = Arc::downgrade(n);
    std::thread::Builder::new()
        .name("graft-observer-clock".into())
        .spawn(move || sample_loop(&weak, &stopper))?;
    Ok(())
}

/// Samples utilisation once a second while the node lives, then stops
/// the server.
fn sample_loop(node: &Weak<NodeShared>, stopper: &http::Stopper) {
    let mut next_sample = std::time::Instant::now();
    loop {
        match node.upgrade() {
            Some(n) if !n.stopping.load(crate::loom::Ordering::Relaxed) => {
                if std::time::Instant::now() >= next_sample {
                    n.stats.sample(SAMPLES);
                    next_sample += Duration::from_secs(1);
                }
            }
            _ => {
                stopper.stop();
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The query parameter `key` of a URL.
fn query<'a>(url: &'a str, key: &str) -> Option<&'a str> {
    let q = url.split_once('?')?.1;
    q.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == key).then_some(v)
    })
}

/// Compares in time that depends on the lengths only (a guesser learns
/// nothing from how fast a wrong token is refused).
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn authorised(req: &http::Request, token: Option<&str>) -> bool {
    let Some(want) = token else { return true };
    if query(&req.url, "token").is_some_and(|t| same(t, want)) {
        return true;
    }
    req.header("Authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| same(t, want))
}

use http::Reply;

const HTML: &str = include_str!("observer/index.html");
const JSON: &str = "application/json";

fn respond(n: &Arc<NodeShared>, req: &http::Request, token: Option<&str>) -> Reply {
    if !authorised(req, token) {
        return (
            401,
            "text/plain",
            b"graft observer: a token is required\n".to_vec(),
        );
    }
    if req.method != "GET" {
        return (405, "text/plain", b"GET only\n".to_vec());
    }
    let path = req.url.split('?').next().unwrap_or("/");
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        [""] | ["index.html"] => (200, "text/html; charset=utf-8", HTML.as_bytes().to_vec()),
        ["metrics"] => (
            200,
            "text/plain; version=0.0.4",
            metrics(&observe::stats_of(n)).into_bytes(),
        ),
        ["api", "cluster"] => (200, JSON, cluster_json(n).into_bytes()),
        ["api", "node", id] => match id.parse::<u64>() {
            Ok(id) => match node_json(n, NodeId(id)) {
                Some(j) => (200, JSON, j.into_bytes()),
                None => (404, JSON, b"{\"error\":\"node not reachable\"}".to_vec()),
            },
            Err(_) => (400, JSON, b"{\"error\":\"bad node id\"}".to_vec()),
        },
        ["api", "process", node, creation, serial] => {
            match (
                node.parse::<u64>(),
                creation.parse::<u32>(),
                serial.parse::<u64>(),
            ) {
                (Ok(a), Ok(b), Ok(c)) => {
                    let pid = Pid::new(NodeId(a), b, c);
                    match process_json(n, pid) {
                        Some(j) => (200, JSON, j.into_bytes()),
                        None => (404, JSON, b"{\"error\":\"no such process\"}".to_vec()),
                    }
                }
                _ => (400, JSON, b"{\"error\":\"bad pid\"}".to_vec()),
            }
        }
        _ => (404, "text/plain", b"not found\n".to_vec()),
    }
}

/// Runs `f` in a fresh process of `n` (for calls to other nodes) and waits
/// up to 5 s for its value.
fn in_process<R: Send + 'static>(
    n: &NodeShared,
    f: impl FnOnce() -> R + Send + 'static,
) -> Option<R> {
    let (tx, rx) = std::sync::mpsc::channel();
    n.spawn(crate::node::SpawnSpec::default(), move || {
        let _ = tx.send(f());
    })
    .ok()?;
    rx.recv_timeout(Duration::from_secs(5)).ok()
}

/// The statistics of every node: this one and each connected one.
fn cluster(n: &NodeShared) -> Vec<NodeStats> {
    let mut all = vec![observe::stats_of(n)];
    let others = n.dist.nodes();
    if !others.is_empty() {
        if let Some(remote) = in_process(n, move || {
            others
                .into_iter()
                .filter_map(|o| observe::node_stats_on(o).ok())
                .collect::<Vec<_>>()
        }) {
            all.extend(remote);
        }
    }
    all
}

/// `(stats, processes, utilisation history)` of a node.
type NodeView = (NodeStats, Vec<ProcessSummary>, Vec<(f64, Vec<f64>)>);

fn node_view(n: &NodeShared, id: NodeId) -> Option<NodeView> {
    if id == n.id {
        return Some((
            observe::stats_of(n),
            observe::list_of(n),
            observe::history_of(n),
        ));
    }
    in_process(n, move || {
        crate::call_on(id, (), |()| {
            let n = &crate::context::worker().expect("in a process").node;
            (
                observe::stats_of(n),
                observe::list_of(n),
                observe::history_of(n),
            )
        })
        .ok()
    })
    .flatten()
}

fn process_view(n: &NodeShared, pid: Pid) -> Option<(ProcessInfo, Option<String>)> {
    in_process(n, move || {
        let info = observe::process_info_full(pid).ok()??;
        let behaviour = info.is_supervisor || info.initial_call.starts_with("gen_server");
        let state = behaviour.then(|| {
            match observe::sys_call(pid, observe::SysOp::GetState, Duration::from_secs(1)) {
                Ok(s) => s,
                Err(e) => format!("(no state: {e})"),
            }
        });
        Some((info, state))
    })
    .flatten()
}

// ---- Prometheus ----

/// Escapes a label value.
fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `s` in the Prometheus text exposition format.
pub(crate) fn metrics(s: &NodeStats) -> String {
    let mut o = String::new();
    let node = label(&s.name);
    let family = |o: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(o, "# HELP {name} {help}");
        let _ = writeln!(o, "# TYPE {name} {kind}");
    };
    family(&mut o, "graft_processes", "gauge", "Live processes.");
    let _ = writeln!(o, "graft_processes{{node=\"{node}\"}} {}", s.processes);
    family(
        &mut o,
        "graft_run_queue_length",
        "gauge",
        "Runnable processes per worker.",
    );
    for (w, q) in s.run_queue.iter().enumerate() {
        let _ = writeln!(
            o,
            "graft_run_queue_length{{node=\"{node}\",worker=\"{w}\"}} {q}"
        );
    }
    let _ = writeln!(
        o,
        "graft_run_queue_length{{node=\"{node}\",worker=\"global\"}} {}",
        s.global_queue
    );
    family(
        &mut o,
        "graft_scheduler_utilization",
        "gauge",
        "Busy fraction per worker over the last window.",
    );
    for (w, u) in s.utilisation.iter().enumerate() {
        let _ = writeln!(
            o,
            "graft_scheduler_utilization{{node=\"{node}\",worker=\"{w}\"}} {u:.6}"
        );
    }
    family(
        &mut o,
        "graft_mailbox_messages",
        "gauge",
        "Messages waiting in all mailboxes.",
    );
    let _ = writeln!(
        o,
        "graft_mailbox_messages{{node=\"{node}\"}} {}",
        s.mail_queued
    );
    family(
        &mut o,
        "graft_registered_names",
        "gauge",
        "Registered names.",
    );
    let _ = writeln!(
        o,
        "graft_registered_names{{node=\"{node}\"}} {}",
        s.registered
    );
    family(
        &mut o,
        "graft_restarts_total",
        "counter",
        "Supervisor restarts.",
    );
    let _ = writeln!(o, "graft_restarts_total{{node=\"{node}\"}} {}", s.restarts);
    family(
        &mut o,
        "graft_crashes_total",
        "counter",
        "Processes that crashed.",
    );
    let _ = writeln!(o, "graft_crashes_total{{node=\"{node}\"}} {}", s.crashes);
    family(
        &mut o,
        "graft_stack_bytes",
        "gauge",
        "Process stack memory.",
    );
    let _ = writeln!(
        o,
        "graft_stack_bytes{{node=\"{node}\",kind=\"mapped\"}} {}",
        s.stacks_mapped
    );
    let _ = writeln!(
        o,
        "graft_stack_bytes{{node=\"{node}\",kind=\"resident\"}} {}",
        s.stacks_resident
    );
    family(
        &mut o,
        "graft_uptime_seconds",
        "gauge",
        "Seconds since the node started.",
    );
    let _ = writeln!(
        o,
        "graft_uptime_seconds{{node=\"{node}\"}} {:.3}",
        s.uptime_ms as f64 / 1000.0
    );
    family(&mut o, "graft_dist_peers", "gauge", "Connected nodes.");
    let _ = writeln!(o, "graft_dist_peers{{node=\"{node}\"}} {}", s.peers.len());
    family(
        &mut o,
        "graft_dist_bytes_total",
        "counter",
        "Distribution payload bytes per peer.",
    );
    for p in &s.peers {
        let peer = label(&p.name);
        let _ = writeln!(
            o,
            "graft_dist_bytes_total{{node=\"{node}\",peer=\"{peer}\",direction=\"in\"}} {}",
            p.bytes_in
        );
        let _ = writeln!(
            o,
            "graft_dist_bytes_total{{node=\"{node}\",peer=\"{peer}\",direction=\"out\"}} {}",
            p.bytes_out
        );
    }
    family(
        &mut o,
        "graft_dist_frames_total",
        "counter",
        "Distribution frames per peer.",
    );
    for p in &s.peers {
        let peer = label(&p.name);
        let _ = writeln!(
            o,
            "graft_dist_frames_total{{node=\"{node}\",peer=\"{peer}\",direction=\"in\"}} {}",
            p.frames_in
        );
        let _ = writeln!(
            o,
            "graft_dist_frames_total{{node=\"{node}\",peer=\"{peer}\",direction=\"out\"}} {}",
            p.frames_out
        );
    }
    family(
        &mut o,
        "graft_dist_queued_bytes",
        "gauge",
        "Bytes waiting to be sent per peer.",
    );
    for p in &s.peers {
        let _ = writeln!(
            o,
            "graft_dist_queued_bytes{{node=\"{node}\",peer=\"{}\"}} {}",
            label(&p.name),
            p.queued_bytes
        );
    }
    family(
        &mut o,
        "graft_dist_heartbeat_rtt_seconds",
        "gauge",
        "Last heartbeat round trip per peer (absent until measured).",
    );
    for p in &s.peers {
        if let Some(us) = p.heartbeat_rtt_us {
            let _ = writeln!(
                o,
                "graft_dist_heartbeat_rtt_seconds{{node=\"{node}\",peer=\"{}\"}} {:.6}",
                label(&p.name),
                us as f64 / 1e6
            );
        }
    }
    o
}

// ---- JSON (hand-written: no serde in the dependency list) ----

/// A JSON string literal.
fn js(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            '<' => o.push_str("\\u003c"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn opt_js(s: Option<&str>) -> String {
    s.map_or_else(|| "null".into(), js)
}

/// A pid as JSON: `{"s": "<..>", "n": node, "c": creation, "i": serial}`
/// (the node id as a string: JavaScript numbers lose 64-bit integers).
fn pid_js(p: Pid) -> String {
    format!(
        "{{\"s\":{},\"n\":\"{}\",\"c\":{},\"i\":{}}}",
        js(&p.to_string()),
        p.node().0,
        p.creation(),
        p.serial()
    )
}

fn pids_js(v: &[Pid]) -> String {
    let items: Vec<String> = v.iter().map(|p| pid_js(*p)).collect();
    format!("[{}]", items.join(","))
}

fn floats_js(v: &[f64]) -> String {
    let items: Vec<String> = v.iter().map(|f| format!("{f:.4}")).collect();
    format!("[{}]", items.join(","))
}

fn u64s_js(v: &[u64]) -> String {
    let items: Vec<String> = v.iter().map(|f| f.to_string()).collect();
    format!("[{}]", items.join(","))
}

fn stats_js(s: &NodeStats) -> String {
    let peers: Vec<String> = s
        .peers
        .iter()
        .map(|p| {
            format!(
                "{{\"name\":{},\"addr\":{},\"frames_in\":{},\"bytes_in\":{},\"frames_out\":{},\"bytes_out\":{},\"queued_bytes\":{},\"rtt_us\":{}}}",
                js(&p.name),
                js(&p.addr),
                p.frames_in,
                p.bytes_in,
                p.frames_out,
                p.bytes_out,
                p.queued_bytes,
                p.heartbeat_rtt_us
                    .map_or_else(|| "null".to_string(), |u| u.to_string())
            )
        })
        .collect();
    format!(
        "{{\"name\":{},\"id\":\"{}\",\"addr\":{},\"uptime_ms\":{},\"processes\":{},\"workers\":{},\"run_queue\":{},\"global_queue\":{},\"utilisation\":{},\"stacks_mapped\":{},\"stacks_resident\":{},\"mail_queued\":{},\"registered\":{},\"restarts\":{},\"crashes\":{},\"peers\":[{}]}}",
        js(&s.name),
        s.id.0,
        js(&s.addr),
        s.uptime_ms,
        s.processes,
        s.workers,
        u64s_js(&s.run_queue),
        s.global_queue,
        floats_js(&s.utilisation),
        s.stacks_mapped,
        s.stacks_resident,
        s.mail_queued,
        s.registered,
        s.restarts,
        s.crashes,
        peers.join(",")
    )
}

fn status_js(s: crate::Status) -> &'static str {
    match s {
        crate::Status::Waiting => "\"waiting\"",
        crate::Status::Runnable => "\"runnable\"",
        crate::Status::Running => "\"running\"",
        crate::Status::Exited => "\"exiting\"",
    }
}

/// The process list as JSON rows (shared by the observer and its bench).
pub(crate) fn list_js(list: &[ProcessSummary]) -> String {
    // Written straight into one buffer (no string per field): this is the
    // observer's largest answer (see the `observer` bench).
    let mut o = String::with_capacity(list.len() * 220 + 2);
    o.push('[');
    for (i, p) in list.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        o.push_str("{\"pid\":");
        push_pid(&mut o, p.pid);
        o.push_str(",\"name\":");
        match &p.name {
            Some(n) => push_js(&mut o, n),
            None => o.push_str("null"),
        }
        o.push_str(",\"call\":");
        push_js(&mut o, &p.initial_call);
        let _ = write!(
            o,
            ",\"status\":{},\"mailbox\":{},\"runs\":{},\"run_ns\":{},\"memory\":{},\"parent\":",
            status_js(p.status),
            p.mailbox_len,
            p.runs,
            p.run_time_ns,
            p.memory
        );
        match p.parent {
            Some(pp) => push_pid(&mut o, pp),
            None => o.push_str("null"),
        }
        o.push_str(if p.is_supervisor {
            ",\"sup\":true}"
        } else {
            ",\"sup\":false}"
        });
    }
    o.push(']');
    o
}

/// [`pid_js`] into `o`.
fn push_pid(o: &mut String, p: Pid) {
    // `<node.creation.serial>`: nothing in it needs escaping in JSON.
    let _ = write!(
        o,
        "{{\"s\":\"{p}\",\"n\":\"{}\",\"c\":{},\"i\":{}}}",
        p.node().0,
        p.creation(),
        p.serial()
    );
}

/// [`js`] into `o`.
fn push_js(o: &mut String, s: &str) {
    if s.bytes()
        .all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b != b'<')
    {
        o.push('"');
        o.push_str(s);
        o.push('"');
    } else {
        o.push_str(&js(s));
    }
}

fn cluster_json(n: &NodeShared) -> String {
    let nodes: Vec<String> = cluster(n).iter().map(stats_js).collect();
    format!(
        "{{\"self\":\"{}\",\"nodes\":[{}]}}",
        n.id.0,
        nodes.join(",")
    )
}

fn node_json(n: &NodeShared, id: NodeId) -> Option<String> {
    let (stats, list, history) = node_view(n, id)?;
    let hist: Vec<String> = history
        .iter()
        .map(|(ago, u)| format!("[{ago:.1},{}]", floats_js(u)))
        .collect();
    Some(format!(
        "{{\"stats\":{},\"processes\":{},\"history\":[{}]}}",
        stats_js(&stats),
        list_js(&list),
        hist.join(",")
    ))
}

fn process_json(n: &NodeShared, pid: Pid) -> Option<String> {
    let (i, state) = process_view(n, pid)?;
    Some(format!(
        "{{\"pid\":{},\"node\":\"{}\",\"status\":{},\"registered_name\":{},\"initial_call\":{},\"spawned_at\":{},\"parent\":{},\"ancestors\":{},\"supervisor\":{},\"is_supervisor\":{},\"links\":{},\"monitors\":{},\"monitored_by\":{},\"trap_exits\":{},\"mailbox_len\":{},\"runs\":{},\"run_time_ns\":{},\"stack_size\":{},\"stack_in_use\":{},\"stack_high_water\":{},\"state\":{}}}",
        pid_js(i.pid),
        i.pid.node().0,
        status_js(i.status),
        opt_js(i.registered_name.as_deref()),
        js(&i.initial_call),
        js(&i.spawned_at),
        i.parent.map_or_else(|| "null".into(), pid_js),
        pids_js(&i.ancestors),
        i.supervisor.map_or_else(|| "null".into(), pid_js),
        i.is_supervisor,
        pids_js(&i.links),
        pids_js(&i.monitors),
        pids_js(&i.monitored_by),
        i.trap_exits,
        i.mailbox_len,
        i.runs,
        i.run_time_ns,
        i.stack_size,
        i.stack_in_use,
        i.stack_high_water,
        opt_js(state.as_deref())
    ))
}

/// Renders the process list of this node's processes as the observer sends
/// it (for the `observer` bench); returns the JSON's length.
#[doc(hidden)]
pub fn render_process_list(node: &crate::Node) -> usize {
    list_js(&observe::list_of(node.shared())).len()
}

/// The Prometheus text of a node's statistics, from any thread.
///
/// ```
/// let node = graft::Node::start(graft::NodeConfig::new("127.0.0.1:0")).unwrap();
/// assert!(graft::observer::metrics_text(&node).contains("graft_processes"));
/// node.shutdown();
/// ```
pub fn metrics_text(node: &crate::Node) -> String {
    metrics(&node.stats())
}
