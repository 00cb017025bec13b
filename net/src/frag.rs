//! Fragments: messages larger than one frame, split on the sender and put
//! back together on the receiver, interleaved with other traffic.
//!
//! A payload over [`FRAGMENT`] bytes is not sent as one frame: the writer
//! sends it as a `FRAG_BEGIN` frame and as many `FRAG_MORE` frames as it
//! takes, at most [`FRAGMENT`] payload bytes each, and between two writes
//! of fragments it sends whatever small frames were queued meanwhile (see
//! `conn.rs`, "Lanes"). Erlang does the same since OTP 22 (DIST fragments).
//!
//! ```text
//! FRAG_BEGIN (kind 5): id u64 | total u64 | kind u8 | flags u8 | first bytes
//! FRAG_MORE  (kind 6): id u64 | next bytes
//! ```
//!
//! All integers are big-endian. `total` is the length of the whole payload
//! as sent (after compression, when `flags` says it is compressed); the
//! message is complete, and handed to the handler as one frame of `kind`,
//! when `total` bytes have arrived.
//!
//! # What the receiver refuses (the connection is dropped)
//!
//! * a `total` over the receiver's `max_message_size`, or that would take the
//!   bytes announced by all messages in progress over it (a length bomb);
//! * more than [`MAX_PARTIALS`] messages in progress at once;
//! * a `FRAG_BEGIN` for an id in progress, a `FRAG_MORE` for an id that is
//!   not, bytes beyond `total`, an empty `FRAG_MORE`, a transport kind or
//!   unknown flags in `FRAG_BEGIN`, a header cut short;
//! * a message in progress that gets no fragment for the connection's
//!   heartbeat timeout (a sender that never finishes): the sender
//!   interleaves every message it has in flight round-robin, so a healthy
//!   one always progresses.
//!
//! A connection that closes with messages in progress drops them (they were
//! never delivered, as for any frame the connection did not carry whole).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::frame::{FIRST_USER_KIND, FLAG_COMPRESSED};
use crate::NetError;

/// Payload bytes per fragment (64 KiB, as Erlang's default fragment size).
pub(crate) const FRAGMENT: usize = 64 << 10;

/// At most this many fragmented messages in progress per connection, on
/// either side.
pub(crate) const MAX_PARTIALS: usize = 64;

/// Bytes before a `FRAG_BEGIN`'s data: id, total, kind, flags.
pub(crate) const BEGIN_HEADER: usize = 8 + 8 + 1 + 1;
/// Bytes before a `FRAG_MORE`'s data: id.
pub(crate) const MORE_HEADER: usize = 8;

/// A message being sent in fragments (sender side).
#[derive(Debug)]
pub(crate) struct Large {
    pub(crate) id: u64,
    /// The order key of its sender (see `conn.rs`).
    pub(crate) key: u64,
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) data: Arc<Vec<u8>>,
    /// Bytes of `data` already taken for the wire.
    pub(crate) sent: usize,
}

impl Large {
    /// The next fragment's header and the range of `data` it carries; marks
    /// it taken.
    pub(crate) fn next_fragment(&mut self, header: &mut Vec<u8>) -> std::ops::Range<usize> {
        header.clear();
        header.extend_from_slice(&self.id.to_be_bytes());
        if self.sent == 0 {
            header.extend_from_slice(&(self.data.len() as u64).to_be_bytes());
            header.push(self.kind);
            header.push(self.flags);
        }
        let from = self.sent;
        let to = (from + FRAGMENT).min(self.data.len());
        self.sent = to;
        from..to
    }

    /// Whether every byte has been taken.
    pub(crate) fn done(&self) -> bool {
        self.sent >= self.data.len()
    }
}

/// One message being put back together (receiver side).
#[derive(Debug)]
struct Partial {
    kind: u8,
    flags: u8,
    total: usize,
    data: Vec<u8>,
    last: Instant,
}

/// The receiver's messages in progress, bounded in count and in bytes.
#[derive(Debug)]
pub(crate) struct Reassembly {
    partials: HashMap<u64, Partial>,
    /// Sum of `total` over `partials`.
    announced: usize,
    max_message: usize,
}

/// A message put back together: kind, flags (as sent), payload.
pub(crate) type Whole = (u8, u8, Vec<u8>);

fn cut(what: &str) -> NetError {
    NetError::Protocol(format!("{what} fragment header cut short"))
}

impl Reassembly {
    pub(crate) fn new(max_message: usize) -> Reassembly {
        Reassembly {
            partials: HashMap::new(),
            announced: 0,
            max_message,
        }
    }

    /// Messages in progress.
    pub(crate) fn in_progress(&self) -> usize {
        self.partials.len()
    }

    /// A `FRAG_BEGIN` frame; the whole message if this one completed it.
    pub(crate) fn begin(&mut self, p: &[u8], now: Instant) -> Result<Option<Whole>, NetError> {
        if p.len() < BEGIN_HEADER {
            return Err(cut("first"));
        }
        let id = u64::from_be_bytes(p[0..8].try_into().expect("8 bytes"));
        let total = u64::from_be_bytes(p[8..16].try_into().expect("8 bytes"));
        let (kind, flags) = (p[16], p[17]);
        let data = &p[BEGIN_HEADER..];
        if kind < FIRST_USER_KIND {
            return Err(NetError::Protocol(format!(
                "fragmented message of transport kind {kind}"
            )));
        }
        if flags & !FLAG_COMPRESSED != 0 {
            return Err(NetError::Protocol(format!(
                "unknown frame flags {flags:#04x} in a fragmented message"
            )));
        }
        if total > self.max_message as u64 {
            return Err(NetError::Protocol(format!(
                "fragmented message of {total} bytes announced, over the maximum message size of {} bytes",
                self.max_message
            )));
        }
        let total = total as usize;
        if self.partials.contains_key(&id) {
            return Err(NetError::Protocol(format!(
                "fragmented message {id} begun twice"
            )));
        }
        if self.partials.len() >= MAX_PARTIALS {
            return Err(NetError::Protocol(format!(
                "more than {MAX_PARTIALS} fragmented messages in progress"
            )));
        }
        if self.announced + total > self.max_message {
            return Err(NetError::Protocol(format!(
                "fragmented messages in progress would hold {} bytes, over the maximum message size of {} bytes",
                self.announced + total,
                self.max_message
            )));
        }
        if data.len() > total {
            return Err(NetError::Protocol(format!(
                "fragmented message {id} carries more than its {total} bytes"
            )));
        }
        if data.len() == total {
            return Ok(Some((kind, flags, data.to_vec())));
        }
        // Grown as bytes come, from at most 64 MiB: a peer's announcement
        // alone never reserves more (pages are committed as written).
        let mut buf = Vec::with_capacity(total.min(64 << 20));
        buf.extend_from_slice(data);
        self.announced += total;
        self.partials.insert(
            id,
            Partial {
                kind,
                flags,
                total,
                data: buf,
                last: now,
            },
        );
        Ok(None)
    }

    /// A `FRAG_MORE` frame; the whole message if this one completed it.
    pub(crate) fn more(&mut self, p: &[u8], now: Instant) -> Result<Option<Whole>, NetError> {
        if p.len() < MORE_HEADER {
            return Err(cut("next"));
        }
        let id = u64::from_be_bytes(p[0..8].try_into().expect("8 bytes"));
        let data = &p[MORE_HEADER..];
        let Some(part) = self.partials.get_mut(&id) else {
            return Err(NetError::Protocol(format!(
                "fragment for message {id}, which is not in progress"
            )));
        };
        if data.is_empty() {
            return Err(NetError::Protocol(format!(
                "empty fragment for message {id}"
            )));
        }
        if part.data.len() + data.len() > part.total {
            return Err(NetError::Protocol(format!(
                "fragments of message {id} overrun its {} bytes",
                part.total
            )));
        }
        part.data.extend_from_slice(data);
        part.last = now;
        if part.data.len() < part.total {
            return Ok(None);
        }
        let part = self.partials.remove(&id).expect("present");
        self.announced -= part.total;
        Ok(Some((part.kind, part.flags, part.data)))
    }

    /// When the reassembly that went longest without a fragment reaches
    /// `limit` (none in progress: `None`).
    pub(crate) fn stall_due(&self, limit: Duration) -> Option<Instant> {
        self.partials.values().map(|p| p.last + limit).min()
    }

    /// An error if some message in progress got no fragment for `limit`.
    pub(crate) fn check_stalled(&self, now: Instant, limit: Duration) -> Result<(), NetError> {
        for (id, p) in &self.partials {
            let idle = now.saturating_duration_since(p.last);
            if idle >= limit {
                return Err(NetError::Protocol(format!(
                    "fragmented message {id} stalled: {} of {} bytes, nothing more for {} ms",
                    p.data.len(),
                    p.total,
                    idle.as_millis()
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn begin(id: u64, total: u64, kind: u8, flags: u8, data: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&id.to_be_bytes());
        v.extend_from_slice(&total.to_be_bytes());
        v.push(kind);
        v.push(flags);
        v.extend_from_slice(data);
        v
    }

    fn more(id: u64, data: &[u8]) -> Vec<u8> {
        let mut v = id.to_be_bytes().to_vec();
        v.extend_from_slice(data);
        v
    }

    fn protocol<T: std::fmt::Debug>(r: Result<T, NetError>) -> String {
        match r {
            Err(NetError::Protocol(m)) => m,
            other => panic!("expected a protocol error, got {other:?}"),
        }
    }

    #[test]
    fn sender_fragments_reassemble_interleaved() {
        let now = Instant::now();
        let mut r = Reassembly::new(1 << 20);
        let datas: Vec<Vec<u8>> = (0..3u8)
            .map(|i| {
                (0..FRAGMENT * 3 + 17 * i as usize)
                    .map(|b| b as u8 ^ i)
                    .collect()
            })
            .collect();
        let mut larges: Vec<Large> = datas
            .iter()
            .enumerate()
            .map(|(i, d)| Large {
                id: i as u64 + 7,
                key: 0,
                kind: 16 + i as u8,
                flags: 0,
                data: Arc::new(d.clone()),
                sent: 0,
            })
            .collect();
        let mut got = Vec::new();
        let mut header = Vec::new();
        while !larges.is_empty() {
            for l in larges.iter_mut() {
                let first = l.sent == 0;
                let range = l.next_fragment(&mut header);
                let mut frame = header.clone();
                frame.extend_from_slice(&l.data[range]);
                let out = if first {
                    r.begin(&frame, now)
                } else {
                    r.more(&frame, now)
                };
                if let Some(w) = out.unwrap() {
                    got.push(w);
                }
            }
            larges.retain(|l| !l.done());
        }
        assert_eq!(got.len(), 3);
        for (kind, _, data) in got {
            assert_eq!(data, datas[(kind - 16) as usize]);
        }
        assert_eq!(r.in_progress(), 0);
        assert_eq!(r.announced, 0);
    }

    #[test]
    fn length_bombs_are_refused() {
        let now = Instant::now();
        let mut r = Reassembly::new(1000);
        let m = protocol(r.begin(&begin(1, 1001, 16, 0, &[0; 10]), now));
        assert!(m.contains("over the maximum message size"), "{m}");
        let mut r = Reassembly::new(1000);
        assert!(r
            .begin(&begin(1, 600, 16, 0, &[0; 10]), now)
            .unwrap()
            .is_none());
        let m = protocol(r.begin(&begin(2, 600, 16, 0, &[0; 10]), now));
        assert!(m.contains("in progress would hold 1200"), "{m}");
        let mut r = Reassembly::new(1 << 30);
        for id in 0..MAX_PARTIALS as u64 {
            assert!(r
                .begin(&begin(id, 100, 16, 0, &[1]), now)
                .unwrap()
                .is_none());
        }
        let m = protocol(r.begin(&begin(999, 100, 16, 0, &[1]), now));
        assert!(m.contains("in progress"), "{m}");
        // u64::MAX announced: refused before any allocation.
        let mut r = Reassembly::new(1 << 40);
        let m = protocol(r.begin(&begin(1, u64::MAX, 16, 0, &[]), now));
        assert!(m.contains("over the maximum"), "{m}");
    }

    #[test]
    fn bad_fragments_are_refused() {
        let now = Instant::now();
        let mut r = Reassembly::new(1 << 20);
        protocol(r.begin(&[0; BEGIN_HEADER - 1], now));
        protocol(r.more(&[0; MORE_HEADER - 1], now));
        // Unknown id, out of order (MORE before BEGIN).
        let m = protocol(r.more(&more(5, &[1, 2]), now));
        assert!(m.contains("not in progress"), "{m}");
        // Transport kind, bad flags.
        protocol(r.begin(&begin(1, 100, 4, 0, &[1]), now));
        protocol(r.begin(&begin(1, 100, 16, 0x80, &[1]), now));
        // More than announced, in the first or a later fragment.
        protocol(r.begin(&begin(1, 2, 16, 0, &[1, 2, 3]), now));
        let mut r = Reassembly::new(1 << 20);
        r.begin(&begin(1, 4, 16, 0, &[1, 2]), now).unwrap();
        let m = protocol(r.more(&more(1, &[3, 4, 5]), now));
        assert!(m.contains("overrun"), "{m}");
        // Begun twice; empty fragment.
        let mut r = Reassembly::new(1 << 20);
        r.begin(&begin(1, 4, 16, 0, &[1, 2]), now).unwrap();
        protocol(r.begin(&begin(1, 4, 16, 0, &[1, 2]), now));
        protocol(r.more(&more(1, &[]), now));
        // Completed: the id is free again, and a later fragment for it is refused.
        let mut r = Reassembly::new(1 << 20);
        r.begin(&begin(1, 4, 16, 0, &[1, 2]), now).unwrap();
        let w = r.more(&more(1, &[3, 4]), now).unwrap().unwrap();
        assert_eq!(w, (16, 0, vec![1, 2, 3, 4]));
        protocol(r.more(&more(1, &[5]), now));
    }

    #[test]
    fn a_message_that_never_finishes_stalls() {
        let t0 = Instant::now();
        let mut r = Reassembly::new(1 << 20);
        r.begin(&begin(1, 100, 16, 0, &[1]), t0).unwrap();
        r.check_stalled(t0 + Duration::from_millis(10), Duration::from_secs(1))
            .unwrap();
        let m = protocol(r.check_stalled(t0 + Duration::from_secs(2), Duration::from_secs(1)));
        assert!(m.contains("stalled"), "{m}");
    }

    /// The scan's due time for reassemblies (`IoConn::scan_due`): the
    /// message that went longest without a fragment, at the moment
    /// `check_stalled` starts failing it; none while nothing is in progress.
    #[test]
    fn the_stall_is_due_when_the_oldest_fragment_ages_out() {
        let (t0, limit) = (Instant::now(), Duration::from_secs(1));
        let mut r = Reassembly::new(1 << 20);
        assert_eq!(r.stall_due(limit), None);
        r.begin(&begin(1, 100, 16, 0, &[1]), t0).unwrap();
        r.begin(&begin(2, 100, 16, 0, &[1]), t0 + Duration::from_millis(300))
            .unwrap();
        // A fragment of 1 later: 2 is now the one that waited longest.
        assert!(r
            .more(&more(1, &[2]), t0 + Duration::from_millis(500))
            .unwrap()
            .is_none());
        let due = r.stall_due(limit).expect("two in progress");
        assert_eq!(due, t0 + Duration::from_millis(1300));
        r.check_stalled(due - Duration::from_millis(1), limit)
            .unwrap();
        protocol(r.check_stalled(due, limit));
    }
}
