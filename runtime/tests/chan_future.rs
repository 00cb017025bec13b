//! Futures and promises: waited before and after fulfilment, by several
//! waiters, with timeouts; a dropped promise.

mod common;

use graft::*;
use std::time::Duration;

rt_test! {
    fn waited_before_fulfilment_by_several_processes() {
        let (p, f) = promise::<String>();
        let parent = self_pid();
        for _ in 0..8 {
            let f = f.clone();
            spawn(move || send(parent, f.wait().unwrap().clone()));
        }
        yield_now();
        p.fulfil("ready".to_string());
        for _ in 0..8 {
            assert_eq!(expect::<String>(), "ready");
        }
    }

    fn waited_after_fulfilment_keeps_the_value() {
        let (p, f) = promise::<Vec<u32>>();
        p.fulfil(vec![1, 2, 3]);
        assert!(f.is_ready());
        for _ in 0..3 {
            assert_eq!(f.wait().unwrap(), &[1, 2, 3]);
        }
        let g = f.clone();
        let parent = self_pid();
        spawn(move || send(parent, g.wait().unwrap().len()));
        assert_eq!(expect::<usize>(), 3);
        assert_eq!(f.try_get(), Some(Ok(&vec![1, 2, 3])));
    }

    fn fulfilled_from_another_process() {
        let (p, f) = promise::<u64>();
        spawn(move || {
            yield_now();
            p.fulfil(99);
        });
        assert_eq!(*f.wait().unwrap(), 99);
    }

    fn dropped_promise_wakes_waiters_with_an_error() {
        let (p, f) = promise::<u8>();
        let parent = self_pid();
        for _ in 0..3 {
            let f = f.clone();
            spawn(move || send(parent, f.wait().copied()));
        }
        yield_now();
        drop(p);
        for _ in 0..3 {
            assert_eq!(expect::<Result<u8, PromiseDropped>>(), Err(PromiseDropped));
        }
        assert_eq!(f.wait(), Err(PromiseDropped));
        assert!(PromiseDropped.to_string().contains("dropped"));
    }

    fn promise_dropped_by_a_dying_process() {
        let (p, f) = promise::<u8>();
        spawn(move || {
            let _p = p;
            panic!("no value for you");
        });
        assert_eq!(f.wait(), Err(PromiseDropped));
    }

    fn wait_timeout_then_value() {
        let (p, f) = promise::<u8>();
        assert_eq!(f.wait_timeout(Duration::from_millis(5)), Err(WaitTimeoutError::Timeout));
        p.fulfil(1);
        assert_eq!(f.wait_timeout(Duration::from_millis(5)), Ok(&1));
    }

    fn os_thread_waits_on_a_process() {
        let (p, f) = promise::<u32>();
        let t = std::thread::spawn(move || *f.wait().unwrap());
        p.fulfil(5);
        assert_eq!(blocking(move || t.join().unwrap()), 5);
    }
}

#[test]
fn into_value_takes_or_clones() {
    let (p, f) = promise::<String>();
    let g = f.clone();
    p.fulfil("x".into());
    assert_eq!(g.into_value().unwrap(), "x");
    assert_eq!(f.into_value().unwrap(), "x");
}

#[test]
fn auto_traits() {
    fn is_send_sync<T: Send + Sync>() {}
    is_send_sync::<Future<String>>();
    is_send_sync::<Promise<String>>();
    is_send_sync::<Unparker>();
    is_send_sync::<SendPort<String>>();
    is_send_sync::<PromiseDropped>();
    is_send_sync::<WaitTimeoutError>();
    fn is_error<E: std::error::Error + Send + Sync + 'static>() {}
    is_error::<SendError<String>>();
    is_error::<TrySendError<String>>();
    is_error::<SendTimeoutError<String>>();
    is_error::<RecvError>();
    is_error::<TryRecvError>();
    is_error::<RecvTimeoutError>();
    is_error::<PromiseDropped>();
    is_error::<WaitTimeoutError>();
}
