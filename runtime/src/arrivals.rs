//! Messages from another node, delivered a batch at a time.
//!
//! A connection's thread (the poller's I/O thread, or the peer's reader
//! thread) hands the runtime every frame of one read, one by one
//! (`Handler::frame`), then says the read is done (`Handler::frames_end`).
//! A stream of messages to one process used to take that process's
//! mailbox lock once per message, against the owner draining it: at a few
//! million messages a second the two threads met on the lock, parking_lot
//! spun and yielded (80,000 `sched_yield`s in one `dist_throughput` run),
//! and the stream ran at half speed.
//!
//! Protocol, all on the connection's thread (a thread-local batch):
//! * a deliver frame for local pid `p`: if the batch is for another pid (or
//!   another node), deliver the batch first; then add the message to it;
//! * any other frame (control, alias, request), the end of a read (also
//!   one that ends in an error, before the connection's loss is
//!   reported), or a full batch ([`MAX`]): deliver the batch first.
//!
//! Delivering is [`NodeShared::deliver_many`]: every message as
//! `NodeShared::deliver` would, under one mailbox lock, with one wake. So
//! per connection the order of everything the runtime acts on is the order
//! of the frames (a signal or a reply after messages still comes after
//! them), and no message waits past the end of the read that brought it.

use crate::node::NodeShared;
use crate::pid::Pid;
use crate::process::Mail;
use std::cell::RefCell;
use std::sync::Arc;

/// Messages a batch holds at most before it is delivered.
const MAX: usize = 256;

#[derive(Default)]
struct Batch {
    /// The node and pid the held messages are for: `Some` exactly while
    /// `mails` holds any.
    target: Option<(Arc<NodeShared>, Pid)>,
    mails: Vec<Mail>,
}

thread_local! {
    static BATCH: RefCell<Batch> = RefCell::new(Batch::default());
}

/// Adds a message for the local pid `to` of node `n` to this thread's
/// batch (see the module docs).
pub(crate) fn arrive(n: &Arc<NodeShared>, to: Pid, mail: Mail) {
    let same =
        BATCH.with(|b| matches!(&b.borrow().target, Some((m, p)) if *p == to && Arc::ptr_eq(m, n)));
    if !same {
        flush();
    }
    let full = BATCH.with(|b| {
        let mut b = b.borrow_mut();
        if !same {
            b.target = Some((n.clone(), to));
        }
        b.mails.push(mail);
        b.mails.len() >= MAX
    });
    if full {
        flush();
    }
}

/// Delivers this thread's batch, if it holds anything (outside the
/// thread-local's borrow; the emptied buffer is kept for the next batch).
pub(crate) fn flush() {
    let Some((n, to, mut mails)) = BATCH.with(|b| {
        let mut b = b.borrow_mut();
        let (n, to) = b.target.take()?;
        Some((n, to, std::mem::take(&mut b.mails)))
    }) else {
        return;
    };
    n.deliver_many(to, &mut mails);
    // Nothing arrives during a delivery: the batch is still empty.
    BATCH.with(|b| b.borrow_mut().mails = mails);
}
