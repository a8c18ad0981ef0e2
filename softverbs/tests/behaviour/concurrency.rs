//! Concurrent post and poll on one QP from two threads.

use std::time::{Duration, Instant};

use vqp_host::sys::*;

use crate::common::*;

#[test]
fn one_thread_posts_while_another_polls() {
    const N: u64 = 20_000;
    let v = verbs();
    let (mut a, b) = pair(&v);
    fill(&mut a, 3);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let poller = s.spawn(|| {
            let mut next = 0u64;
            let mut buf = [vqp_host::Wc::default(); 32];
            let deadline = Instant::now() + Duration::from_secs(30);
            while next < N {
                for wc in a.cq.poll(&mut buf).unwrap().iter() {
                    assert!(wc.is_ok(), "{wc:?}");
                    assert_eq!(wc.wr_id(), next, "completions in posting order");
                    next += 1;
                }
                assert!(Instant::now() < deadline, "stuck at {next}");
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let mut i = 0u64;
        while i < N {
            let off = (i % 512) * 64;
            let mut sge = a.mr.sge(off as usize, 64).unwrap();
            let mut w = send_wr(i, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
            rdma(&mut w, &b.mr, off);
            // SAFETY: a valid WR over live buffers.
            match unsafe { a.qp.post_send(&mut w) } {
                Ok(()) => i += 1,
                // The send queue is full: the poller frees slots.
                Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        poller.join().unwrap();
    });
    assert!(stop.load(std::sync::atomic::Ordering::Relaxed));
    assert_eq!(&bytes(&b)[..32768], &bytes(&a)[..32768]);
}
