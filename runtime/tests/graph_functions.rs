//! Mobile functions: calls, round trips, fingerprint and corruption checks.

use std::sync::Arc;

use graft::graph::{self, fingerprint, DecodeError, Encoded, MobileFn, MobileFnOnce};
use graft::{mobile_fn, mobile_fn_once, Mobile, Pid};

#[test]
fn fn_round_trip_binary_and_text() {
    let offset = 10i64;
    let f = mobile_fn!([offset] |x: i64| x + offset);
    assert_eq!(f.call(1), 11);
    let back: MobileFn<i64, i64> = graph::decode(&graph::encode(&f)).unwrap();
    assert_eq!(back.call(5), 15);
    assert_eq!(back.clone().call(6), 16);
    let text = graph::to_text(&f);
    let back: MobileFn<i64, i64> = graph::from_text(&text).unwrap();
    assert_eq!(back.call(7), 17);
}

#[test]
fn fn_with_rich_environment() {
    let names = vec!["a".to_string(), "bb".to_string()];
    let scale = 3usize;
    let f = mobile_fn!([names, scale] |i: usize| names[i].len() * scale);
    let back: MobileFn<usize, usize> = graph::decode(&graph::encode(&f)).unwrap();
    assert_eq!(back.call(1), 6);
    let g = mobile_fn!([] || 42u8);
    let back: MobileFn<(), u8> = graph::decode(&graph::encode(&g)).unwrap();
    assert_eq!(back.call(()), 42);
}

#[test]
fn fn_inside_messages() {
    #[derive(Mobile)]
    enum Msg {
        Apply { to: Pid, f: MobileFn<u32, u32> },
        Stop,
    }
    let k = 2u32;
    let msgs = vec![
        Msg::Apply {
            to: Pid::new(graft::NodeId(1), 1, 1),
            f: mobile_fn!([k] |x: u32| x * k),
        },
        Msg::Stop,
    ];
    let back: Vec<Msg> = graph::decode(&graph::encode(&msgs)).unwrap();
    match &back[0] {
        Msg::Apply { f, .. } => assert_eq!(f.call(21), 42),
        Msg::Stop => panic!("wrong variant"),
    }
    assert!(matches!(back[1], Msg::Stop));
}

#[test]
fn fn_once_and_returning() {
    let v = vec![1u64, 2, 3];
    let job = mobile_fn_once!([v] || v.into_iter().sum::<u64>());
    let job: MobileFnOnce<u64> = graph::decode(&graph::encode(&job)).unwrap();
    assert_eq!(job.call(), 6);

    let job = MobileFnOnce::<Encoded>::returning(Arc::new(String::from("hi")), |s| format!("{s}!"));
    let bytes = graph::encode(&job);
    let job: MobileFnOnce<Encoded> = graph::decode(&bytes).unwrap();
    let out = job.call();
    assert_eq!(
        graph::peek_descriptor(&out.0).unwrap(),
        graph::descriptor_of::<String>().hash()
    );
    assert_eq!(out.decode::<String>().unwrap(), "hi!");
    // A returning function and a plain one of the same type coexist.
    let plain = MobileFnOnce::new(5u8, |x| Encoded(graph::encode(&(x + 1))));
    let plain: MobileFnOnce<Encoded> = graph::decode(&graph::encode(&plain)).unwrap();
    assert_eq!(plain.call().decode::<u8>().unwrap(), 6);
}

#[test]
fn functions_are_send_sync_clone() {
    fn check<T: Send + Sync + 'static>() {}
    check::<MobileFn<String, Vec<u8>>>();
    check::<MobileFnOnce<String>>();
    let f = MobileFn::new((), |_: &(), x: u8| x);
    let g = f.clone();
    std::thread::spawn(move || assert_eq!(g.call(3), 3))
        .join()
        .unwrap();
    assert_eq!(f.call(4), 4);
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn other_build_is_refused() {
    let f = MobileFn::new(1u8, |a: &u8, b: u8| a + b);
    let mut bytes = graph::encode(&f);
    let at = find(&bytes, &fingerprint().to_le_bytes()).expect("fingerprint in the encoding");
    bytes[at] ^= 0x55;
    let err = graph::decode::<MobileFn<u8, u8>>(&bytes).unwrap_err();
    assert!(matches!(err, DecodeError::ForeignCode { .. }), "{err}");
    assert!(err.to_string().contains("code from another build"), "{err}");
}

#[test]
fn corrupted_code_reference_is_refused() {
    let f = MobileFn::new(1u8, |a: &u8, b: u8| a + b);
    let bytes = graph::encode(&f);
    let at = find(&bytes, &fingerprint().to_le_bytes()).unwrap() + 8;
    // Flip each bit of the trampoline and body offsets and of the checksum.
    for i in at..at + 24 {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            let err = graph::decode::<MobileFn<u8, u8>>(&b).unwrap_err();
            assert!(matches!(err, DecodeError::BadCode(_)), "{err}");
        }
    }
}

#[test]
fn signature_is_part_of_the_check() {
    // The header's descriptor already tells the signatures apart, but the
    // check also binds the reference to `MobileFn<A, R>`: decoding the body
    // of a `MobileFn<u8, u8>` as a `MobileFn<u8, u16>` fails.
    let f = MobileFn::new(1u8, |a: &u8, b: u8| a + b);
    let mut bytes = graph::encode(&f);
    assert!(matches!(
        graph::decode::<MobileFn<u8, u16>>(&bytes),
        Err(DecodeError::TypeMismatch { .. })
    ));
    // With the header forged to name the other type (the hash follows the
    // 3 magic, version and flags bytes), only the code reference's checksum
    // is left to refuse it.
    let other = graph::descriptor_of::<MobileFn<u8, u16>>().hash();
    bytes[5..13].copy_from_slice(&other.to_le_bytes());
    let err = graph::decode::<MobileFn<u8, u16>>(&bytes).unwrap_err();
    assert!(matches!(err, DecodeError::BadCode(_)), "{err}");
}
