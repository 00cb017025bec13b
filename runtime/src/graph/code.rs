//! Code references: how a function crosses the wire. The only module of the
//! graph serialiser with `unsafe` code, apart from one cast of the decoder's
//! typed node tables (`Decoder::table`).
//!
//! A mobile function is written as
//!
//! | field   | type | content |
//! |---------|------|---------|
//! | `fp`    | u64  | [`fingerprint`] of the sending executable |
//! | `code`  | i64  | address of the decoding trampoline − address of [`anchor`] |
//! | `body`  | i64  | address of the function body − address of [`anchor`] |
//! | `check` | u64  | BLAKE3 of the above and of the receiving signature |
//!
//! followed by the environment. The trampoline is a monomorphised
//! `decode_*::<E, …, S>`: the receiver does not know the environment type `E`,
//! but the trampoline does; it decodes `E` and rebuilds the function.
//!
//! Before anything is called, the decoder checks, in order:
//!
//! 1. `fp` equals this executable's fingerprint: the peer runs the very same
//!    binary, so the trampoline exists here at the same offset
//!    ([`DecodeError::ForeignCode`] otherwise);
//! 2. both addresses fall inside this executable's code segment (found once
//!    from `/proc/self/maps` as the executable mapping that contains
//!    `anchor`);
//! 3. `check` matches, which catches corrupted references and a signature
//!    that differs from the one the trampoline was made for.
//!
//! This guards against accidents, not against a malicious peer: like Erlang
//! distribution, a peer that passed the cookie handshake is trusted to run
//! code here.

use std::sync::OnceLock;

use super::descriptor::first_u64;
use super::func::{Encoded, MobileFn, MobileFnOnce};
use super::wire::{Format, Source};
use super::{DecodeError, Decoder, Encoder, Mobile};

/// The fixed point that code addresses are measured from.
#[inline(never)]
pub(crate) fn anchor() {
    std::hint::black_box(());
}

fn anchor_addr() -> usize {
    anchor as fn() as usize
}

/// A hash of the running executable, computed once (BLAKE3 of
/// `/proc/self/exe`, first 8 bytes). Peers with equal fingerprints run the
/// same build and may exchange functions.
///
/// If the executable cannot be read, the fingerprint is derived from the
/// process id and start time instead, so that no other process accepts this
/// one's functions.
///
/// ```
/// assert_eq!(graft::graph::fingerprint(), graft::graph::fingerprint());
/// ```
pub fn fingerprint() -> u64 {
    static FP: OnceLock<u64> = OnceLock::new();
    *FP.get_or_init(|| {
        let hashed = std::env::current_exe().and_then(|path| {
            let mut h = blake3::Hasher::new();
            h.update_reader(std::fs::File::open(path)?)?;
            Ok(h.finalize())
        });
        let hash = match hashed {
            Ok(h) => h,
            Err(e) => {
                log::warn!("graph: cannot hash the executable ({e}); functions will not cross to other processes");
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                blake3::hash(format!("{}:{:?}", std::process::id(), now).as_bytes())
            }
        };
        first_u64(hash.as_bytes())
    })
}

/// Executable mappings of this program's file, from `/proc/self/maps`.
fn code_ranges() -> &'static [(usize, usize)] {
    static RANGES: OnceLock<Vec<(usize, usize)>> = OnceLock::new();
    RANGES.get_or_init(|| {
        let maps = match std::fs::read_to_string("/proc/self/maps") {
            Ok(m) => m,
            Err(e) => {
                log::warn!("graph: cannot read /proc/self/maps ({e}); no function can be decoded");
                return Vec::new();
            }
        };
        let a = anchor_addr();
        let mut lines = Vec::new();
        for line in maps.lines() {
            let mut parts = line.split_whitespace();
            let (Some(range), Some(perms)) = (parts.next(), parts.next()) else {
                continue;
            };
            let path = parts.nth(3).unwrap_or("");
            let Some((lo, hi)) = range.split_once('-') else {
                continue;
            };
            let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            else {
                continue;
            };
            if perms.contains('x') {
                lines.push((lo, hi, path.to_owned()));
            }
        }
        let Some(own) = lines
            .iter()
            .find(|(lo, hi, _)| (*lo..*hi).contains(&a))
            .map(|l| l.2.clone())
        else {
            log::warn!("graph: the code segment was not found; no function can be decoded");
            return Vec::new();
        };
        lines
            .into_iter()
            .filter(|(lo, hi, p)| *p == own && (!own.is_empty() || (*lo..*hi).contains(&a)))
            .map(|(lo, hi, _)| (lo, hi))
            .collect()
    })
}

fn in_code(addr: usize) -> bool {
    code_ranges()
        .iter()
        .any(|&(lo, hi)| (lo..hi).contains(&addr))
}

fn checksum(fp: u64, code: i64, body: i64, sig: &str) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(&fp.to_le_bytes());
    h.update(&code.to_le_bytes());
    h.update(&body.to_le_bytes());
    h.update(sig.as_bytes());
    first_u64(h.finalize().as_bytes())
}

/// The signature a trampoline is checked against: the function type it
/// produces and the decoder source it reads.
fn signature<T: 'static, S: Source>() -> String {
    format!(
        "{}/{}",
        std::any::type_name::<T>(),
        if S::TEXT { "text" } else { "binary" }
    )
}

/// Writes a code reference to `tramp` and `body` for a function of type
/// `T`, to be read by the source that matches format `F`.
pub(crate) fn write_ref<T: 'static, F: Format>(e: &mut Encoder<'_, F>, tramp: usize, body: usize) {
    let a = anchor_addr();
    let code = tramp.wrapping_sub(a) as i64;
    let body = body.wrapping_sub(a) as i64;
    let fp = fingerprint();
    e.field("fp");
    e.scalar(fp);
    e.field("code");
    e.scalar(code);
    e.field("body");
    e.scalar(body);
    e.field("check");
    e.scalar(checksum(fp, code, body, &signature::<T, F::Src>()));
}

/// Reads and checks a code reference for a function of type `T`; returns the
/// trampoline and body addresses.
fn read_ref<T: 'static, S: Source>(d: &mut Decoder<'_, S>) -> Result<(usize, usize), DecodeError> {
    d.field("fp")?;
    let fp: u64 = d.scalar()?;
    d.field("code")?;
    let code: i64 = d.scalar()?;
    d.field("body")?;
    let body: i64 = d.scalar()?;
    d.field("check")?;
    let check: u64 = d.scalar()?;
    let expected = fingerprint();
    if fp != expected {
        return Err(DecodeError::ForeignCode {
            found: fp,
            expected,
        });
    }
    let a = anchor_addr();
    let tramp = a.wrapping_add(code as usize);
    let body_addr = a.wrapping_add(body as usize);
    if !in_code(tramp) || !in_code(body_addr) {
        return Err(DecodeError::BadCode(format!(
            "address outside this executable's code (offsets {code:#x}, {body:#x})"
        )));
    }
    if check != checksum(fp, code, body, &signature::<T, S>()) {
        return Err(DecodeError::BadCode(format!(
            "corrupted reference, or not a `{}`",
            std::any::type_name::<T>()
        )));
    }
    d.field("env")?;
    Ok((tramp, body_addr))
}

// ---- trampolines ---------------------------------------------------------

type FnTramp<A, R, S> =
    for<'a, 'b> fn(&'b mut Decoder<'a, S>, usize) -> Result<MobileFn<A, R>, DecodeError>;
type OnceTramp<R, S> =
    for<'a, 'b> fn(&'b mut Decoder<'a, S>, usize) -> Result<MobileFnOnce<R>, DecodeError>;

/// Address of the trampoline that rebuilds a `MobileFn<A, R>` with
/// environment `E` from source `S`.
pub(crate) fn fn_tramp<E: Mobile, A: 'static, R: 'static, S: Source>() -> usize {
    decode_fn::<E, A, R, S> as FnTramp<A, R, S> as usize
}

/// Same for `MobileFnOnce<R>` made by [`MobileFnOnce::new`].
pub(crate) fn once_tramp<E: Mobile, R: 'static, S: Source>() -> usize {
    decode_once::<E, R, S> as OnceTramp<R, S> as usize
}

/// Same for `MobileFnOnce<Encoded>` made by [`MobileFnOnce::returning`].
pub(crate) fn returning_tramp<E: Mobile, R: Mobile, S: Source>() -> usize {
    decode_returning::<E, R, S> as OnceTramp<Encoded, S> as usize
}

fn decode_fn<E: Mobile, A: 'static, R: 'static, S: Source>(
    d: &mut Decoder<'_, S>,
    body: usize,
) -> Result<MobileFn<A, R>, DecodeError> {
    // SAFETY: this trampoline is only reached through `read_fn`, after
    // `read_ref` checked that `body` came from this very executable
    // (fingerprint), lies in its code, and was written, with a checksum over
    // it and the signature `MobileFn<A, R>`, by `MobileFn::encode` for the
    // `FnClosure<E, A, R>` that holds this trampoline's address: so it is
    // the address of a `fn(&E, A) -> R`. Function pointers are address-sized.
    let body = unsafe { std::mem::transmute::<usize, fn(&E, A) -> R>(body) };
    let env = d.nest(|d| E::decode(d))?;
    Ok(MobileFn::new(env, body))
}

fn decode_once<E: Mobile, R: 'static, S: Source>(
    d: &mut Decoder<'_, S>,
    body: usize,
) -> Result<MobileFnOnce<R>, DecodeError> {
    // SAFETY: as in `decode_fn`; the reference was written for a
    // `OnceClosure<E, R>`, whose body is a `fn(E) -> R`.
    let body = unsafe { std::mem::transmute::<usize, fn(E) -> R>(body) };
    let env = d.nest(|d| E::decode(d))?;
    Ok(MobileFnOnce::new(env, body))
}

fn decode_returning<E: Mobile, R: Mobile, S: Source>(
    d: &mut Decoder<'_, S>,
    body: usize,
) -> Result<MobileFnOnce<Encoded>, DecodeError> {
    // SAFETY: as in `decode_fn`; the reference was written for a
    // `ReturningClosure<E, R>`, whose body is a `fn(E) -> R`.
    let body = unsafe { std::mem::transmute::<usize, fn(E) -> R>(body) };
    let env = d.nest(|d| E::decode(d))?;
    Ok(MobileFnOnce::<Encoded>::returning(env, body))
}

/// Reads a `MobileFn<A, R>`: checks the reference, then runs its trampoline.
pub(crate) fn read_fn<A: 'static, R: 'static, S: Source>(
    d: &mut Decoder<'_, S>,
) -> Result<MobileFn<A, R>, DecodeError> {
    let (tramp, body) = read_ref::<MobileFn<A, R>, S>(d)?;
    // SAFETY: `read_ref` established that `tramp` is the address, in this
    // executable, that `fn_tramp::<E, A, R, S>` returned on the sender for
    // some `E` (same build, checksum over the address and the signature
    // `MobileFn<A, R>` read from source `S`): a function of type
    // `FnTramp<A, R, S>`.
    let tramp = unsafe { std::mem::transmute::<usize, FnTramp<A, R, S>>(tramp) };
    tramp(d, body)
}

/// Reads a `MobileFnOnce<R>`.
pub(crate) fn read_once<R: 'static, S: Source>(
    d: &mut Decoder<'_, S>,
) -> Result<MobileFnOnce<R>, DecodeError> {
    let (tramp, body) = read_ref::<MobileFnOnce<R>, S>(d)?;
    // SAFETY: as in `read_fn`: `tramp` is `once_tramp::<E, R, S>` or (for
    // `R` = `Encoded`) `returning_tramp::<E, R2, S>`, both of type
    // `OnceTramp<R, S>`.
    let tramp = unsafe { std::mem::transmute::<usize, OnceTramp<R, S>>(tramp) };
    tramp(d, body)
}
