//! What can be a message: [`Message`], and [`Local`] for values that must
//! never leave their node.
//!
//! Every [`Mobile`] type is a message: sent locally it is moved, never
//! encoded (a value of up to 5 words is moved into the mailbox entry
//! itself, a larger one travels by pointer); sent to a process on another node it is
//! encoded as a graph with its type descriptor, and decoded lazily by the
//! receiving process when one of its receive clauses asks for that type.
//! A value that cannot cross a node boundary (a closure, a channel end, a
//! lock) is wrapped in [`Local`]: it is a message too, and sending it to a
//! remote process is refused with a logged error.

use crate::error::Error;
use crate::graph::{self, DecodeError, Mobile};

/// A value that can be sent to a process.
///
/// Implemented for every [`Mobile`] type and for [`Local<T>`]; derive
/// `Mobile` on your message types. A type of your own that must stay on its
/// node can also be made a message with an empty impl
/// (`impl graft::Message for MyLocalType {}`): the defaults refuse remote
/// sends.
///
/// ```
/// use graft::*;
/// #[derive(Mobile, Debug, PartialEq)]
/// enum Cmd { Add(u64), Stop }
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let got = node.run(|| { send(self_pid(), Cmd::Add(2)); expect::<Cmd>() }).unwrap();
/// assert_eq!(got, Cmd::Add(2));
/// ```
pub trait Message: Send + 'static {
    /// The type descriptor hash remote copies of this type carry (`None`
    /// for local-only types).
    #[doc(hidden)]
    fn remote_descriptor() -> Option<u64>
    where
        Self: Sized,
    {
        None
    }

    /// The full type descriptor remote copies of this type carry (`None`
    /// for local-only types): names the first difference of two types.
    #[doc(hidden)]
    fn full_descriptor() -> Option<&'static graph::Descriptor>
    where
        Self: Sized,
    {
        None
    }

    /// Encodes for another node: `(descriptor hash, bytes)`. Provided from
    /// [`encode_remote_into`](Message::encode_remote_into), which is the
    /// one to implement: a remote `send` encodes with that alone.
    #[doc(hidden)]
    fn encode_remote(&self) -> Result<(u64, Vec<u8>), Error> {
        let mut out = Vec::with_capacity(64);
        let desc = self.encode_remote_into(&mut out)?;
        Ok((desc, out))
    }

    /// Encodes for another node, appending to `out`; returns the descriptor
    /// hash.
    #[doc(hidden)]
    fn encode_remote_into(&self, _out: &mut Vec<u8>) -> Result<u64, Error> {
        Err(Error::NotMobile(std::any::type_name::<Self>()))
    }

    /// Decodes a copy that came from another node.
    #[doc(hidden)]
    fn decode_remote(_bytes: &[u8]) -> Result<Self, DecodeError>
    where
        Self: Sized,
    {
        Err(DecodeError::Invalid(format!(
            "{} is local-only and cannot arrive from another node",
            std::any::type_name::<Self>()
        )))
    }
}

impl<T: Mobile> Message for T {
    #[inline]
    fn remote_descriptor() -> Option<u64> {
        Some(graph::descriptor_of::<T>().hash())
    }
    fn full_descriptor() -> Option<&'static graph::Descriptor> {
        Some(graph::descriptor_of::<T>())
    }
    fn encode_remote_into(&self, out: &mut Vec<u8>) -> Result<u64, Error> {
        Ok(graph::encode_append(
            self,
            &graph::EncodeOptions::uncompressed(),
            out,
        ))
    }
    fn decode_remote(bytes: &[u8]) -> Result<T, DecodeError> {
        graph::decode(bytes)
    }
}

/// A message that stays on its node: any `Send + 'static` value, passed by
/// pointer. Sending one to a process on another node is refused (logged).
///
/// ```
/// use graft::*;
/// let node = Node::start(NodeConfig::new("127.0.0.1:0")).unwrap();
/// let f = node.run(|| {
///     send(self_pid(), Local(Box::new(|x: u32| x + 1) as Box<dyn Fn(u32) -> u32 + Send>));
///     let Local(f) = expect::<Local<Box<dyn Fn(u32) -> u32 + Send>>>();
///     f(41)
/// }).unwrap();
/// assert_eq!(f, 42);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Local<T>(pub T);

impl<T: Send + 'static> Message for Local<T> {}

/// String literals are handy local messages (`send(pid, "ready")`); they
/// cannot be decoded on another node, so they stay local. Send a `String`
/// across nodes.
impl Message for &'static str {}
