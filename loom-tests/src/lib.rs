//! Loom models of graft's concurrent protocols live in `tests/`; run them with
//! `RUSTFLAGS="--cfg loom" cargo test -p graft-loom-tests --release`.
