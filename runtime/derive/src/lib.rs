//! `#[derive(Mobile)]` for graft (filled in by the graph serialisation work).
