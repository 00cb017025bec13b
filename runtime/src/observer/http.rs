//! The observer's HTTP/1.1 server: small, blocking, and bounded against
//! slow or hostile clients.
//!
//! Why not tiny_http (used before): its connection pool loses a wakeup. Its
//! accept thread hands a connection to an idle pool thread when its count of
//! waiting threads is not zero, but that count still includes threads that
//! were notified and have not run yet; a burst of connections then leaves a
//! task in the queue with no thread to take it. With no read timeouts, four
//! clients holding half a request (its four pool threads) kept every later
//! request unanswered for as long as they stayed connected.
//!
//! Here the accept thread never waits on anything but `accept`. Each
//! connection gets its own thread and these rules:
//!
//! * at most [`MAX_CONNS`] connections at a time; a new one past the limit
//!   drops the oldest connection that is still sending its head (else the
//!   oldest of all), so no number of idle or slow sockets can keep a new
//!   request out;
//! * the whole head (request line and headers) must arrive within
//!   [`HEAD_DEADLINE`] and fit in [`MAX_HEAD`] bytes (else 408 / 431);
//! * bodies are never read (the observer serves `GET` only), so a body that
//!   never ends holds nothing;
//! * the answer must be taken by the client within [`WRITE_DEADLINE`],
//!   then the client has [`LINGER`] to close (what it still sends is read
//!   and thrown away, so that the close does not reset the answer away);
//! * every answer closes the connection (`Connection: close`): there are no
//!   idle keep-alive sockets to hold.
//!
//! So a well-behaved request (its head sent at once) waits for nothing but
//! its own answer, whatever other clients do.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connections served at once.
pub(crate) const MAX_CONNS: usize = 32;
/// Time a client has to send its whole request head.
pub(crate) const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// Time a client has to take the whole answer.
pub(crate) const WRITE_DEADLINE: Duration = Duration::from_secs(30);
/// Time given a client to close after its answer.
pub(crate) const LINGER: Duration = Duration::from_secs(2);
/// Largest request head accepted.
pub(crate) const MAX_HEAD: usize = 8 * 1024;

/// A parsed request head.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) method: String,
    /// The request target (`/path?query`).
    pub(crate) url: String,
    headers: Vec<(String, String)>,
}

impl Request {
    /// The value of header `name` (case-insensitive), the first if several.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// `(status, content type, body)`.
pub(crate) type Reply = (u16, &'static str, Vec<u8>);

/// What answers a request (runs on the connection's thread).
pub(crate) type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

struct Conn {
    id: u64,
    /// Still reading its head.
    reading: Arc<AtomicBool>,
    stream: TcpStream,
}

#[derive(Default)]
struct Conns {
    live: Mutex<Vec<Conn>>,
    next: AtomicU64,
}

impl Conns {
    /// Records `stream`, dropping a connection if the limit is reached;
    /// returns its id and its `reading` flag.
    fn admit(&self, stream: &TcpStream) -> Option<(u64, Arc<AtomicBool>)> {
        let clone = stream.try_clone().ok()?;
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if live.len() >= MAX_CONNS {
            // Oldest first: the vector is in arrival order.
            let victim = live
                .iter()
                .position(|c| c.reading.load(Ordering::Acquire))
                .unwrap_or(0);
            let c = live.remove(victim);
            log::debug!("graft: observer: too many connections, dropping one");
            let _ = c.stream.shutdown(Shutdown::Both);
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let reading = Arc::new(AtomicBool::new(true));
        live.push(Conn {
            id,
            reading: reading.clone(),
            stream: clone,
        });
        Some((id, reading))
    }

    fn leave(&self, id: u64) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|c| c.id != id);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.live.lock().unwrap().len()
    }
}

/// A bound server; [`Server::run`] serves it on the calling thread.
pub(crate) struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    conns: Arc<Conns>,
}

impl Server {
    pub(crate) fn bind(addr: &str) -> std::io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        Ok(Server {
            listener,
            addr,
            stop: Arc::new(AtomicBool::new(false)),
            conns: Arc::default(),
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What stops [`Server::run`] from another thread.
    pub(crate) fn stopper(&self) -> Stopper {
        Stopper {
            stop: self.stop.clone(),
            addr: self.addr,
        }
    }

    /// Accepts until stopped.
    pub(crate) fn run(self, handler: Arc<Handler>) {
        for s in self.listener.incoming() {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let stream = match s {
                Ok(s) => s,
                Err(e) => {
                    // Out of descriptors and the like: wait, never give up.
                    log::warn!("graft: observer: accept: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            let Some((id, reading)) = self.conns.admit(&stream) else {
                continue;
            };
            let (conns, handler) = (self.conns.clone(), handler.clone());
            let spawned = std::thread::Builder::new()
                .name("graft-observer-conn".into())
                .stack_size(1 << 20)
                .spawn(move || {
                    serve_conn(stream, &reading, &*handler);
                    conns.leave(id);
                });
            if spawned.is_err() {
                self.conns.leave(id);
            }
        }
    }
}

/// Stops a running [`Server`].
pub(crate) struct Stopper {
    stop: Arc<AtomicBool>,
    addr: SocketAddr,
}

impl Stopper {
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept (a connection to ourselves).
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

/// Reads one request head from `s` within [`HEAD_DEADLINE`]: `Err(status)`
/// to answer when it is bad, too large or too slow, `Ok(None)` when the
/// client went away.
fn read_head(s: &mut TcpStream) -> Result<Option<Request>, u16> {
    let deadline = Instant::now() + HEAD_DEADLINE;
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() >= MAX_HEAD {
            return Err(431);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(408);
        }
        if s.set_read_timeout(Some(left)).is_err() {
            return Ok(None);
        }
        // Never read past what the head may still use.
        let room = (MAX_HEAD + 3 - buf.len()).min(chunk.len());
        match s.read(&mut chunk[..room]) {
            Ok(0) => return Ok(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Ok(None),
        }
    };
    if end > MAX_HEAD {
        return Err(431);
    }
    parse_head(&buf[..end]).map(Some).ok_or(400)
}

/// Parses `METHOD SP target SP HTTP/1.x CRLF (name: value CRLF)*`.
fn parse_head(head: &[u8]) -> Option<Request> {
    let head = std::str::from_utf8(head).ok()?;
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, url, version) = (first.next()?, first.next()?, first.next()?);
    if first.next().is_some()
        || method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
        || !url.starts_with('/')
        || !version.starts_with("HTTP/1.")
    {
        return None;
    }
    let mut headers = Vec::new();
    for line in lines {
        let (k, v) = line.split_once(':')?;
        if k.is_empty() || k.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return None;
        }
        headers.push((k.to_string(), v.trim().to_string()));
    }
    Some(Request {
        method: method.to_string(),
        url: url.to_string(),
        headers,
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        503 => "Service Unavailable",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    }
}

/// Writes the whole answer within [`WRITE_DEADLINE`].
fn write_reply(s: &mut TcpStream, (status, ctype, body): Reply) {
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n",
        reason(status),
        body.len()
    );
    let deadline = Instant::now() + WRITE_DEADLINE;
    let mut all = head.into_bytes();
    all.extend_from_slice(&body);
    let mut at = 0;
    while at < all.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_write_timeout(Some(left)).is_err() {
            return;
        }
        match s.write(&all[at..]) {
            Ok(0) => return,
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
    let _ = s.flush();
    let _ = s.shutdown(Shutdown::Write);
    linger(s);
}

/// After the answer, reads what the client still sends (a head cut short,
/// a body) for a bounded time before closing: closing with unread bytes
/// resets the connection, and a reset can throw away the answer before
/// the client reads it.
fn linger(s: &mut TcpStream) {
    let deadline = Instant::now() + LINGER;
    let mut left: usize = 64 * 1024;
    let mut chunk = [0u8; 2048];
    while left > 0 {
        let t = deadline.saturating_duration_since(Instant::now());
        if t.is_zero() || s.set_read_timeout(Some(t)).is_err() {
            return;
        }
        match s.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => left = left.saturating_sub(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn serve_conn(mut s: TcpStream, reading: &AtomicBool, handler: &Handler) {
    let _ = s.set_nodelay(true);
    let reply = match read_head(&mut s) {
        Ok(None) => return,
        Ok(Some(req)) => {
            reading.store(false, Ordering::Release);
            handler(&req)
        }
        Err(status) => (
            status,
            "text/plain",
            format!("{}\n", reason(status)).into_bytes(),
        ),
    };
    reading.store(false, Ordering::Release);
    write_reply(&mut s, reply);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_parse_strictly() {
        let r = parse_head(b"GET /a?b=c HTTP/1.1\r\nHost: x\r\nAuthorization:  Bearer t ").unwrap();
        assert_eq!((r.method.as_str(), r.url.as_str()), ("GET", "/a?b=c"));
        assert_eq!(r.header("authorization"), Some("Bearer t"));
        assert_eq!(r.header("host"), Some("x"));
        for bad in [
            &b""[..],
            b"GET",
            b"GET /",
            b"GET / HTTP/2",
            b"GET x HTTP/1.1",
            b"get / HTTP/1.1",
            b"GET / HTTP/1.1 extra",
            b"GET / HTTP/1.1\r\nno colon",
            b"GET / HTTP/1.1\r\nbad name: v",
            b"GET / HTTP/1.1\r\n: v",
            b"\xff\xff / HTTP/1.1",
        ] {
            assert!(parse_head(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn the_limit_drops_the_oldest_still_reading() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let conns = Conns::default();
        let mut keep = Vec::new();
        let mut flags = Vec::new();
        for i in 0..MAX_CONNS {
            let _c = TcpStream::connect(addr).unwrap();
            let (s, _) = l.accept().unwrap();
            let (_, reading) = conns.admit(&s).unwrap();
            if i == 0 {
                // The oldest is answering: not the one to drop.
                reading.store(false, Ordering::Release);
            }
            flags.push(reading);
            keep.push((_c, s));
        }
        assert_eq!(conns.len(), MAX_CONNS);
        let _c = TcpStream::connect(addr).unwrap();
        let (s, _) = l.accept().unwrap();
        conns.admit(&s).unwrap();
        assert_eq!(conns.len(), MAX_CONNS);
        let live = conns.live.lock().unwrap();
        assert_eq!(live[0].id, 0, "the answering one stays");
        assert_eq!(live[1].id, 2, "the oldest still reading went");
    }
}
