//! Mobile functions: calls, round trips, code ids and forged references.

use std::sync::Arc;

use graft::graph::{self, DecodeError, Encoded, MobileFn, MobileFnOnce};
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

/// Where `id` sits in `bytes` (the encoding of a function).
fn id_at(bytes: &[u8], id: u64) -> usize {
    assert_ne!(
        id, 0,
        "this test executable has a table of mobile functions"
    );
    find(bytes, &id.to_le_bytes()).expect("the code id in the encoding")
}

#[test]
fn unknown_code_id_is_refused() {
    let f = MobileFn::new(1u8, |a: &u8, b: u8| a + b);
    let mut bytes = graph::encode(&f);
    let at = id_at(&bytes, f.code_id());
    bytes[at..at + 8].copy_from_slice(&0x0123_4567_89ab_cdefu64.to_le_bytes());
    let err = graph::decode::<MobileFn<u8, u8>>(&bytes).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::NotRegistered {
                id: 0x0123_4567_89ab_cdef,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("no mobile function"), "{err}");
    // Id 0 (what an executable without a table writes) names nothing.
    bytes[at..at + 8].copy_from_slice(&0u64.to_le_bytes());
    let err = graph::decode::<MobileFn<u8, u8>>(&bytes).unwrap_err();
    assert!(
        matches!(err, DecodeError::NotRegistered { id: 0, .. }),
        "{err}"
    );
}

#[test]
fn corrupted_code_id_is_refused() {
    let f = MobileFn::new(1u8, |a: &u8, b: u8| a + b);
    let bytes = graph::encode(&f);
    let at = id_at(&bytes, f.code_id());
    for i in at..at + 8 {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            let err = graph::decode::<MobileFn<u8, u8>>(&b).unwrap_err();
            assert!(
                matches!(
                    err,
                    DecodeError::NotRegistered { .. } | DecodeError::BadCode(_)
                ),
                "{err}"
            );
        }
    }
}

#[test]
fn truncated_function_is_refused() {
    let f = MobileFn::new(
        Arc::new(String::from("env")),
        |s: &Arc<String>, x: usize| s.len() + x,
    );
    let bytes = graph::encode(&f);
    for len in 0..bytes.len() {
        assert!(graph::decode::<MobileFn<usize, usize>>(&bytes[..len]).is_err());
    }
    let text = graph::to_text(&f);
    for len in 0..text.len() {
        assert!(graph::from_text::<MobileFn<usize, usize>>(&text[..len]).is_err());
    }
}

#[test]
fn code_id_of_another_function_type_is_refused() {
    // The header's descriptor already tells the signatures apart; with the
    // header forged to name the other type (the hash follows the 3 magic,
    // version and flags bytes), the entry's type check refuses it.
    let f = MobileFn::new(1u8, |a: &u8, b: u8| a + b);
    let mut bytes = graph::encode(&f);
    assert!(matches!(
        graph::decode::<MobileFn<u8, u16>>(&bytes),
        Err(DecodeError::TypeMismatch { .. })
    ));
    let other = graph::descriptor_of::<MobileFn<u8, u16>>().hash();
    bytes[5..13].copy_from_slice(&other.to_le_bytes());
    let err = graph::decode::<MobileFn<u8, u16>>(&bytes).unwrap_err();
    assert!(matches!(err, DecodeError::BadCode(_)), "{err}");

    // A registered id of a `MobileFnOnce` spliced into a `MobileFn`.
    let once = MobileFnOnce::new(1u8, |a: u8| a + 1);
    let mut bytes = graph::encode(&f);
    let at = id_at(&bytes, f.code_id());
    bytes[at..at + 8].copy_from_slice(&once.code_id().to_le_bytes());
    let err = graph::decode::<MobileFn<u8, u8>>(&bytes).unwrap_err();
    assert!(matches!(err, DecodeError::BadCode(_)), "{err}");
}

/// A closure made in a generic function: one type per type argument.
fn adder<T: Mobile + Copy + std::ops::Add<Output = T>>(k: T) -> MobileFn<T, T> {
    MobileFn::new(k, |k: &T, x: T| x + *k)
}

#[test]
fn code_ids_name_bodies_and_types() {
    let a = MobileFn::new(1u8, |k: &u8, x: u8| x + k);
    let b = MobileFn::new(1u8, |k: &u8, x: u8| x + k);
    // Same text, two closures: two functions.
    assert_ne!(a.code_id(), b.code_id());
    // One closure, many values: one function.
    assert_eq!(adder(1u32).code_id(), adder(7u32).code_id());
    // One closure, other type arguments: other functions.
    let ids = [
        adder(1u8).code_id(),
        adder(1u32).code_id(),
        adder(1u64).code_id(),
        adder(1i64).code_id(),
    ];
    for (i, x) in ids.iter().enumerate() {
        assert_ne!(*x, 0);
        for y in &ids[i + 1..] {
            assert_ne!(x, y);
        }
    }
    // Each decodes to its own code.
    let back: MobileFn<u64, u64> = graph::decode(&graph::encode(&adder(5u64))).unwrap();
    assert_eq!(back.call(1), 6);
    let back: MobileFn<u8, u8> = graph::decode(&graph::encode(&adder(5u8))).unwrap();
    assert_eq!(back.call(1), 6);
    // A fn item is a body too.
    fn double(_: &(), x: u16) -> u16 {
        x * 2
    }
    let d = MobileFn::new((), double);
    let back: MobileFn<u16, u16> = graph::decode(&graph::encode(&d)).unwrap();
    assert_eq!(back.call(21), 42);
    assert!(graph::mobile_entries().unwrap() >= 6);
}

/// Run by `a_stripped_executable_refuses_every_function` in a stripped
/// copy of this test executable.
#[test]
fn stripped_child() {
    if std::env::var_os("GRAFT_STRIPPED_CHILD").is_none() {
        return;
    }
    let why = graph::mobile_entries().expect_err("no table in a stripped executable");
    assert!(why.contains("stripped"), "{why}");
    let f = MobileFn::new(1u8, |a: &u8, b: u8| a + b);
    assert_eq!(f.code_id(), 0);
    let err = graph::decode::<MobileFn<u8, u8>>(&graph::encode(&f)).unwrap_err();
    match &err {
        DecodeError::NotRegistered { id: 0, detail } => {
            assert!(detail.contains("stripped"), "{err}")
        }
        _ => panic!("{err}"),
    }
}

#[test]
fn a_stripped_executable_refuses_every_function() {
    let exe = std::env::current_exe().unwrap();
    let copy = std::env::temp_dir().join(format!("graft-stripped-{}", std::process::id()));
    std::fs::copy(&exe, &copy).unwrap();
    let stripped = std::process::Command::new("strip")
        .arg("--strip-all")
        .arg(&copy)
        .status();
    if !matches!(stripped, Ok(s) if s.success()) {
        eprintln!("no `strip` here: skipped");
        let _ = std::fs::remove_file(&copy);
        return;
    }
    let out = std::process::Command::new(&copy)
        .args(["--exact", "stripped_child", "--nocapture"])
        .env("GRAFT_STRIPPED_CHILD", "1")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&copy);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
