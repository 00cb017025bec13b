//! The one place that names `std::sync`, `parking_lot` or `loom`.
//!
//! Every concurrent protocol in the runtime (the process state word, mailbox
//! push/park/wake, the idle-worker protocol) is written against these names.
//! Under `--cfg loom` they become loom's model-checked primitives, so the
//! `graft-loom-tests` crate can explore every interleaving of the real code.
//! Outside loom they are std atomics and parking_lot locks.

#[cfg(not(loom))]
mod imp {
    pub(crate) use parking_lot::{Mutex, MutexGuard, RwLock};
    pub(crate) use std::sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };

    /// A condition variable whose `wait` takes and returns the guard (loom's
    /// shape), over parking_lot's.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(parking_lot::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Condvar {
            Condvar(parking_lot::Condvar::new())
        }
        pub(crate) fn wait<'a, T>(&self, mut guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
            self.0.wait(&mut guard);
            guard
        }
        pub(crate) fn wait_timeout<'a, T>(
            &self,
            mut guard: MutexGuard<'a, T>,
            dur: std::time::Duration,
        ) -> MutexGuard<'a, T> {
            self.0.wait_for(&mut guard, dur);
            guard
        }
        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }
        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }

    /// `UnsafeCell` with loom's `with`/`with_mut` API.
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(v: T) -> UnsafeCell<T> {
            UnsafeCell(std::cell::UnsafeCell::new(v))
        }
        #[inline]
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }

    #[inline]
    pub(crate) fn spin_loop() {
        std::hint::spin_loop();
    }

    pub(crate) use std::thread_local;
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
    pub(crate) use loom::sync::MutexGuard;

    /// loom's mutex behind parking_lot's `lock()` shape.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(v: T) -> Mutex<T> {
            Mutex(loom::sync::Mutex::new(v))
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap()
        }
    }

    /// loom's rwlock behind parking_lot's shape.
    #[derive(Debug, Default)]
    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(v: T) -> RwLock<T> {
            RwLock(loom::sync::RwLock::new(v))
        }
        pub(crate) fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
            self.0.read().unwrap()
        }
        pub(crate) fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
            self.0.write().unwrap()
        }
    }

    /// loom's condition variable.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Condvar {
            Condvar(loom::sync::Condvar::new())
        }
        pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
            self.0.wait(guard).unwrap()
        }
        pub(crate) fn wait_timeout<'a, T>(
            &self,
            guard: MutexGuard<'a, T>,
            _dur: std::time::Duration,
        ) -> MutexGuard<'a, T> {
            // loom has no time: a timed wait is a wait that may wake spuriously.
            self.0.wait(guard).unwrap()
        }
        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }
        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }

    pub(crate) use loom::cell::UnsafeCell;

    pub(crate) fn spin_loop() {
        loom::thread::yield_now();
    }

    pub(crate) use loom::thread_local;
}

pub(crate) use imp::*;
