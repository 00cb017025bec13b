//! The record layer: every byte after the handshake travels in sealed
//! records, keyed by the session keys the Noise handshake produced.
//!
//! ```text
//!  +-----------+---------------------------------------------+
//!  | length u16|  ChaCha20-Poly1305(plaintext) + 16 B tag     |
//!  +-----------+---------------------------------------------+
//! ```
//!
//! `length` is the ciphertext's length (16 to 65535 bytes), big-endian. The
//! plaintext is a slice of the ordinary frame stream (see `frame.rs`):
//! record boundaries need not match frame boundaries, so the writer seals
//! the whole coalesced batch it is about to write (in records of at most
//! 64 KiB) rather than each frame. The nonce is implicit: a counter per
//! direction, starting after the handshake's own transport messages, so a
//! record that is dropped, repeated, reordered or moved to another
//! connection fails to open and the connection is closed.

use std::io::{self, Read};
use std::sync::Arc;

/// Largest ciphertext of one record (the Noise message limit).
const MAX_RECORD: usize = 65535;
/// Authentication tag appended to every record.
pub(crate) const TAG: usize = 16;
/// Largest plaintext of one record.
const MAX_PLAIN: usize = MAX_RECORD - TAG;

/// Both directions' keys, and where their nonces are.
#[derive(Debug)]
pub(crate) struct Session {
    keys: Arc<snow::StatelessTransportState>,
    send_nonce: u64,
    recv_nonce: u64,
}

impl Session {
    pub(crate) fn new(keys: snow::StatelessTransportState, send_nonce: u64, recv_nonce: u64) -> Session {
        Session {
            keys: Arc::new(keys),
            send_nonce,
            recv_nonce,
        }
    }

    /// The sending and the receiving half, for the writer and the reader.
    pub(crate) fn split(self) -> (Sealer, Opener) {
        (
            Sealer {
                keys: self.keys.clone(),
                nonce: self.send_nonce,
            },
            Opener {
                keys: self.keys,
                nonce: self.recv_nonce,
            },
        )
    }
}

/// Seals outgoing bytes into records.
#[derive(Debug)]
pub(crate) struct Sealer {
    keys: Arc<snow::StatelessTransportState>,
    nonce: u64,
}

impl Sealer {
    /// Appends `plain`, sealed, to `out` (one record per 64 KiB).
    pub(crate) fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        out.reserve(plain.len() + plain.len().div_ceil(MAX_PLAIN).max(1) * (TAG + 2));
        for chunk in plain.chunks(MAX_PLAIN) {
            if self.nonce == u64::MAX {
                return Err(io::Error::other("session nonces exhausted"));
            }
            let len = chunk.len() + TAG;
            out.extend_from_slice(&(len as u16).to_be_bytes());
            let at = out.len();
            out.resize(at + len, 0);
            let n = self
                .keys
                .write_message(self.nonce, chunk, &mut out[at..])
                .map_err(|e| io::Error::other(format!("sealing a record failed: {e}")))?;
            debug_assert_eq!(n, len);
            self.nonce += 1;
        }
        Ok(())
    }
}

/// Opens incoming records.
#[derive(Debug)]
pub(crate) struct Opener {
    keys: Arc<snow::StatelessTransportState>,
    nonce: u64,
}

impl Opener {
    /// Opens one record's ciphertext into `out` (at least `ct.len() - TAG`
    /// long); returns the plaintext's length.
    fn open(&mut self, ct: &[u8], out: &mut [u8]) -> io::Result<usize> {
        let n = self.keys.read_message(self.nonce, ct, out).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "a record failed authentication (forged, replayed or corrupt)",
            )
        })?;
        self.nonce += 1;
        Ok(n)
    }
}

/// A reader that opens the records read from `inner` and yields their
/// plaintext. An unauthentic record is an `InvalidData` error; the end of
/// `inner` inside a record is `UnexpectedEof`.
#[derive(Debug)]
pub(crate) struct SealedReader<R> {
    inner: R,
    opener: Opener,
    /// Ciphertext received, `raw[start..end]` not yet opened.
    raw: Vec<u8>,
    start: usize,
    end: usize,
    /// Plaintext opened and not yet handed out, `plain[pos..]`.
    plain: Vec<u8>,
    pos: usize,
}

impl<R: Read> SealedReader<R> {
    /// `leftover`: bytes already read from `inner` past the handshake.
    pub(crate) fn new(inner: R, opener: Opener, leftover: &[u8]) -> SealedReader<R> {
        let mut raw = vec![0; (2 + MAX_RECORD).max(leftover.len())];
        raw[..leftover.len()].copy_from_slice(leftover);
        SealedReader {
            inner,
            opener,
            raw,
            start: 0,
            end: leftover.len(),
            plain: Vec::new(),
            pos: 0,
        }
    }

    pub(crate) fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The length of the complete record at `raw[start..]`, if there is one.
    fn complete(&self) -> io::Result<Option<usize>> {
        let avail = self.end - self.start;
        if avail < 2 {
            return Ok(None);
        }
        let len = u16::from_be_bytes([self.raw[self.start], self.raw[self.start + 1]]) as usize;
        if len < TAG {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a record shorter than its tag",
            ));
        }
        Ok((avail >= 2 + len).then_some(len))
    }
}

impl<R: Read> Read for SealedReader<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            if self.pos < self.plain.len() {
                let n = (self.plain.len() - self.pos).min(out.len());
                out[..n].copy_from_slice(&self.plain[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            if let Some(len) = self.complete()? {
                let ct = self.start + 2..self.start + 2 + len;
                self.start = ct.end;
                let n = if out.len() >= len {
                    self.opener.open(&self.raw[ct], out)?
                } else {
                    self.plain.resize(len, 0);
                    let n = self.opener.open(&self.raw[ct], &mut self.plain)?;
                    self.plain.truncate(n);
                    self.pos = 0;
                    continue;
                };
                if n == 0 {
                    continue; // an empty record: nothing to hand out
                }
                return Ok(n);
            }
            // Need more ciphertext: compact, then read.
            if self.start == self.end {
                self.start = 0;
                self.end = 0;
            } else if self.start > 0 {
                self.raw.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let n = self.inner.read(&mut self.raw[self.end..])?;
            if n == 0 {
                return if self.end == 0 {
                    Ok(0)
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed inside a record",
                    ))
                };
            }
            self.end += n;
        }
    }
}
