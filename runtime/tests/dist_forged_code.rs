//! Forged, truncated and unknown code references sent by a connected peer,
//! in a remote spawn and inside a message: refused with an error, the node
//! and its other processes alive. Real nodes on 127.0.0.1.

use std::time::Duration;

use graft::graph::{self, DecodeError, Describer, Encoder, Format, MobileFn, MobileFnOnce};
use graft::*;

fn node() -> Node {
    let _ = env_logger::builder().is_test(true).try_init();
    Node::start(
        NodeConfig::new("127.0.0.1:0")
            .workers(2)
            .cookie("forged-code")
            .heartbeat(Duration::from_millis(200)),
    )
    .expect("node starts")
}

fn pair() -> (Node, Node, NodeId) {
    let a = node();
    let b = node();
    let id = a.connect(b.addr()).expect("connect");
    (a, b, id)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `bytes` (an encoded function whose code id is `id`) with the id
/// replaced by `with`.
fn with_id(bytes: &[u8], id: u64, with: u64) -> Vec<u8> {
    let at = find(bytes, &id.to_le_bytes()).expect("code id in the encoding");
    let mut b = bytes.to_vec();
    b[at..at + 8].copy_from_slice(&with.to_le_bytes());
    b
}

/// A process on `node` that answers `(x, to)` with `x + 1`: shown alive
/// after each attack.
fn echo_on(node: NodeId) -> Pid {
    spawn_on(node, (), |()| loop {
        let (x, to): (u64, Pid) = expect();
        send(to, x + 1);
    })
    .expect("echo spawned")
}

fn echo_answers(echo: Pid, x: u64) {
    send(echo, (x, self_pid()));
    assert_eq!(
        receive().on(|y: u64| y).timeout(Duration::from_secs(20)),
        Some(x + 1),
        "the echo process answers"
    );
}

#[test]
fn forged_truncated_and_unknown_spawn_bodies_are_refused() {
    let (a, b, b_id) = pair();
    let errors = a
        .run(move || {
            let echo = echo_on(b_id);
            echo_answers(echo, 1);
            let me = self_pid();
            let good = MobileFnOnce::new(me, |me: Pid| send(me, 7u8));
            let id = good.code_id();
            let bytes = graph::encode(&good);
            let other = MobileFn::new(0i64, |k: &i64, x: i64| x + k).code_id();
            let mut errors = Vec::new();
            // Unknown ids: random, zero, and the bits of a real one flipped.
            for forged in [0x0123_4567_89ab_cdef, 0, id ^ 1, id ^ (1 << 63)] {
                let r = spawn_encoded_on(b_id, with_id(&bytes, id, forged));
                errors.push(format!("{r:?}"));
                assert!(
                    matches!(&r, Err(Error::Remote(m)) if m.contains("no mobile function")),
                    "{r:?}"
                );
            }
            // A registered function of another type.
            let r = spawn_encoded_on(b_id, with_id(&bytes, id, other));
            assert!(
                matches!(&r, Err(Error::Remote(m)) if m.contains("another type")),
                "{r:?}"
            );
            errors.push(format!("{r:?}"));
            // Every truncation.
            for len in 0..bytes.len() {
                let r = spawn_encoded_on(b_id, bytes[..len].to_vec());
                assert!(matches!(&r, Err(Error::Remote(_))), "{len}: {r:?}");
            }
            // Not even a graph.
            let r = spawn_encoded_on(b_id, b"jump to std::process::abort".to_vec());
            assert!(matches!(&r, Err(Error::Remote(_))), "{r:?}");
            // The node and its processes carry on; the real body runs.
            echo_answers(echo, 2);
            spawn_encoded_on(b_id, bytes).expect("the genuine body is spawned");
            assert_eq!(
                receive().on(|x: u8| x).timeout(Duration::from_secs(20)),
                Some(7)
            );
            errors
        })
        .unwrap();
    for e in &errors {
        eprintln!("{e}");
    }
    assert_eq!(b.run(|| 40 + 2).unwrap(), 42, "node b still runs processes");
}

/// Describes itself as a `MobileFn<i64, i64>` and writes a code reference
/// of its own choosing: a forged function inside a message.
enum ForgedFn {
    /// This id and a well-formed environment.
    Id(u64),
    /// Only the first `n` bytes of an id (the message ends there).
    Cut(u8),
}

impl Mobile for ForgedFn {
    fn describe(d: &mut Describer) {
        <MobileFn<i64, i64> as Mobile>::describe(d);
    }
    fn encode<F: Format>(&self, e: &mut Encoder<'_, F>) {
        e.begin("fn");
        e.field("id");
        match self {
            ForgedFn::Id(id) => {
                e.scalar(*id);
                e.field("env");
                e.scalar(5i64);
            }
            ForgedFn::Cut(n) => {
                for _ in 0..*n {
                    e.scalar(0xa5u8);
                }
            }
        }
        e.end();
    }
    fn decode<S: graph::Source>(_: &mut graph::Decoder<'_, S>) -> Result<Self, DecodeError> {
        Err(DecodeError::Invalid("only sent".into()))
    }
}

#[test]
fn forged_functions_inside_messages_are_refused() {
    let (a, b, b_id) = pair();
    let answers = a
        .run(move || {
            // Applies each function it receives to 1 and sends the result.
            let applier = spawn_on(b_id, self_pid(), |to| loop {
                let f: MobileFn<i64, i64> = expect();
                send(to, f.call(1));
            })
            .unwrap();
            let echo = echo_on(b_id);
            let genuine = MobileFn::new(10i64, |k: &i64, x: i64| x + k);
            let other_type = MobileFnOnce::new((), |()| 0u8).code_id();
            for forged in [
                ForgedFn::Id(0xdead_beef_dead_beef),
                ForgedFn::Id(0),
                ForgedFn::Id(genuine.code_id() ^ 0x100),
                ForgedFn::Id(other_type),
                ForgedFn::Cut(0),
                ForgedFn::Cut(3),
                ForgedFn::Cut(7),
            ] {
                send(applier, forged);
            }
            // Each forged message was dropped by the receiver (and logged);
            // the genuine one that follows is applied.
            send(applier, genuine);
            let first = receive().on(|x: i64| x).timeout(Duration::from_secs(20));
            echo_answers(echo, 3);
            let more = receive().on(|x: i64| x).timeout(Duration::from_millis(200));
            (first, more)
        })
        .unwrap();
    assert_eq!(answers, (Some(11), None));
    assert_eq!(b.run(|| 1 + 1).unwrap(), 2, "node b still runs processes");
}
