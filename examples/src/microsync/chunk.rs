//! Content-defined chunking and manifests.
//!
//! A file is cut where a *gear* rolling hash of the last 64 bytes has its
//! top [`AVG_BITS`] bits all zero, so cut points depend on content, not on
//! offsets: an edit moves or changes only the chunks around it, and the
//! chunks after it are found again at their new offsets. Bounds keep
//! chunks between [`MIN_CHUNK`] and [`MAX_CHUNK`] bytes; the average is
//! about `MIN_CHUNK + 2^AVG_BITS` (≈ 10 KiB).
//!
//! The gear hash is `h = (h << 1) + GEAR[byte]`: each byte's contribution
//! is shifted out after 64 steps, so it is a rolling hash over a 64-byte
//! window with one shift and one add per byte.

use graft::Mobile;

/// Bits of the cut mask: a cut is found every `2^AVG_BITS` bytes on
/// average after the minimum (8 KiB).
pub const AVG_BITS: u32 = 13;
/// No cut before this many bytes into a chunk.
pub const MIN_CHUNK: usize = 2 * 1024;
/// A chunk is cut here at the latest.
pub const MAX_CHUNK: usize = 64 * 1024;

/// The cut mask: the top `AVG_BITS` bits (they mix the most bytes).
const MASK: u64 = ((1u64 << AVG_BITS) - 1) << (64 - AVG_BITS);

/// 256 pseudo-random words (splitmix64 from a fixed seed), one per byte value.
const GEAR: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut i = 0;
    while i < 256 {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        t[i] = z ^ (z >> 31);
        i += 1;
    }
    t
};

/// A chunk's content hash (blake3).
pub type Hash = [u8; 32];

/// One chunk of a file version.
#[derive(Debug, Clone, PartialEq, Eq, Mobile)]
pub struct ChunkRef {
    /// Where it starts in the file.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u32,
    /// blake3 of its bytes.
    pub hash: Hash,
}

/// A compact description of one version of a file.
#[derive(Debug, Clone, PartialEq, Eq, Mobile)]
pub struct Manifest {
    /// Path relative to the synchronised folder, `/`-separated.
    pub path: String,
    /// File size in bytes.
    pub size: u64,
    /// blake3 of the whole file.
    pub hash: Hash,
    /// The chunks, in file order.
    pub chunks: Vec<ChunkRef>,
}

/// The length of the chunk that starts `data` (all of it if short).
pub fn cut(data: &[u8]) -> usize {
    if data.len() <= MIN_CHUNK {
        return data.len();
    }
    let end = data.len().min(MAX_CHUNK);
    let mut h: u64 = 0;
    // Warm the window over the 64 bytes before the first allowed cut.
    for &b in &data[MIN_CHUNK - 64..MIN_CHUNK] {
        h = (h << 1).wrapping_add(GEAR[b as usize]);
    }
    for (i, &b) in data[MIN_CHUNK..end].iter().enumerate() {
        h = (h << 1).wrapping_add(GEAR[b as usize]);
        if h & MASK == 0 {
            return MIN_CHUNK + i + 1;
        }
    }
    end
}

/// The chunks of `data`, in order.
///
/// ```
/// use graft_examples::microsync::chunk::{chunks, MAX_CHUNK};
/// let data: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
/// let cs = chunks(&data);
/// assert_eq!(cs.iter().map(|c| c.len as usize).sum::<usize>(), data.len());
/// assert!(cs.iter().all(|c| c.len as usize <= MAX_CHUNK));
/// ```
pub fn chunks(data: &[u8]) -> Vec<ChunkRef> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let n = cut(&data[at..]);
        out.push(ChunkRef {
            offset: at as u64,
            len: n as u32,
            hash: *blake3::hash(&data[at..at + n]).as_bytes(),
        });
        at += n;
    }
    out
}

/// The manifest of `data`, stored at `path`.
pub fn manifest(path: &str, data: &[u8]) -> Manifest {
    Manifest {
        path: path.to_string(),
        size: data.len() as u64,
        hash: *blake3::hash(data).as_bytes(),
        chunks: chunks(data),
    }
}

/// A short hex prefix of a hash, for logs.
pub fn short(h: &Hash) -> String {
    h[..4].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    #[test]
    fn chunks_cover_the_data_within_bounds() {
        let data = noise(1 << 20, 7);
        let cs = chunks(&data);
        let mut at = 0;
        for (i, c) in cs.iter().enumerate() {
            assert_eq!(c.offset, at);
            assert!(c.len as usize <= MAX_CHUNK);
            if i + 1 < cs.len() {
                assert!(c.len as usize >= MIN_CHUNK);
            }
            at += u64::from(c.len);
        }
        assert_eq!(at, data.len() as u64);
        let avg = data.len() / cs.len();
        assert!((5_000..20_000).contains(&avg), "average chunk {avg}");
    }

    #[test]
    fn an_insertion_changes_only_nearby_chunks() {
        let data = noise(1 << 20, 11);
        let mut edited = data.clone();
        edited.splice(
            500_000..500_000,
            b"an insertion in the middle".iter().copied(),
        );
        let before: std::collections::HashSet<Hash> =
            chunks(&data).iter().map(|c| c.hash).collect();
        let after = chunks(&edited);
        let new = after.iter().filter(|c| !before.contains(&c.hash)).count();
        assert!(new <= 3, "{new} of {} chunks changed", after.len());
    }
}
