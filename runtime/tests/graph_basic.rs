//! Round trips of simple values, derive shapes, text form, descriptors.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use graft::graph::{self, descriptor_of, DecodeError};
use graft::{Mobile, MonitorRef, NodeId, Pid};

fn round<T: Mobile + PartialEq + std::fmt::Debug>(v: &T) {
    let bytes = graph::encode(v);
    assert_eq!(&graph::decode::<T>(&bytes).unwrap(), v, "binary");
    let text = graph::to_text(v);
    assert_eq!(&graph::from_text::<T>(&text).unwrap(), v, "text: {text}");
    let z = graph::encode_with(v, &graph::EncodeOptions::default().compress_above(0));
    assert_eq!(&graph::decode::<T>(&z).unwrap(), v, "compressed");
}

#[derive(Mobile, Debug, PartialEq, Clone)]
struct Named {
    a: u8,
    b: String,
    c: Vec<i64>,
}

#[derive(Mobile, Debug, PartialEq, Clone)]
struct Tuple(u32, Option<String>);

#[derive(Mobile, Debug, PartialEq, Clone)]
struct Unit;

#[derive(Mobile, Debug, PartialEq, Clone)]
enum Shape {
    Circle { r: f64 },
    Rect(f32, f32),
    Empty,
}

#[derive(Mobile, Debug, PartialEq, Clone)]
struct Generic<T, U> {
    t: T,
    us: Vec<U>,
}

#[derive(Mobile, Debug, PartialEq)]
enum List {
    Cons(u64, Box<List>),
    Nil,
}

#[test]
fn primitives() {
    round(&0u8);
    round(&u64::MAX);
    round(&i128::MIN);
    round(&-1.5f64);
    round(&f32::INFINITY);
    round(&'é');
    round(&true);
    round(&usize::MAX);
    round(&isize::MIN);
    round(&());
    round(&String::from("hello \"world\"\n\t\u{1F600} \\"));
    round(&Duration::new(5, 123));
    round(&Pid::new(NodeId(9), 3, 77));
    round(&NodeId::from_name("a@b"));
    round(&MonitorRef::new(NodeId(1), 2));
}

#[test]
fn containers() {
    round(&vec![1u64, 2, 3]);
    round(&Vec::<u8>::new());
    round(&VecDeque::from(vec![1i16, -2]));
    round(&[1u32, 2, 3]);
    round(&Some(Some(3u8)));
    round(&Option::<u8>::None);
    round(&Result::<u8, String>::Err("no".into()));
    round(&(
        1u8,
        2u16,
        3u32,
        4u64,
        5i8,
        6i16,
        7i32,
        8i64,
        'x',
        true,
        (),
        String::new(),
    ));
    round(&Box::new(5u8));
    let m: HashMap<String, u32> = [("a".to_string(), 1), ("b".to_string(), 2)].into();
    round(&m);
    let b: BTreeMap<u8, Vec<u8>> = [(1, vec![1]), (2, vec![])].into();
    round(&b);
    round(&HashSet::from([1u8, 2, 3]));
    round(&BTreeSet::from(["x".to_string()]));
    round(&vec![(); 1000]);
}

#[test]
fn derived() {
    round(&Named {
        a: 1,
        b: "x".into(),
        c: vec![-1, 2],
    });
    round(&Tuple(7, Some("y".into())));
    round(&Unit);
    round(&vec![
        Shape::Circle { r: 1.0 },
        Shape::Rect(1.0, 2.0),
        Shape::Empty,
    ]);
    round(&Generic {
        t: 5u8,
        us: vec!["a".to_string()],
    });
    round(&List::Cons(1, Box::new(List::Cons(2, Box::new(List::Nil)))));
}

#[test]
fn descriptors() {
    let d = descriptor_of::<Named>();
    assert_eq!(d.name(), "Named");
    assert_eq!(d.readable(), "struct Named{a:u8,b:String,c:Vec<i64>}");
    let l = descriptor_of::<List>();
    assert_eq!(l.readable(), "enum List{Cons(:u64,:Box<@List>),Nil()}");
    assert_ne!(
        descriptor_of::<Generic<u8, u8>>().hash(),
        descriptor_of::<Generic<u8, u16>>().hash()
    );
    assert_eq!(descriptor_of::<Vec<Arc<Named>>>().name(), "Vec<Arc<Named>>");
}

#[test]
fn mismatch_names_both_types() {
    let bytes = graph::encode(&Named {
        a: 1,
        b: String::new(),
        c: vec![],
    });
    let err = graph::decode::<Tuple>(&bytes).unwrap_err();
    assert!(matches!(err, DecodeError::TypeMismatch { .. }));
    let msg = err.to_string();
    assert!(msg.contains("`Named`") && msg.contains("`Tuple`"), "{msg}");
    assert_eq!(
        graph::peek_descriptor(&bytes).unwrap(),
        descriptor_of::<Named>().hash()
    );
    let text = graph::to_text(&5u8);
    assert!(matches!(
        graph::from_text::<u16>(&text),
        Err(DecodeError::TypeMismatch { .. })
    ));
}

#[test]
fn usize_that_does_not_fit() {
    // A u64 that is not a valid usize would fail on 32-bit machines; on
    // 64-bit, check the isize/usize wire width instead.
    let bytes = graph::encode(&usize::MAX);
    assert_eq!(
        bytes.len() - graph::encode(&()).len(),
        8 + ("usize".len() - "()".len())
    );
}

#[test]
fn strings_that_are_not_utf8_are_refused() {
    // "abcé" ends in the two bytes of 'é'; each alone is not UTF-8, and
    // 0x80 is not ASCII either.
    let good = graph::encode(&String::from("abc\u{e9}"));
    assert_eq!(graph::decode::<String>(&good).unwrap(), "abc\u{e9}");
    for bad in [0x80u8, 0xc3, 0xff] {
        let mut bytes = good.clone();
        let n = bytes.len();
        bytes[n - 2] = b'd';
        bytes[n - 1] = bad;
        match graph::decode::<String>(&bytes) {
            Err(graph::DecodeError::Invalid(m)) => assert!(m.contains("UTF-8"), "{m}"),
            other => panic!("{bad:#x}: {other:?}"),
        }
        bytes[n - 1] = b'e';
        assert_eq!(graph::decode::<String>(&bytes).unwrap(), "abcde");
    }
}

#[test]
fn text_errors_give_the_offset_in_the_whole_text() {
    let text = graph::to_text(&5u8);
    let bad = format!("{}x", &text[..text.len() - 1]);
    let err = graph::from_text::<u8>(&bad).unwrap_err();
    assert_eq!(
        err,
        DecodeError::Invalid(format!("`x` is not a u8 (at byte {})", bad.len()))
    );
}
