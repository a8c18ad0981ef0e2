//! On-demand paging as a ConnectX has it: a region registered with
//! `IBV_ACCESS_ON_DEMAND` whose pages need not be mapped — an access to a range not
//! mapped at that moment completes with a protection or remote access error instead
//! of faulting the process, and succeeds once the range is mapped — and implicit ODP
//! (`ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | …)`), whose keys are good
//! for any address.
//!
//! Tests here run in parallel in one process, each on its own objects.

mod common;

use core::ffi::{c_int, c_void};
use std::ptr::null_mut;

use common::*;
use vqp_host::sys::*;
use vqp_host::WcStatus;

const PAGE: usize = 4096;
const ODP_ALL: u32 = IBV_ACCESS_ON_DEMAND
    | IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;

/// Two anonymous pages, the second unmapped again (a hole the region covers).
struct Hole {
    base: *mut u8,
}

impl Hole {
    fn new() -> Hole {
        // SAFETY: a fresh anonymous mapping; the second page is unmapped at once.
        let base = unsafe {
            let p = libc::mmap(
                null_mut(),
                2 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            assert_eq!(libc::munmap(p.cast::<u8>().add(PAGE).cast(), PAGE), 0);
            p.cast::<u8>()
        };
        Hole { base }
    }

    fn hole(&self) -> u64 {
        self.base as u64 + PAGE as u64
    }

    /// Maps the hole again (zeroed).
    fn fill_hole(&self) {
        // SAFETY: maps exactly the page this struct unmapped, at its address.
        let p = unsafe {
            libc::mmap(
                self.base.add(PAGE).cast(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        assert_eq!(p, self.base.wrapping_add(PAGE).cast::<c_void>());
    }
}

impl Drop for Hole {
    fn drop(&mut self) {
        // SAFETY: the two pages this struct mapped (unmapping a hole is allowed).
        unsafe { libc::munmap(self.base.cast(), 2 * PAGE) };
    }
}

/// Registers `[addr, addr + len)` on `s`'s PD with `access`.
fn reg(s: &Side, addr: *mut c_void, len: usize, access: u32) -> *mut ibv_mr {
    // SAFETY: a live PD; the memory is on-demand (or the test's own, kept alive).
    unsafe { vqp_softverbs::ibv_reg_mr(s.pd.as_raw(), addr, len, access as c_int) }
}

fn dereg(mr: *mut ibv_mr) {
    // SAFETY: a region of the provider, not used afterwards.
    assert_eq!(unsafe { vqp_softverbs::ibv_dereg_mr(mr) }, 0);
}

fn keys(mr: *mut ibv_mr) -> (u32, u32) {
    // SAFETY: a live region.
    unsafe { ((*mr).lkey, (*mr).rkey) }
}

/// A signaled WQE of `opcode` from `a`'s (`lkey`, `laddr`) to (`raddr`, `rkey`).
fn op(a: &Side, opcode: u32, laddr: u64, lkey: u32, len: u32, raddr: u64, rkey: u32) -> WcStatus {
    let mut sge = ibv_sge {
        addr: laddr,
        length: len,
        lkey,
    };
    let mut w = send_wr(1, opcode, std::slice::from_mut(&mut sge));
    if matches!(
        opcode,
        IBV_WR_ATOMIC_FETCH_AND_ADD | IBV_WR_ATOMIC_CMP_AND_SWP
    ) {
        w.wr.atomic = ibv_send_wr_atomic {
            remote_addr: raddr,
            compare_add: 1,
            swap: 0,
            rkey,
        };
    } else {
        w.wr.rdma = ibv_send_wr_rdma {
            remote_addr: raddr,
            rkey,
        };
    }
    post(a, &mut w);
    poll_n(&a.cq, 1)[0].status()
}

#[test]
fn an_unmapped_target_is_a_remote_access_error_until_it_is_mapped() {
    let v = verbs();
    let h = Hole::new();
    let (a, b) = pair(&v);
    let mr = reg(&b, h.base.cast(), 2 * PAGE, ODP_ALL);
    assert!(!mr.is_null());
    let (_, rkey) = keys(mr);
    let (la, lk) = (a.mr.addr(), a.mr.lkey());
    assert_eq!(
        op(&a, IBV_WR_RDMA_WRITE, la, lk, 16, h.base as u64, rkey),
        WcStatus::Success
    );
    assert_eq!(
        op(&a, IBV_WR_RDMA_WRITE, la, lk, 16, h.hole() - 8, rkey),
        WcStatus::RemAccessErr,
        "a write that reaches the hole"
    );
    let (a, b2) = pair(&v);
    let mr2 = reg(&b2, h.base.cast(), 2 * PAGE, ODP_ALL);
    let rkey2 = keys(mr2).1;
    assert_eq!(
        op(
            &a,
            IBV_WR_ATOMIC_FETCH_AND_ADD,
            la_of(&a),
            a.mr.lkey(),
            8,
            h.hole(),
            rkey2
        ),
        WcStatus::RemAccessErr
    );
    let (a, b3) = pair(&v);
    let mr3 = reg(&b3, h.base.cast(), 2 * PAGE, ODP_ALL);
    let rkey3 = keys(mr3).1;
    assert_eq!(
        op(
            &a,
            IBV_WR_RDMA_READ,
            la_of(&a),
            a.mr.lkey(),
            16,
            h.hole(),
            rkey3
        ),
        WcStatus::RemAccessErr
    );
    // Mapped again: the same region works there.
    h.fill_hole();
    let (a, b4) = pair(&v);
    let mr4 = reg(&b4, h.base.cast(), 2 * PAGE, ODP_ALL);
    let rkey4 = keys(mr4).1;
    assert_eq!(
        op(
            &a,
            IBV_WR_RDMA_WRITE,
            la_of(&a),
            a.mr.lkey(),
            16,
            h.hole(),
            rkey4
        ),
        WcStatus::Success
    );
    // SAFETY: the page is mapped again and the WRITE completed.
    let got = unsafe { std::slice::from_raw_parts(h.hole() as *const u8, 16) };
    assert_eq!(got, &bytes(&a)[..16]);
    for m in [mr, mr2, mr3, mr4] {
        dereg(m);
    }
}

fn la_of(s: &Side) -> u64 {
    s.mr.addr()
}

#[test]
fn an_unmapped_local_buffer_is_a_local_protection_error() {
    let v = verbs();
    let h = Hole::new();
    // A SEND from the hole.
    let (a, b) = pair(&v);
    let mr = reg(&a, h.base.cast(), 2 * PAGE, ODP_ALL);
    let (lkey, _) = keys(mr);
    let mut rs = b.mr.sge(0, 64).unwrap();
    let mut r = recv_wr(1, std::slice::from_mut(&mut rs));
    post_recv(&b, &mut r);
    assert_eq!(
        op(&a, IBV_WR_SEND, h.hole(), lkey, 16, 0, 0),
        WcStatus::LocProtErr
    );
    // A READ into the hole.
    let (a, b) = pair(&v);
    let mr2 = reg(&a, h.base.cast(), 2 * PAGE, ODP_ALL);
    assert_eq!(
        op(
            &a,
            IBV_WR_RDMA_READ,
            h.hole(),
            keys(mr2).0,
            16,
            b.mr.addr(),
            b.mr.rkey()
        ),
        WcStatus::LocProtErr
    );
    // A receive into the hole: the receive fails, the sender sees the remote error.
    let (a, b) = pair(&v);
    let mr3 = reg(&b, h.base.cast(), 2 * PAGE, ODP_ALL);
    let mut rs = ibv_sge {
        addr: h.hole(),
        length: 64,
        lkey: keys(mr3).0,
    };
    let mut r = recv_wr(2, std::slice::from_mut(&mut rs));
    post_recv(&b, &mut r);
    assert_eq!(
        op(&a, IBV_WR_SEND, a.mr.addr(), a.mr.lkey(), 16, 0, 0),
        WcStatus::RemOpErr
    );
    assert_eq!(poll_n(&b.cq, 1)[0].status(), WcStatus::LocProtErr);
    for m in [mr, mr2, mr3] {
        dereg(m);
    }
}

#[test]
fn implicit_odp_covers_the_address_space() {
    let v = verbs();
    let (a, b) = pair(&v);
    let ia = reg(&a, null_mut(), usize::MAX, ODP_ALL);
    let ib = reg(&b, null_mut(), usize::MAX, ODP_ALL);
    assert!(!ia.is_null() && !ib.is_null());
    // SAFETY: a live region.
    let (addr, len) = unsafe { ((*ia).addr, (*ia).length) };
    assert_eq!((addr, len), (null_mut(), usize::MAX));
    // Plain heap buffers, registered by nothing else.
    let src: Vec<u8> = (0..64u8).collect();
    let mut dst = vec![0u8; 64];
    assert_eq!(
        op(
            &a,
            IBV_WR_RDMA_WRITE,
            src.as_ptr() as u64,
            keys(ia).0,
            64,
            dst.as_mut_ptr() as u64,
            keys(ib).1
        ),
        WcStatus::Success
    );
    // Read after the WRITE's completion (its address escaped into the post).
    assert_eq!(std::hint::black_box(&dst), &src);
    // Page 0 is never mapped: a remote access error, not a crash.
    assert_eq!(
        op(
            &a,
            IBV_WR_RDMA_WRITE,
            src.as_ptr() as u64,
            keys(ia).0,
            8,
            64,
            keys(ib).1
        ),
        WcStatus::RemAccessErr
    );
    // NULL and SIZE_MAX without IBV_ACCESS_ON_DEMAND: EINVAL.
    let plain = reg(&a, null_mut(), usize::MAX, IBV_ACCESS_LOCAL_WRITE);
    assert!(plain.is_null());
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EINVAL)
    );
    dereg(ia);
    dereg(ib);
}

/// Three pages: read-write, read-only, no access.
struct Protected {
    base: *mut u8,
}

impl Protected {
    fn new() -> Protected {
        // SAFETY: a fresh anonymous mapping, protected page by page.
        let base = unsafe {
            let p = libc::mmap(
                null_mut(),
                3 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let b = p.cast::<u8>();
            assert_eq!(libc::mprotect(b.add(PAGE).cast(), PAGE, libc::PROT_READ), 0);
            assert_eq!(
                libc::mprotect(b.add(2 * PAGE).cast(), PAGE, libc::PROT_NONE),
                0
            );
            b
        };
        Protected { base }
    }

    fn page(&self, i: usize) -> u64 {
        self.base as u64 + (i * PAGE) as u64
    }
}

impl Drop for Protected {
    fn drop(&mut self) {
        // SAFETY: the mapping this struct made.
        unsafe { libc::munmap(self.base.cast(), 3 * PAGE) };
    }
}

#[test]
fn a_page_without_the_access_fails_the_request_not_the_process() {
    let v = verbs();
    let m = Protected::new();
    let with_target = |f: &dyn Fn(&Side, u32)| {
        let (a, b) = pair(&v);
        let mr = reg(&b, m.base.cast(), 3 * PAGE, ODP_ALL);
        f(&a, keys(mr).1);
        dereg(mr);
    };
    let la = |a: &Side| (a.mr.addr(), a.mr.lkey());
    // At the responder: writing a read-only page, reading a page without access, an
    // atomic on a read-only page; reading a read-only page works.
    with_target(&|a, rkey| {
        let (l, k) = la(a);
        assert_eq!(
            op(a, IBV_WR_RDMA_READ, l, k, 16, m.page(1), rkey),
            WcStatus::Success
        );
        assert_eq!(
            op(a, IBV_WR_RDMA_WRITE, l, k, 16, m.page(1), rkey),
            WcStatus::RemAccessErr
        );
    });
    with_target(&|a, rkey| {
        let (l, k) = la(a);
        assert_eq!(
            op(a, IBV_WR_RDMA_READ, l, k, 16, m.page(2), rkey),
            WcStatus::RemAccessErr
        );
    });
    with_target(&|a, rkey| {
        let (l, k) = la(a);
        assert_eq!(
            op(a, IBV_WR_ATOMIC_FETCH_AND_ADD, l, k, 8, m.page(1), rkey),
            WcStatus::RemAccessErr
        );
    });
    with_target(&|a, rkey| {
        let (l, k) = la(a);
        assert_eq!(
            op(a, IBV_WR_ATOMIC_FETCH_AND_ADD, l, k, 8, m.page(0), rkey),
            WcStatus::Success
        );
    });
    // At the requester: sending from a page without access, reading into a read-only
    // page.
    let (a, b) = pair(&v);
    let mr = reg(&a, m.base.cast(), 3 * PAGE, ODP_ALL);
    let mut rs = b.mr.sge(0, 64).unwrap();
    let mut r = recv_wr(1, std::slice::from_mut(&mut rs));
    post_recv(&b, &mut r);
    assert_eq!(
        op(&a, IBV_WR_SEND, m.page(2), keys(mr).0, 16, 0, 0),
        WcStatus::LocProtErr
    );
    dereg(mr);
    let (a, b) = pair(&v);
    let mr = reg(&a, m.base.cast(), 3 * PAGE, ODP_ALL);
    assert_eq!(
        op(
            &a,
            IBV_WR_RDMA_READ,
            m.page(1),
            keys(mr).0,
            16,
            b.mr.addr(),
            b.mr.rkey()
        ),
        WcStatus::LocProtErr
    );
    dereg(mr);
}
