//! Frames: the unit of everything on the wire.
//!
//! ```text
//! byte  0      4      5       6                     6 + length
//!       +------+------+-------+---------------------+
//!       |length| kind | flags |  payload (length B)  |
//!       +------+------+-------+---------------------+
//! ```
//!
//! | field   | size | meaning                                                   |
//! |---------|------|-----------------------------------------------------------|
//! | length  | u32  | payload bytes as sent (after compression), big-endian     |
//! | kind    | u8   | `0..FIRST_USER_KIND` transport, the rest the runtime's     |
//! | flags   | u8   | bit 0: payload is raw-deflate compressed; others must be 0 |
//!
//! A length above the receiver's maximum frame size, a flag bit other than
//! bit 0, an unknown transport kind, or a compressed payload that does not
//! inflate (or inflates beyond the maximum) is a protocol error: the
//! receiver drops that one connection.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use flate2::Compression;

use crate::session::SealedReader;
use crate::NetError;

/// Bytes before the payload: length (4), kind (1), flags (1).
pub(crate) const HEADER_LEN: usize = 6;

/// Flag bit: the payload is raw-deflate compressed.
pub(crate) const FLAG_COMPRESSED: u8 = 1;

/// The first frame kind that belongs to the user of the transport (the
/// runtime). Kinds `0..FIRST_USER_KIND` are the transport's own:
///
/// | kind   | use                                              |
/// |--------|--------------------------------------------------|
/// | 0      | never sent                                       |
/// | 1      | handshake: preface (magic and version)           |
/// | 2      | handshake: a Noise message                       |
/// | 3      | handshake: a clear refusal                       |
/// | 4      | heartbeat (empty, or a 9-byte ping or its echo)  |
/// | 5      | the first fragment of a large message (`frag.rs`) |
/// | 6      | a further fragment of a large message            |
/// | 7..=15 | reserved; receiving one drops the connection     |
///
/// [`Transport::send`](crate::Transport::send) refuses kinds below this value.
pub const FIRST_USER_KIND: u8 = 16;

/// The transport's own frame kinds.
pub(crate) mod kind {
    /// Handshake: the preface, magic and protocol version.
    pub(crate) const HELLO: u8 = 1;
    /// Handshake: a Noise handshake or transport message.
    pub(crate) const NOISE: u8 = 2;
    /// Handshake: a clear refusal from either side.
    pub(crate) const STATUS: u8 = 3;
    /// Sent by an idle writer once per heartbeat tick.
    pub(crate) const HEARTBEAT: u8 = 4;
    /// The first fragment of a large message (see `frag.rs`).
    pub(crate) const FRAG_BEGIN: u8 = 5;
    /// A further fragment of a large message.
    pub(crate) const FRAG_MORE: u8 = 6;
}

/// Appends one frame to `out`, payload as given.
#[inline]
pub(crate) fn encode(out: &mut Vec<u8>, kind: u8, flags: u8, payload: &[u8]) {
    debug_assert!(payload.len() <= u32::MAX as usize);
    out.reserve(HEADER_LEN + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(payload);
}

/// Raw-deflates `payload` (fast level).
pub(crate) fn deflate(payload: &[u8]) -> Vec<u8> {
    let mut enc = DeflateEncoder::new(Vec::with_capacity(payload.len() / 2), Compression::fast());
    // Writing into a Vec cannot fail.
    enc.write_all(payload).expect("deflate into a Vec");
    enc.finish().expect("deflate into a Vec")
}

/// Inflates a compressed payload, refusing to produce more than `max` bytes.
pub(crate) fn inflate(data: &[u8], max: usize) -> Result<Vec<u8>, NetError> {
    let mut out = Vec::with_capacity((data.len() * 4).min(max));
    let mut dec = DeflateDecoder::new(data).take(max as u64 + 1);
    dec.read_to_end(&mut out)
        .map_err(|e| NetError::Protocol(format!("corrupt compressed payload: {e}")))?;
    if out.len() > max {
        return Err(NetError::Protocol(format!(
            "compressed payload inflates beyond the maximum frame size of {max} bytes"
        )));
    }
    Ok(out)
}

/// One frame borrowed from a [`Decoder`]'s buffer.
#[derive(Debug)]
pub(crate) struct RawFrame<'a> {
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) payload: &'a [u8],
}

/// Where a [`Decoder`]'s buffer starts.
pub(crate) const DECODER_START: usize = 4096;

/// Read buffer and frame parser: one `read` may bring many frames, and
/// [`next_frame`](Decoder::next_frame) hands them out without copying.
///
/// `buf[start..end]` holds received bytes not yet handed out.
#[derive(Debug)]
pub(crate) struct Decoder {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max_frame: usize,
    /// The size `buf` returns to once a large frame has gone.
    base: usize,
}

impl Decoder {
    /// `capacity`: the buffer's working size. It starts at
    /// [`DECODER_START`] bytes and grows to `capacity` only while reads fill
    /// it, so a connection that carries little (a probe, a handshake that
    /// is dropped) never pays for zeroing a whole read buffer.
    pub(crate) fn new(capacity: usize, max_frame: usize) -> Decoder {
        Decoder {
            buf: vec![0; DECODER_START.min(capacity).max(HEADER_LEN)],
            start: 0,
            end: 0,
            max_frame,
            base: capacity.max(HEADER_LEN),
        }
    }

    /// The next complete frame in the buffer, `None` when more bytes are
    /// needed, or an error for a frame that can never be valid.
    pub(crate) fn next_frame(&mut self) -> Result<Option<RawFrame<'_>>, NetError> {
        let avail = self.end - self.start;
        if avail < HEADER_LEN {
            return Ok(None);
        }
        let h = &self.buf[self.start..self.start + HEADER_LEN];
        let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let (kind, flags) = (h[4], h[5]);
        if len > self.max_frame {
            return Err(NetError::Protocol(format!(
                "frame of {len} bytes exceeds the maximum of {} bytes",
                self.max_frame
            )));
        }
        if flags & !FLAG_COMPRESSED != 0 {
            return Err(NetError::Protocol(format!(
                "unknown frame flags {flags:#04x}"
            )));
        }
        if avail < HEADER_LEN + len {
            return Ok(None);
        }
        let at = self.start + HEADER_LEN;
        self.start = at + len;
        Ok(Some(RawFrame {
            kind,
            flags,
            payload: &self.buf[at..at + len],
        }))
    }

    /// One `read` into the free end of the buffer, first making room for at
    /// least the frame in progress. Returns what `read` returned.
    ///
    /// Call only after [`next_frame`](Decoder::next_frame) returned `Ok(None)`
    /// (so a partial frame's length is known to be within the maximum).
    pub(crate) fn fill(&mut self, r: &mut impl Read) -> io::Result<usize> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > self.base * 4 {
                self.buf = vec![0; self.base];
            }
        }
        let avail = self.end - self.start;
        let needed = if avail >= HEADER_LEN {
            let h = &self.buf[self.start..self.start + 4];
            HEADER_LEN + u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize
        } else {
            HEADER_LEN
        };
        if self.start + needed > self.buf.len() || self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.start = 0;
            self.end = avail;
        }
        if needed > self.buf.len() {
            self.buf.resize(needed, 0);
        }
        let free = self.buf.len() - self.end;
        let n = r.read(&mut self.buf[self.end..])?;
        self.end += n;
        if n == free && self.buf.len() < self.base {
            // The read filled the buffer: the connection is busy, so give
            // it the working size (in steps, zeroed once).
            let grown = (self.buf.len() * 4).min(self.base);
            self.buf.resize(grown, 0);
        }
        Ok(n)
    }

    /// [`fill`](Decoder::fill), with the outcomes every read loop tells
    /// apart: bytes came, the peer closed, the read timed out, or try again
    /// (interrupted); other errors are returned.
    pub(crate) fn read_from(&mut self, r: &mut impl Read) -> io::Result<Fill> {
        match self.fill(r) {
            Ok(0) => Ok(Fill::Closed),
            Ok(_) => Ok(Fill::Data),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Fill::Again),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(Fill::TimedOut)
            }
            Err(e) => Err(e),
        }
    }

    /// The next frame from `s` (kind, flags, payload as sent), waiting at
    /// most until `deadline`: `Ok(None)` when it passes first.
    /// [`NetError::Closed`] when the peer closed the connection.
    pub(crate) fn recv_until(
        &mut self,
        s: &mut SealedReader<TcpStream>,
        deadline: Instant,
    ) -> Result<Option<(u8, u8, Vec<u8>)>, NetError> {
        loop {
            if let Some(f) = self.next_frame()? {
                return Ok(Some((f.kind, f.flags, f.payload.to_vec())));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            s.get_ref().set_read_timeout(Some(left))?;
            match self.read_from(s)? {
                Fill::Closed => return Err(NetError::Closed),
                Fill::TimedOut => return Ok(None),
                Fill::Data | Fill::Again => {}
            }
        }
    }
}

/// What one [`Decoder::read_from`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fill {
    /// Bytes arrived.
    Data,
    /// The peer closed the connection.
    Closed,
    /// The read timed out (the socket's read timeout).
    TimedOut,
    /// Interrupted by a signal: read again.
    Again,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out its bytes a few at a time.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(self.1).min(out.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn frames_of(wire: &[u8], chunk: usize, cap: usize) -> Vec<(u8, Vec<u8>)> {
        let mut dec = Decoder::new(cap, 1 << 20);
        let mut r = Trickle(wire, chunk);
        let mut got = Vec::new();
        loop {
            while let Some(f) = dec.next_frame().unwrap() {
                got.push((f.kind, f.payload.to_vec()));
            }
            if dec.fill(&mut r).unwrap() == 0 {
                return got;
            }
        }
    }

    #[test]
    fn parses_frames_split_anywhere() {
        let mut wire = Vec::new();
        let mut want = Vec::new();
        for i in 0..200u32 {
            let payload: Vec<u8> = (0..(i * 37 % 1000)).map(|b| b as u8).collect();
            encode(&mut wire, 16 + (i % 200) as u8, 0, &payload);
            want.push((16 + (i % 200) as u8, payload));
        }
        for chunk in [1, 5, 6, 7, 100, 4096, usize::MAX] {
            for cap in [6, 64, 65536] {
                assert_eq!(
                    frames_of(&wire, chunk, cap),
                    want,
                    "chunk {chunk} cap {cap}"
                );
            }
        }
    }

    #[test]
    fn the_buffer_starts_small_and_grows_only_while_reads_fill_it() {
        let cap = 256 << 10;
        let mut dec = Decoder::new(cap, 1 << 20);
        assert_eq!(dec.buf.len(), DECODER_START);
        // A trickle of small frames never fills it: it stays small.
        let mut wire = Vec::new();
        for _ in 0..100 {
            encode(&mut wire, 16, 0, b"ping");
        }
        let mut r = Trickle(&wire, 10);
        while dec.fill(&mut r).unwrap() > 0 {
            while dec.next_frame().unwrap().is_some() {}
        }
        assert_eq!(dec.buf.len(), DECODER_START);
        // A stream that fills every read grows it, to the working size.
        let mut wire = Vec::new();
        for _ in 0..64 {
            encode(&mut wire, 16, 0, &[7u8; 10_000]);
        }
        assert_eq!(frames_of(&wire, usize::MAX, cap).len(), 64);
        let mut r = Trickle(&wire, usize::MAX);
        let mut n = 0;
        while dec.fill(&mut r).unwrap() > 0 {
            while dec.next_frame().unwrap().is_some() {
                n += 1;
            }
        }
        assert_eq!(n, 64);
        assert_eq!(dec.buf.len(), cap);
    }

    #[test]
    fn refuses_oversized_and_bad_flags() {
        let mut dec = Decoder::new(64, 10);
        let mut wire = Vec::new();
        encode(&mut wire, 16, 0, &[0; 11]);
        dec.fill(&mut &wire[..]).unwrap();
        assert!(matches!(dec.next_frame(), Err(NetError::Protocol(_))));

        let mut dec = Decoder::new(64, 10);
        let mut wire = Vec::new();
        encode(&mut wire, 16, 0x80, &[0; 1]);
        dec.fill(&mut &wire[..]).unwrap();
        assert!(matches!(dec.next_frame(), Err(NetError::Protocol(_))));
    }

    #[test]
    fn compression_round_trip_and_bomb() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 7) as u8).collect();
        let z = deflate(&data);
        assert!(z.len() < data.len() / 10);
        assert_eq!(inflate(&z, data.len()).unwrap(), data);
        assert!(matches!(
            inflate(&z, data.len() - 1),
            Err(NetError::Protocol(_))
        ));
        assert!(matches!(
            inflate(b"not deflate at all \xff\xff", 1000),
            Err(NetError::Protocol(_))
        ));
    }
}
