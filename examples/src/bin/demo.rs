//! The README's first command: a small cluster on loopback.
fn main() {
    env_logger::init();
}
