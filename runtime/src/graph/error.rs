//! [`DecodeError`]: everything that can go wrong when decoding.

use std::fmt;

/// Why a graph could not be decoded.
///
/// Decoding is total: every input yields either a value or one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended before the value did.
    Truncated,
    /// The input does not start with the graph magic, or has an unknown version.
    BadHeader(String),
    /// The data describes another type than the one asked for. (Boxed:
    /// every `Result` of the decoder carries a `DecodeError`, and a deep
    /// value's decode holds one per level on its stack.)
    TypeMismatch(Box<Mismatch>),
    /// A code reference names no mobile function of this executable: it
    /// was made by a build that has a function this one lacks, or it was
    /// forged or corrupted. Nothing was run.
    NotRegistered {
        /// The code id carried by the data.
        id: u64,
        /// What was expected, and why the table is empty if it is.
        detail: String,
    },
    /// A code reference names a mobile function of another type than the
    /// one being decoded.
    BadCode(String),
    /// The bytes are not a valid encoding of the expected type.
    Invalid(String),
    /// The data asks for more than the configured limits allow.
    LimitExceeded(String),
    /// Bytes were left over after the value.
    TrailingBytes(usize),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => f.write_str("truncated input: the data ends inside a value"),
            DecodeError::BadHeader(m) => write!(f, "not a graft graph: {m}"),
            DecodeError::TypeMismatch(m) => write!(
                f,
                "type mismatch: the data is a `{}` (descriptor {:016x}) \
                 but a `{}` (descriptor {:016x}) was expected",
                m.found, m.found_hash, m.expected, m.expected_hash
            ),
            DecodeError::NotRegistered { id, detail } => write!(
                f,
                "unknown code reference: no mobile function with id {id:016x} is \
                 registered in this executable ({detail})"
            ),
            DecodeError::BadCode(m) => write!(f, "invalid code reference: {m}"),
            DecodeError::Invalid(m) => write!(f, "invalid data: {m}"),
            DecodeError::LimitExceeded(m) => write!(f, "limit exceeded: {m}"),
            DecodeError::TrailingBytes(n) => write!(f, "{n} trailing bytes after the value"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// The two sides of a [`DecodeError::TypeMismatch`].
///
/// ```
/// use graft::graph::{self, DecodeError};
/// let bytes = graph::encode(&1u8);
/// match graph::decode::<u16>(&bytes) {
///     Err(DecodeError::TypeMismatch(m)) => assert_eq!((&*m.found, &*m.expected), ("u8", "u16")),
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Readable name of the type the data was encoded as.
    pub found: String,
    /// Its descriptor hash.
    pub found_hash: u64,
    /// Readable name of the type the receiver asked for.
    pub expected: String,
    /// Its descriptor hash.
    pub expected_hash: u64,
}

#[cfg(test)]
mod tests {
    #[test]
    fn small() {
        // Every level of a deep decode holds a few `Result<T, DecodeError>`.
        assert!(std::mem::size_of::<super::DecodeError>() <= 32);
    }
}
