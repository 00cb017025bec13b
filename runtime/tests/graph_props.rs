//! Property-style round trips over many generated values, with a small
//! hand-written generator (no dependency).

mod graph_gen;

use std::collections::HashMap;
use std::sync::Arc;

use graft::graph::{self, EncodeOptions};
use graft::Mobile;
use graph_gen::{gen, Rng, Val};

#[test]
fn generated_values_round_trip() {
    let mut r = Rng::new(1);
    for i in 0..3000 {
        let v = gen(&mut r, 4);
        let bytes = graph::encode(&v);
        assert_eq!(graph::decode::<Val>(&bytes).unwrap(), v, "case {i}");
        let text = graph::to_text(&v);
        assert_eq!(
            graph::from_text::<Val>(&text).unwrap(),
            v,
            "case {i}: {text}"
        );
        if i % 10 == 0 {
            let z = graph::encode_with(&v, &EncodeOptions::default().compress_above(16));
            assert_eq!(graph::decode::<Val>(&z).unwrap(), v, "case {i} compressed");
        }
    }
}

#[derive(Mobile, Debug)]
struct GNode {
    id: u32,
    kids: Vec<Arc<GNode>>,
}

/// Random DAGs: after decoding, two positions hold the same allocation
/// exactly when they did before.
#[test]
fn generated_dags_keep_identity() {
    let mut r = Rng::new(2);
    for _ in 0..200 {
        let n = 1 + r.below(40) as usize;
        let mut nodes: Vec<Arc<GNode>> = Vec::new();
        for i in 0..n {
            let kids = (0..r.below(4).min(i as u64))
                .map(|_| nodes[r.below(i as u64) as usize].clone())
                .collect();
            nodes.push(Arc::new(GNode { id: i as u32, kids }));
        }
        let roots: Vec<Arc<GNode>> = (0..1 + r.below(5))
            .map(|_| nodes[r.below(n as u64) as usize].clone())
            .collect();
        drop(nodes);
        for back in [
            graph::decode::<Vec<Arc<GNode>>>(&graph::encode(&roots)).unwrap(),
            graph::from_text::<Vec<Arc<GNode>>>(&graph::to_text(&roots)).unwrap(),
        ] {
            let mut before = HashMap::new();
            let mut after = HashMap::new();
            fn collect(n: &Arc<GNode>, out: &mut HashMap<u32, Vec<*const GNode>>) {
                out.entry(n.id).or_default().push(Arc::as_ptr(n));
                for k in &n.kids {
                    collect(k, out);
                }
            }
            let ids = |v: &[Arc<GNode>]| v.iter().map(|n| n.id).collect::<Vec<_>>();
            assert_eq!(ids(&back), ids(&roots), "the roots, in order");
            for (a, b) in roots.iter().zip(&back) {
                collect(a, &mut before);
                collect(b, &mut after);
            }
            assert_eq!(before.len(), after.len());
            for (id, ptrs) in &after {
                // Every occurrence of one id is one allocation after decoding,
                // as it was before (ids are unique per allocation).
                assert!(ptrs.iter().all(|p| *p == ptrs[0]), "node {id} split");
                assert_eq!(ptrs.len(), before[id].len());
            }
        }
    }
}
