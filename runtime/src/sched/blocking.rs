//! The blocking pool: OS threads for calls that would stall a worker
//! (file I/O, DNS, sleeping C libraries). `blocking(f)` parks the calling
//! process and runs `f` here; the result wakes the process.
//!
//! Threads are started on demand, up to a bound, and kept until the node
//! stops (then joined).

use crate::loom::Mutex;
use crossbeam_channel::{unbounded, Receiver, Sender};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

/// Most threads the pool starts.
const MAX_THREADS: usize = 256;

/// A pool of threads for blocking calls.
#[derive(Debug)]
pub(crate) struct BlockingPool {
    tx: Sender<Option<Job>>,
    rx: Receiver<Option<Job>>,
    idle: std::sync::Arc<AtomicUsize>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    name: String,
}

impl BlockingPool {
    pub(crate) fn new(name: &str) -> BlockingPool {
        let (tx, rx) = unbounded();
        BlockingPool {
            tx,
            rx,
            idle: Default::default(),
            threads: Mutex::new(Vec::new()),
            name: name.to_string(),
        }
    }

    /// Runs `job` on a pool thread.
    pub(crate) fn submit(&self, job: Job) {
        if self.idle.load(Ordering::SeqCst) == 0 {
            let mut threads = self.threads.lock();
            if threads.len() < MAX_THREADS {
                let rx = self.rx.clone();
                let idle = self.idle.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("{}-blocking", self.name))
                    .spawn(move || {
                        idle.fetch_add(1, Ordering::SeqCst);
                        while let Ok(Some(job)) = rx.recv() {
                            idle.fetch_sub(1, Ordering::SeqCst);
                            job();
                            idle.fetch_add(1, Ordering::SeqCst);
                        }
                    });
                match spawned {
                    Ok(h) => threads.push(h),
                    Err(e) => log::error!("graft: cannot start a blocking-pool thread: {e}"),
                }
            }
        }
        // The receiver lives in `self`, so the channel is open.
        let _ = self.tx.send(Some(job));
    }

    /// Threads started.
    #[cfg(test)]
    pub(crate) fn threads(&self) -> usize {
        self.threads.lock().len()
    }

    /// Whether thread `id` is one of the pool's.
    pub(crate) fn owns(&self, id: std::thread::ThreadId) -> bool {
        self.threads.lock().iter().any(|t| t.thread().id() == id)
    }

    /// Stops every thread (after its current job) and joins them.
    pub(crate) fn stop(&self) {
        let threads = std::mem::take(&mut *self.threads.lock());
        for _ in &threads {
            let _ = self.tx.send(None);
        }
        for t in threads {
            let _ = t.join();
        }
    }
}
