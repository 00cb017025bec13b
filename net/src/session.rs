//! The record layer: every byte after the handshake travels in sealed
//! records, keyed by the session keys the Noise handshake produced.
//!
//! ```text
//!  +-----------+---------------------------------------------+
//!  | length u16|  protected plaintext        | 16 B tag       |
//!  +-----------+---------------------------------------------+
//! ```
//!
//! `length` is the record's length after the length field (16 to 65535
//! bytes), big-endian. Records are protected in one of two ways, chosen in
//! the handshake (encrypted when either side asks):
//!
//! * **encrypted** (the default): AES-256-GCM (the Noise `AESGCM` cipher
//!   functions: nonce = 32 zero bits and the counter, empty associated
//!   data);
//! * **authenticated** (both sides `encrypt(false)`): the plaintext, then a 16-byte tag,
//!   BLAKE3 keyed with a key derived from the direction's session key, over
//!   the counter and the plaintext. Nothing can be forged, replayed or moved,
//!   but it can be read.
//!
//! The plaintext is a slice of the ordinary frame stream (see `frame.rs`):
//! record boundaries need not match frame boundaries, so the writer seals
//! the whole coalesced batch it is about to write (in records of at most
//! 64 KiB) rather than each frame. The nonce is implicit: a counter per
//! direction, starting after the handshake's own transport messages, so a
//! record that is dropped, repeated, reordered or moved to another
//! connection fails to open and the connection is closed.

use std::io::{self, IoSlice, Read, Write};

use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};

/// Largest ciphertext of one record (the Noise message limit).
const MAX_RECORD: usize = 65535;
/// Authentication tag appended to every record.
pub(crate) const TAG: usize = 16;
/// Largest plaintext of one record.
const MAX_PLAIN: usize = MAX_RECORD - TAG;
/// The reader's ciphertext buffer: one largest record, or many small ones
/// per `read` (larger costs every new connection a bigger zeroed buffer).
const RAW_BUF: usize = 2 + MAX_RECORD;
/// The reader's first ciphertext buffer, grown to `RAW_BUF` when a read
/// fills it.
const RAW_START: usize = 4096;

/// The Noise transport nonce: 32 zero bits, then the counter big-endian
/// (the AESGCM cipher functions of the Noise specification).
fn nonce(n: u64) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[4..].copy_from_slice(&n.to_be_bytes());
    b
}

/// AES-256-GCM, keyed once: ring's (BoringSSL's assembly, VAES/AVX-512
/// where the CPU has it; about 6× less per byte here than the `aes-gcm`
/// crate, see `docs/decisions.md`).
#[derive(Clone)]
struct Gcm256(LessSafeKey);

impl Gcm256 {
    fn new(key: &[u8; 32]) -> Gcm256 {
        Gcm256(LessSafeKey::new(
            UnboundKey::new(&AES_256_GCM, key).expect("a 32-byte AES-256 key"),
        ))
    }

    /// Encrypts `data` in place; its tag.
    fn seal(&self, nonce: [u8; 12], aad: &[u8], data: &mut [u8]) -> io::Result<[u8; TAG]> {
        let tag = self
            .0
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), data)
            .map_err(|_| io::Error::other("sealing a record failed"))?;
        let mut t = [0u8; TAG];
        t.copy_from_slice(tag.as_ref());
        Ok(t)
    }

    /// Decrypts `data` in place if `tag` authenticates it.
    fn open(&self, nonce: [u8; 12], aad: &[u8], data: &mut [u8], tag: &[u8]) -> Result<(), ()> {
        let tag = Tag::try_from(tag).map_err(|_| ())?;
        self.0
            .open_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                tag,
                data,
                0..,
            )
            .map(|_| ())
            .map_err(|_| ())
    }
}

/// Both directions' keys, and where their nonces are. The ciphers are
/// keyed once (the key schedule is most of the cost of a small record).
pub(crate) struct Session {
    sealer: Sealer,
    opener: Opener,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

/// How records are protected.
enum Protect {
    /// AES-256-GCM: encrypted and authenticated.
    Gcm(Box<Gcm256>),
    /// BLAKE3 keyed with this key, over the nonce and the plaintext, the
    /// tag truncated to 16 bytes: authenticated, not encrypted.
    Mac([u8; 32]),
    /// TLS 1.3 application-data records (RFC 8446 section 5.2): a 5-byte
    /// header `23, 3, 3, length`, AES-256-GCM with nonce = iv XOR the
    /// sequence number and the header as associated data, the inner
    /// content type after the plaintext. Keys extracted from rustls.
    Tls(Box<Gcm256>, [u8; 12]),
}

/// TLS records: header length, largest plaintext, and the sequence number
/// at which a connection is dropped (it never rekeys; RFC 8446 5.5 allows
/// AES-GCM 2^24.5 records per key).
pub(crate) const TLS_HEADER: usize = 5;
const TLS_MAX_PLAIN: usize = 1 << 14;
pub(crate) const TLS_MAX_SEQ: u64 = 1 << 24;

fn tls_nonce(iv: &[u8; 12], seq: u64) -> [u8; 12] {
    let mut b = *iv;
    for (x, y) in b[4..].iter_mut().zip(seq.to_be_bytes()) {
        *x ^= y;
    }
    b
}

/// A TLS alert's description, in words.
pub(crate) fn alert_text(desc: u8) -> String {
    let what = match desc {
        0 => "close_notify",
        10 => "unexpected_message",
        20 => "bad_record_mac",
        40 => "handshake_failure",
        42 => "bad_certificate (our certificate was refused: it may not name our node)",
        43 => "unsupported_certificate",
        44 => "certificate_revoked",
        45 => "certificate_expired (our certificate has expired or is not yet valid)",
        46 => "certificate_unknown (our certificate was refused)",
        47 => "illegal_parameter",
        48 => "unknown_ca (our certificate is not signed by the peer's CA)",
        50 => "decode_error",
        51 => "decrypt_error",
        70 => "protocol_version (the peer requires another TLS version)",
        80 => "internal_error",
        116 => "certificate_required",
        _ => "unknown alert",
    };
    format!("the peer sent TLS alert {desc}: {what}")
}

impl Protect {
    fn new(key: &[u8; 32], encrypt: bool) -> Protect {
        if encrypt {
            Protect::Gcm(Box::new(Gcm256::new(key)))
        } else {
            Protect::Mac(blake3::derive_key("graft-net 2026-12 record mac v2", key))
        }
    }
}

fn mac(key: &[u8; 32], nonce: u64, data: &[u8]) -> [u8; TAG] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(&nonce.to_be_bytes());
    h.update(data);
    let mut tag = [0u8; TAG];
    tag.copy_from_slice(&h.finalize().as_bytes()[..TAG]);
    tag
}

impl Sealer {
    /// A sealer writing TLS 1.3 records with AES-256-GCM `key`, `iv`, from
    /// sequence number `seq` (as rustls's extracted secrets give them).
    pub(crate) fn tls(key: &[u8; 32], iv: [u8; 12], seq: u64) -> Sealer {
        Sealer {
            aead: Protect::Tls(Box::new(Gcm256::new(key)), iv),
            nonce: seq,
        }
    }
}

impl Opener {
    /// An opener of TLS 1.3 records (see [`Sealer::tls`]).
    pub(crate) fn tls(key: &[u8; 32], iv: [u8; 12], seq: u64) -> Opener {
        Opener {
            aead: Protect::Tls(Box::new(Gcm256::new(key)), iv),
            nonce: seq,
        }
    }

    fn header(&self) -> usize {
        match self.aead {
            Protect::Tls(..) => TLS_HEADER,
            _ => 2,
        }
    }

    /// Opens every complete record at the front of `raw` (removing them)
    /// and returns their plaintext; a partial record stays.
    pub(crate) fn open_available(&mut self, raw: &mut Vec<u8>) -> io::Result<Vec<u8>> {
        let mut plain = Vec::new();
        let mut at = 0;
        while let Some(len) = record_len(self.header(), &raw[at..])? {
            let rec = &raw[at..at + len];
            let mut out = vec![0; rec.len()];
            let n = self.open(rec, &mut out)?;
            plain.extend_from_slice(&out[..n]);
            at += len;
        }
        raw.drain(..at);
        Ok(plain)
    }
}

/// The whole length (header included) of the complete record at the front
/// of `raw`, if there is one.
fn record_len(header: usize, raw: &[u8]) -> io::Result<Option<usize>> {
    let bad = |m: &str| Err(io::Error::new(io::ErrorKind::InvalidData, m.to_owned()));
    if raw.len() < header {
        return Ok(None);
    }
    let len = if header == TLS_HEADER {
        if raw[0] != 23 && raw[0] != 21 {
            return bad("not a TLS application-data record");
        }
        if raw[1] != 3 || raw[2] != 3 {
            return bad("a TLS record with a wrong version");
        }
        let len = u16::from_be_bytes([raw[3], raw[4]]) as usize;
        if !(TAG + 1..=TLS_MAX_PLAIN + 256).contains(&len) {
            return bad("a TLS record of an impossible length");
        }
        len
    } else {
        let len = u16::from_be_bytes([raw[0], raw[1]]) as usize;
        if len < TAG {
            return bad("a record shorter than its tag");
        }
        len
    };
    Ok((raw.len() >= header + len).then_some(header + len))
}

impl Session {
    /// A session sending with key `send` and receiving with `recv`, both
    /// nonces at 0; records encrypted (AES-256-GCM) or only authenticated
    /// (a BLAKE3 MAC).
    pub(crate) fn new(send: &[u8; 32], recv: &[u8; 32], encrypt: bool) -> Session {
        Session {
            sealer: Sealer {
                aead: Protect::new(send, encrypt),
                nonce: 0,
            },
            opener: Opener {
                aead: Protect::new(recv, encrypt),
                nonce: 0,
            },
        }
    }

    /// Seals one message (its ciphertext and tag, no length).
    pub(crate) fn seal_message(&mut self, plain: &[u8]) -> Result<Vec<u8>, io::Error> {
        let mut out = plain.to_vec();
        self.sealer.seal_in_place(&mut out)?;
        Ok(out)
    }

    /// Opens one message; `None` if it is not authentic.
    pub(crate) fn open_message(&mut self, ct: &[u8]) -> Option<Vec<u8>> {
        let mut out = vec![0; ct.len().checked_sub(TAG)?];
        let mut rec = Vec::with_capacity(ct.len() + 2);
        rec.extend_from_slice(&[0, 0]);
        rec.extend_from_slice(ct);
        let n = self.opener.open(&rec, &mut out).ok()?;
        out.truncate(n);
        Some(out)
    }

    /// The sending and the receiving half, for the writer and the reader.
    pub(crate) fn split(self) -> (Sealer, Opener) {
        (self.sealer, self.opener)
    }
}

/// Seals outgoing bytes into records.
pub(crate) struct Sealer {
    aead: Protect,
    nonce: u64,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("nonce", &self.nonce)
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// Encrypts `buf` in place and appends the tag.
    fn seal_in_place(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        let at = buf.len();
        self.seal_tail(buf, 0)?;
        debug_assert_eq!(buf.len(), at + TAG);
        Ok(())
    }

    /// Encrypts `buf[from..]` in place and appends its tag.
    fn seal_tail(&mut self, buf: &mut Vec<u8>, from: usize) -> io::Result<()> {
        self.seal_tail_as(buf, from, 23)
    }

    /// A TLS alert record (fatal, `desc`), for a TLS sealer.
    pub(crate) fn tls_alert(&mut self, desc: u8) -> io::Result<Vec<u8>> {
        let mut out = vec![21, 3, 3, 0, 2 + 1 + TAG as u8, 2, desc];
        out[0] = 23; // the outer type of every protected TLS 1.3 record
        self.seal_tail_as(&mut out, TLS_HEADER, 21)?;
        Ok(out)
    }

    /// [`seal_tail`](Self::seal_tail), with the TLS inner content type
    /// `ctype` (ignored by the other modes).
    fn seal_tail_as(&mut self, buf: &mut Vec<u8>, from: usize, ctype: u8) -> io::Result<()> {
        if self.nonce == u64::MAX {
            return Err(io::Error::other("session nonces exhausted"));
        }
        match &self.aead {
            Protect::Gcm(_) | Protect::Mac(_) => {
                let tag = self.protect(&mut buf[from..])?;
                buf.extend_from_slice(&tag);
                return Ok(());
            }
            Protect::Tls(aead, iv) => {
                // `buf[from - 5..from]` is the header, already written.
                if from < TLS_HEADER {
                    return Err(io::Error::other("a TLS record without its header"));
                }
                if self.nonce >= TLS_MAX_SEQ {
                    return Err(io::Error::other(
                        "TLS record limit reached (connections never rekey); reconnect",
                    ));
                }
                buf.push(ctype); // the inner content type
                let header: [u8; TLS_HEADER] = buf[from - TLS_HEADER..from].try_into().expect("5");
                let tag = aead.seal(tls_nonce(iv, self.nonce), &header, &mut buf[from..])?;
                buf.extend_from_slice(&tag);
            }
        }
        self.nonce += 1;
        Ok(())
    }

    /// The MAC and GCM modes: protects one record's plaintext `data` (in
    /// place: encrypted, or left as it is) and returns its tag.
    fn protect(&mut self, data: &mut [u8]) -> io::Result<[u8; TAG]> {
        if self.nonce == u64::MAX {
            return Err(io::Error::other("session nonces exhausted"));
        }
        let tag = match &self.aead {
            Protect::Gcm(aead) => aead.seal(nonce(self.nonce), b"", data)?,
            Protect::Mac(key) => mac(key, self.nonce, data),
            Protect::Tls(..) => return Err(io::Error::other("a TLS record needs its header")),
        };
        self.nonce += 1;
        Ok(tag)
    }

    /// Writes `prefix` (bytes sealed before), then `plain` sealed, to `w`.
    /// In the MAC and GCM modes nothing is copied: the plaintext is
    /// protected where it is (encrypted in place, or only MACed) and
    /// written with its records' headers and tags in one vectored write
    /// (`writev`); TLS records (whose inner content type follows the
    /// plaintext inside the encryption) are sealed into a buffer first.
    pub(crate) fn seal_write(
        &mut self,
        w: &mut impl Write,
        prefix: &[u8],
        plain: &mut [u8],
    ) -> io::Result<()> {
        if matches!(self.aead, Protect::Tls(..)) {
            let mut wire = Vec::with_capacity(prefix.len() + plain.len() + 64);
            wire.extend_from_slice(prefix);
            self.seal(plain, &mut wire)?;
            return w.write_all(&wire);
        }
        const META: usize = 2 + TAG;
        let records = plain.len().div_ceil(MAX_PLAIN);
        // Headers and tags: 18 bytes per record of up to 64 KiB.
        let mut meta = vec![0u8; records * META];
        for (chunk, m) in plain.chunks_mut(MAX_PLAIN).zip(meta.chunks_mut(META)) {
            m[..2].copy_from_slice(&((chunk.len() + TAG) as u16).to_be_bytes());
            let tag = self.protect(chunk)?;
            m[2..].copy_from_slice(&tag);
        }
        let mut slices = Vec::with_capacity(1 + 3 * records);
        if !prefix.is_empty() {
            slices.push(IoSlice::new(prefix));
        }
        for (chunk, m) in plain.chunks(MAX_PLAIN).zip(meta.chunks(META)) {
            slices.push(IoSlice::new(&m[..2]));
            slices.push(IoSlice::new(chunk));
            slices.push(IoSlice::new(&m[2..]));
        }
        write_all_vectored(w, &mut slices)
    }

    /// Appends `plain`, sealed, to `out` (one record per 64 KiB).
    pub(crate) fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        if matches!(self.aead, Protect::Tls(..)) {
            out.reserve(plain.len() + plain.len().div_ceil(TLS_MAX_PLAIN).max(1) * 22);
            for chunk in plain.chunks(TLS_MAX_PLAIN) {
                out.extend_from_slice(&[23, 3, 3]);
                out.extend_from_slice(&((chunk.len() + 1 + TAG) as u16).to_be_bytes());
                let at = out.len();
                out.extend_from_slice(chunk);
                self.seal_tail(out, at)?;
            }
            return Ok(());
        }
        out.reserve(plain.len() + plain.len().div_ceil(MAX_PLAIN).max(1) * (TAG + 2));
        for chunk in plain.chunks(MAX_PLAIN) {
            out.extend_from_slice(&((chunk.len() + TAG) as u16).to_be_bytes());
            let at = out.len();
            out.extend_from_slice(chunk);
            self.seal_tail(out, at)?;
        }
        Ok(())
    }
}

/// `Write::write_all_vectored` (not stable yet).
fn write_all_vectored(w: &mut impl Write, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "failed to write whole buffer",
                ))
            }
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Opens incoming records.
pub(crate) struct Opener {
    aead: Protect,
    nonce: u64,
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opener")
            .field("nonce", &self.nonce)
            .finish_non_exhaustive()
    }
}

impl Opener {
    /// Opens one whole record (header included) into `out` (at least
    /// `record.len() - TAG` long); returns the plaintext's length.
    fn open(&mut self, record: &[u8], out: &mut [u8]) -> io::Result<usize> {
        let bad = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "a record failed authentication (forged, replayed or corrupt)",
            )
        };
        if let Protect::Tls(aead, iv) = &self.aead {
            if self.nonce >= TLS_MAX_SEQ {
                return Err(io::Error::other(
                    "TLS record limit reached (connections never rekey); reconnect",
                ));
            }
            let (header, ct) = record.split_at(TLS_HEADER);
            let n = ct.len().checked_sub(TAG).ok_or_else(bad)?;
            let out = &mut out[..n];
            out.copy_from_slice(&ct[..n]);
            aead.open(tls_nonce(iv, self.nonce), header, out, &ct[n..])
                .map_err(|_| bad())?;
            self.nonce += 1;
            // Strip the padding, then the inner content type.
            let Some(end) = out.iter().rposition(|&b| b != 0) else {
                return Err(bad());
            };
            return match out[end] {
                23 => Ok(end),
                21 if end >= 2 => Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    alert_text(out[1]),
                )),
                t => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("an unexpected TLS record (content type {t}; key updates are not supported)"),
                )),
            };
        }
        let ct = &record[2..];
        let n = ct.len().checked_sub(TAG).ok_or_else(bad)?;
        let out = &mut out[..n];
        match &self.aead {
            Protect::Gcm(aead) => {
                out.copy_from_slice(&ct[..n]);
                aead.open(nonce(self.nonce), b"", out, &ct[n..])
                    .map_err(|_| bad())?;
            }
            Protect::Mac(key) => {
                // Compared in constant time (as a blake3 hash).
                let mut want = [0u8; 32];
                let mut got = [0u8; 32];
                want[..TAG].copy_from_slice(&mac(key, self.nonce, &ct[..n]));
                got[..TAG].copy_from_slice(&ct[n..]);
                if blake3::Hash::from(want) != blake3::Hash::from(got) {
                    return Err(bad());
                }
                out.copy_from_slice(&ct[..n]);
            }
            Protect::Tls(..) => return Err(bad()), // opened above
        }
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
    /// The last read of `inner` returned less than it was offered: `inner`
    /// had no more to give then (see [`drained`](SealedReader::drained)).
    short: bool,
}

impl<R: Read> SealedReader<R> {
    /// `leftover`: bytes already read from `inner` past the handshake.
    pub(crate) fn new(inner: R, opener: Opener, leftover: &[u8]) -> SealedReader<R> {
        // Small at first (a connection that carries little never pays for
        // zeroing a whole record's buffer); grown to `RAW_BUF` when full.
        let mut raw = vec![0; RAW_START.max(leftover.len())];
        raw[..leftover.len()].copy_from_slice(leftover);
        SealedReader {
            inner,
            opener,
            raw,
            start: 0,
            end: leftover.len(),
            plain: Vec::new(),
            pos: 0,
            short: false,
        }
    }

    pub(crate) fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The length of the complete record at `raw[start..]`, if there is one.
    fn complete(&self) -> io::Result<Option<usize>> {
        record_len(self.opener.header(), &self.raw[self.start..self.end])
    }

    /// Whether everything `inner` had at the last read was handed out: no
    /// plaintext and no whole record left here, and that read was short.
    /// A non-blocking reader on a level-triggered poller may then wait for
    /// the next readable event instead of reading again to see
    /// `WouldBlock` (one system call per message saved): what arrives
    /// later is reported by the poller. (A record that fails to parse is
    /// not drained: the next read reports it.)
    pub(crate) fn drained(&self) -> bool {
        self.short && self.pos >= self.plain.len() && matches!(self.complete(), Ok(None))
    }

    /// Plaintext already opened (by the handshake) to hand out first.
    pub(crate) fn with_plain(mut self, plain: Vec<u8>) -> Self {
        self.plain = plain;
        self.pos = 0;
        self
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
                if out.len() < len {
                    let ct = self.start..self.start + len;
                    self.start = ct.end;
                    self.plain.resize(len, 0);
                    let n = self.opener.open(&self.raw[ct], &mut self.plain)?;
                    self.plain.truncate(n);
                    self.pos = 0;
                    continue;
                }
                // Open every complete record that fits, straight into `out`.
                let mut n = 0;
                while let Some(len) = self.complete()? {
                    if out.len() - n < len {
                        break;
                    }
                    let ct = self.start..self.start + len;
                    match self.opener.open(&self.raw[ct.clone()], &mut out[n..]) {
                        Ok(m) => n += m,
                        // Hand out what opened; the bad record fails the
                        // next call (it is still first in line).
                        Err(_) if n > 0 => break,
                        Err(e) => return Err(e),
                    }
                    self.start = ct.end;
                }
                if n == 0 {
                    continue; // empty records: nothing to hand out
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
            if self.end == self.raw.len() {
                // Full (a long record, or dense traffic): one largest record.
                self.raw.resize(RAW_BUF.max(self.raw.len() * 2), 0);
            }
            let offered = self.raw.len() - self.end;
            let n = self.inner.read(&mut self.raw[self.end..])?;
            self.short = n < offered;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::{psk, Handshake, Identity, Step};

    thread_local!(static ENCRYPT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });

    pub(crate) fn pair() -> (Session, Session) {
        let encrypt = ENCRYPT.with(|e| e.get());
        let id = |n: &str| Identity {
            encrypt,
            name: n.into(),
            listen_addr: "127.0.0.1:1".parse().unwrap(),
            creation: 1,
            fingerprint: 1,
            heartbeat_ms: 1000,
            psk: psk("c"),
            lanes: 1,
            lane: None,
        };
        let mut i = Handshake::initiator(&id("i")).unwrap();
        let mut a = Handshake::acceptor(&id("a"));
        a.feed(&i.take_output()).unwrap();
        let Step::Register(_) = i.feed(&a.take_output()).unwrap() else {
            panic!()
        };
        i.confirm(true).unwrap();
        let Step::Decide(_) = a.feed(&i.take_output()).unwrap() else {
            panic!()
        };
        a.verdict(true).unwrap();
        let Step::Up(_) = i.feed(&a.take_output()).unwrap() else {
            panic!()
        };
        (i.take_session().0, a.take_session().0)
    }

    #[test]
    fn records_round_trip_split_anywhere_and_refuse_tampering() {
        for encrypt in [false, true] {
            ENCRYPT.with(|e| e.set(encrypt));
            records_round_trip(encrypt);
        }
    }

    fn records_round_trip(encrypt: bool) {
        let (si, sa) = pair();
        let (mut seal, _) = si.split();
        let (_, open) = sa.split();
        let msgs: Vec<Vec<u8>> = (0..50u32)
            .map(|n| vec![n as u8; (n * 2777) as usize])
            .collect();
        let mut wire = Vec::new();
        for m in &msgs {
            seal.seal(m, &mut wire).unwrap();
        }
        let want: Vec<u8> = msgs.concat();
        // Encrypted records do not show the plaintext; authenticated ones do.
        let shows = wire.windows(100).any(|w| w == &want[2777..2877]);
        assert_eq!(shows, !encrypt);
        // Read it back through a reader that trickles bytes.
        struct Trickle<'a>(&'a [u8], usize);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(self.1).min(out.len());
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        for (chunk, out_len) in [(1, 7), (3, 65536), (100_000, 13), (100_000, 1 << 20)] {
            let (s1, s2) = pair();
            let (mut seal, _) = s1.split();
            let (_, open) = s2.split();
            let mut wire = Vec::new();
            for m in &msgs {
                seal.seal(m, &mut wire).unwrap();
            }
            let mut r = SealedReader::new(Trickle(&wire, chunk), open, &[]);
            let mut got = Vec::new();
            let mut buf = vec![0; out_len];
            loop {
                let n = r.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            assert!(got == want, "chunk {chunk} out {out_len}");
        }
        // A flipped bit, a dropped record, a repeated one: refused.
        let mut bad = wire.clone();
        bad[10] ^= 1;
        let mut r = SealedReader::new(&bad[..], open, &[]);
        let mut buf = vec![0; 1 << 20];
        let e = loop {
            match r.read(&mut buf) {
                Ok(0) => panic!("tampering not seen"),
                Ok(_) => {}
                Err(e) => break e,
            }
        };
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let (si, sa) = pair();
        let (mut seal, _) = si.split();
        let (_, open) = sa.split();
        let (mut r1, mut r2) = (Vec::new(), Vec::new());
        seal.seal(b"one", &mut r1).unwrap();
        seal.seal(b"two", &mut r2).unwrap();
        let replayed = [&r1[..], &r1[..]].concat();
        let mut r = SealedReader::new(&replayed[..], open, &[]);
        assert_eq!(r.read(&mut buf).unwrap(), 3);
        assert_eq!(
            r.read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        // Truncated inside a record.
        let (si, sa) = pair();
        let (mut seal, _) = si.split();
        let (_, open) = sa.split();
        let mut w = Vec::new();
        seal.seal(b"hello", &mut w).unwrap();
        let mut r = SealedReader::new(&w[..w.len() - 1], open, &[]);
        assert_eq!(
            r.read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        // A record shorter than its tag.
        let (_, sa) = pair();
        let (_, open) = sa.split();
        let mut r = SealedReader::new(&[0u8, 3, 1, 2, 3][..], open, &[]);
        assert_eq!(
            r.read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    /// `drained` holds only once all the inner reader gave is handed out
    /// and its last read was short: a record left whole in the buffer, or
    /// plaintext left over, or a read that filled the buffer, is not.
    #[test]
    fn drained_only_when_all_read_is_handed_out_and_the_read_was_short() {
        let (s1, s2) = pair();
        let (mut seal, _) = s1.split();
        let (_, open) = s2.split();
        let mut wire = Vec::new();
        for m in [&[1u8; 100][..], &[2u8; 100][..]] {
            seal.seal(m, &mut wire).unwrap();
        }
        let mut r = SealedReader::new(&wire[..], open, &[]);
        assert!(!r.drained(), "nothing read yet");
        // Room for one record's plaintext: the second stays whole.
        let mut buf = [0u8; 100];
        assert_eq!(r.read(&mut buf).unwrap(), 100);
        assert!(!r.drained(), "a whole record is left");
        assert_eq!(r.read(&mut buf).unwrap(), 100);
        assert!(r.drained());
        // Plaintext left over (a small buffer) is not drained.
        let (s1, s2) = pair();
        let (mut seal, _) = s1.split();
        let (_, open) = s2.split();
        let mut wire = Vec::new();
        seal.seal(&[3u8; 100], &mut wire).unwrap();
        let mut r = SealedReader::new(&wire[..], open, &[]);
        let mut small = [0u8; 10];
        assert_eq!(r.read(&mut small).unwrap(), 10);
        assert!(!r.drained(), "plaintext is left");
        let mut rest = [0u8; 90];
        assert_eq!(r.read(&mut rest).unwrap(), 90);
        assert!(r.drained());
        // A read that fills the buffer is not short: a first record of
        // exactly the first buffer's size, and another behind it.
        let mut one = Vec::new();
        pair().0.split().0.seal(&[5u8; 100], &mut one).unwrap();
        let overhead = one.len() - 100;
        let (s1, s2) = pair();
        let (mut seal, _) = s1.split();
        let (_, open) = s2.split();
        let mut wire = Vec::new();
        seal.seal(&vec![6u8; RAW_START - overhead], &mut wire)
            .unwrap();
        assert_eq!(wire.len(), RAW_START);
        seal.seal(&[7u8; 100], &mut wire).unwrap();
        let mut r = SealedReader::new(&wire[..], open, &[]);
        let mut big = vec![0u8; 2 * RAW_START];
        assert_eq!(r.read(&mut big).unwrap(), RAW_START - overhead);
        assert!(!r.drained(), "a read that filled the buffer");
        assert_eq!(r.read(&mut big).unwrap(), 100);
        assert!(r.drained());
    }

    /// `seal_write` puts on the wire exactly what `seal` appends, with a
    /// prefix, across record boundaries and through short writes.
    #[test]
    fn seal_write_matches_seal() {
        struct Short(Vec<u8>, usize);
        impl Write for Short {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                let n = b.len().min(self.1);
                self.0.extend_from_slice(&b[..n]);
                Ok(n)
            }
            fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
                let mut left = self.1;
                for b in bufs {
                    let n = b.len().min(left);
                    self.0.extend_from_slice(&b[..n]);
                    left -= n;
                    if left == 0 {
                        break;
                    }
                }
                Ok(self.1 - left)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        for encrypt in [false, true] {
            ENCRYPT.with(|e| e.set(encrypt));
            for size in [0usize, 1, 48, MAX_PLAIN, MAX_PLAIN + 1, 3 * MAX_PLAIN + 77] {
                for (prefix, step) in [
                    (&b""[..], usize::MAX),
                    (&b"earlier"[..], 7),
                    (&b"x"[..], 65_000),
                ] {
                    let (s1, _) = pair();
                    let (s2, _) = pair_same(&s1);
                    let (mut a, _) = s1.split();
                    let (mut b, _) = s2.split();
                    let plain: Vec<u8> = (0..size).map(|i| (i * 7) as u8).collect();
                    let mut want = prefix.to_vec();
                    a.seal(&plain, &mut want).unwrap();
                    let mut got = Short(Vec::new(), step);
                    let mut p = plain.clone();
                    b.seal_write(&mut got, prefix, &mut p).unwrap();
                    assert!(got.0 == want, "encrypt {encrypt} size {size} step {step}");
                    assert_eq!(a.nonce, b.nonce);
                }
            }
        }
    }

    /// A second sealer with the same key and nonce as `s`'s.
    fn pair_same(s: &Session) -> (Session, ()) {
        let clone = |p: &Protect| match p {
            Protect::Gcm(a) => Protect::Gcm(a.clone()),
            Protect::Mac(k) => Protect::Mac(*k),
            Protect::Tls(a, iv) => Protect::Tls(a.clone(), *iv),
        };
        (
            Session {
                sealer: Sealer {
                    aead: clone(&s.sealer.aead),
                    nonce: s.sealer.nonce,
                },
                opener: Opener {
                    aead: clone(&s.opener.aead),
                    nonce: s.opener.nonce,
                },
            },
            (),
        )
    }

    /// Cost of sealing and opening a small record (run in release, by hand).
    #[test]
    #[ignore]
    fn seal_cost() {
        for encrypt in [false, true] {
            ENCRYPT.with(|e| e.set(encrypt));
            eprint!("encrypt {encrypt}: ");
            seal_cost_once();
        }
    }

    fn seal_cost_once() {
        let (si, sa) = pair();
        let (mut seal, _) = si.split();
        let (_, mut open) = sa.split();
        for size in [48usize, 512, 4096, 16384, MAX_PLAIN] {
            let msg = vec![5u8; size];
            let mut wire = Vec::with_capacity(size + 64);
            let mut out = vec![0u8; size + 64];
            let n = (50_000_000 / (size + 200)).max(2000);
            let t = std::time::Instant::now();
            for _ in 0..n {
                wire.clear();
                seal.seal(&msg, &mut wire).unwrap();
                open.open(&wire, &mut out).unwrap();
            }
            let ns = t.elapsed().as_nanos() as f64 / n as f64;
            let t = std::time::Instant::now();
            for _ in 0..n {
                wire.clear();
                wire.extend_from_slice(&msg);
                out[..size].copy_from_slice(&wire);
            }
            let copy = t.elapsed().as_nanos() as f64 / n as f64;
            eprintln!(
                "{size} B: {ns:.0} ns per seal+open ({:.2} ns/B), two copies {copy:.0} ns",
                ns / size as f64
            );
        }
    }

    /// CPU cost per byte of the MAC candidates (run in release, by hand).
    #[test]
    #[ignore]
    fn mac_candidates_cost() {
        use crate::noise_crypto::tests::cpu;
        use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
        let key = [9u8; 32];
        let ring_key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key).unwrap());
        use aes_gcm::aead::AeadInPlace;
        use aes_gcm::KeyInit;
        let rc = aes_gcm::Aes256Gcm::new((&key).into());
        for size in [48usize, 512, 4096, 65519] {
            let mut msg = vec![5u8; size];
            let n = (20_000_000 / (size + 100)).max(500);
            let per = |t: std::time::Duration| t.as_nanos() as f64 / n as f64;
            let t = cpu();
            let mut x = 0u8;
            for i in 0..n {
                x ^= mac(&key, i as u64, &msg)[0];
            }
            let blake = per(cpu() - t);
            let t = cpu();
            for i in 0..n {
                let mut nb = [0u8; 12];
                nb[4..].copy_from_slice(&(i as u64).to_be_bytes());
                let tag = ring_key
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(nb),
                        Aad::from(&msg[..]),
                        &mut [],
                    )
                    .unwrap();
                x ^= tag.as_ref()[0];
            }
            let gmac = per(cpu() - t);
            let t = cpu();
            for i in 0..n {
                let mut nb = [0u8; 12];
                nb[4..].copy_from_slice(&(i as u64).to_be_bytes());
                let tag = ring_key
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(nb),
                        Aad::empty(),
                        &mut msg,
                    )
                    .unwrap();
                x ^= tag.as_ref()[0];
            }
            let ring_gcm = per(cpu() - t);
            let t = cpu();
            for i in 0..n {
                let tag = rc
                    .encrypt_in_place_detached(&nonce(i as u64).into(), b"", &mut msg)
                    .unwrap();
                x ^= tag[0];
            }
            let rc_gcm = per(cpu() - t);
            eprintln!(
                "{size} B ({x}): blake3 mac {blake:.0} ns ({:.2}/B), ring gmac {gmac:.0} ns ({:.2}/B), ring aes-gcm {ring_gcm:.0} ns ({:.2}/B), aes-gcm crate {rc_gcm:.0} ns ({:.2}/B)",
                blake / size as f64,
                gmac / size as f64,
                ring_gcm / size as f64,
                rc_gcm / size as f64
            );
        }
    }
}
