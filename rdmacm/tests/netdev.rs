//! Addressing per bound interface: in a network namespace made for the test, two
//! interfaces (a veth pair, 192.0.2.1 and 192.0.2.2) bound to soft0 and soft1
//! (`VQP_SOFT_NETDEV`). An id bound to an interface's address is on that interface's
//! device, with the address's RoCE GID as its `sgid` (`::ffff:a.b.c.d`); loopback stays
//! on soft0 by its GID 0. A connection from 192.0.2.1 to 192.0.2.2 has its active side
//! on soft0 and its passive side on soft1, each QP's address vector from its own
//! address's GID to the other's, and a SEND crosses it with its bytes intact.
//!
//! The checks run in a child process (this test binary, one `#[ignore]`d test, started
//! with `ip netns exec` and `VQP_RDMACM_NETDEV_CHILD` set), so that softverbs reads the
//! namespace's interfaces. Needs root and iproute2 (softverbs' `netns` helpers); the
//! namespace is deleted even when the test fails.

mod common;
#[path = "../../softverbs/tests/netns/mod.rs"]
mod netns;

use core::ptr;
use std::ffi::CStr;
use std::time::{Duration, Instant};

use vqp_rdmacm::abi::{event, rdma_cm_id};
use vqp_rdmacm::capi::*;
use vqp_sys::*;

use common::*;
use netns::Netns;

/// Set in the child: the checks it runs.
const CHILD: &str = "VQP_RDMACM_NETDEV_CHILD";

#[test]
fn each_address_resolves_to_the_device_bound_to_its_interface() {
    let test = "each_address_resolves_to_the_device_bound_to_its_interface";
    if !netns::available(test) {
        return;
    }
    let ns = Netns::new("cmnd", 1);
    ns.veth((0, "vr0", "192.0.2.1/24"), (0, "vr1", "192.0.2.2/24"), 1500);
    let exe = std::env::current_exe().unwrap();
    let mut c = ns.exec(0, &exe);
    c.args([
        "child_addressing",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, "1")
    .env("VQP_SOFT_NETDEV", "soft0=vr0,soft1=vr1");
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("VQP_SOFT_") && k != "VQP_SOFT_NETDEV" {
            c.env_remove(k.as_ref());
        }
    }
    let out = c.output().unwrap();
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && o.contains("1 passed"),
        "child: {}\n--- stdout\n{o}\n--- stderr\n{e}",
        out.status
    );
}

fn v4(a: [u8; 4]) -> [u8; 16] {
    std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets()
}

/// The name of the device an id is on.
fn device_name(id: *mut rdma_cm_id) -> String {
    // SAFETY: an id of the test's; its context (and the device) live while it does.
    let ctx = unsafe { (*id).verbs };
    assert!(!ctx.is_null(), "the id has no device");
    // SAFETY: as above; the name is NUL-terminated.
    unsafe { CStr::from_ptr((*(*ctx).device).name.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn sgid(id: *mut rdma_cm_id) -> [u8; 16] {
    // SAFETY: an id of the test's; the union's raw view.
    unsafe { (*id).route.addr.ibaddr.sgid.raw }
}

fn dgid(id: *mut rdma_cm_id) -> [u8; 16] {
    // SAFETY: as above.
    unsafe { (*id).route.addr.ibaddr.dgid.raw }
}

/// An id bound to `addr`: its device's name and its `sgid`.
fn bound(addr: &str) -> (String, [u8; 16]) {
    let ch = channel();
    let id = create_id(ch);
    let mut a = c_addr(addr);
    // SAFETY: a fresh id and a valid address.
    assert_eq!(
        unsafe { rdma_bind_addr(id, sa(&mut a)) },
        0,
        "{addr}: errno {}",
        errno()
    );
    let r = (device_name(id), sgid(id));
    destroy(id);
    close(ch);
    r
}

/// GID `index` of port 1 of the device `id` is on.
fn gid_at(id: *mut rdma_cm_id, index: i32) -> [u8; 16] {
    let t = vqp_rdmacm::verbs::table().unwrap();
    let mut g = ibv_gid { raw: [0; 16] };
    // SAFETY: the id's open context; a writable GID.
    assert_eq!(unsafe { (t.query_gid)((*id).verbs, 1, index, &mut g) }, 0);
    // SAFETY: the union's raw view.
    unsafe { g.raw }
}

/// The QP's address vector (destination GID, source GID index).
fn av_of(qp: *mut ibv_qp) -> ([u8; 16], u8) {
    let t = vqp_rdmacm::verbs::table().unwrap();
    let mut a = ibv_qp_attr::default();
    let mut i = ibv_qp_init_attr::default();
    // SAFETY: a live QP and writable structs.
    assert_eq!(
        unsafe { (t.query_qp)(qp, &mut a, IBV_QP_AV as i32, &mut i) },
        0
    );
    assert_eq!(a.ah_attr.is_global, 1, "a RoCE address vector has a GRH");
    // SAFETY: the union's raw view.
    (unsafe { a.ah_attr.grh.dgid.raw }, a.ah_attr.grh.sgid_index)
}

/// Registers `buf` on the id's PD.
fn reg(id: *mut rdma_cm_id, buf: &mut [u8]) -> *mut ibv_mr {
    let t = vqp_rdmacm::verbs::table().unwrap();
    // SAFETY: the id's PD (its QP's); `buf` outlives the registration.
    let mr = unsafe {
        (t.reg_mr)(
            (*id).pd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            IBV_ACCESS_LOCAL_WRITE as i32,
        )
    };
    assert!(!mr.is_null(), "ibv_reg_mr: errno {}", errno());
    mr
}

/// One completion from `cq`, within 5 s.
fn completion(cq: *mut ibv_cq) -> ibv_wc {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let mut wc = ibv_wc::default();
        // SAFETY: a live CQ; the context's data-path op, as verbs.h calls it.
        let n = unsafe { (*(*cq).context).ops.poll_cq.unwrap()(cq, 1, &mut wc) };
        assert!(n >= 0, "poll_cq failed");
        if n == 1 {
            return wc;
        }
        assert!(Instant::now() < end, "no completion within 5 s");
        std::thread::yield_now();
    }
}

#[test]
#[ignore = "run in a network namespace by each_address_resolves_to_the_device_bound_to_its_interface"]
fn child_addressing() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    // Each interface's address is its device's, by that address's RoCE GID.
    assert_eq!(
        bound("192.0.2.2:0"),
        ("soft1".to_string(), v4([192, 0, 2, 2]))
    );
    assert_eq!(
        bound("192.0.2.1:0"),
        ("soft0".to_string(), v4([192, 0, 2, 1]))
    );
    // Loopback is soft0's, by its GID 0 (the default GID of its RoCE port).
    let (name, gid) = bound("127.0.0.1:0");
    assert_eq!(name, "soft0");
    assert_eq!(gid[..8], [0xfe, 0x80, 0, 0, 0, 0, 0, 0], "{gid:x?}");

    // A connection from soft0's address to soft1's.
    let port = port();
    let lch = channel();
    let lid = create_id(lch);
    let mut la = c_addr(&format!("192.0.2.2:{port}"));
    // SAFETY: a fresh id and a valid address.
    assert_eq!(unsafe { rdma_bind_addr(lid, sa(&mut la)) }, 0);
    // SAFETY: the bound id.
    assert_eq!(unsafe { rdma_listen(lid, 4) }, 0);
    assert_eq!(device_name(lid), "soft1");

    let ch = channel();
    let id = create_id(ch);
    let mut src = c_addr("192.0.2.1:0");
    let mut dst = c_addr(&format!("192.0.2.2:{port}"));
    // SAFETY: a fresh id and valid addresses.
    assert_eq!(
        unsafe { rdma_resolve_addr(id, sa(&mut src), sa(&mut dst), 2000) },
        0
    );
    expect(ch, event::ADDR_RESOLVED);
    assert_eq!(device_name(id), "soft0");
    assert_eq!(sgid(id), v4([192, 0, 2, 1]));
    assert_eq!(dgid(id), v4([192, 0, 2, 2]));
    // SAFETY: the id, its address resolved.
    assert_eq!(unsafe { rdma_resolve_route(id, 2000) }, 0);
    expect(ch, event::ROUTE_RESOLVED);
    // SAFETY: the route's path record, set by the resolution.
    let path = unsafe { *(*id).route.path_rec };
    assert_eq!(
        (path.sgid, path.dgid),
        (v4([192, 0, 2, 1]), v4([192, 0, 2, 2]))
    );
    qp(id);
    let p = param(b"");
    // SAFETY: a routed id with a QP; valid parameters.
    assert_eq!(unsafe { rdma_connect(id, &p as *const _ as *mut _) }, 0);
    let req = expect(lch, event::CONNECT_REQUEST);
    let child = req.id;
    assert_eq!(device_name(child), "soft1");
    assert_eq!(sgid(child), v4([192, 0, 2, 2]));
    qp(child);
    let mut inbox = [0u8; 64];
    let rmr = reg(child, &mut inbox);
    let mut rsge = ibv_sge {
        addr: inbox.as_mut_ptr() as u64,
        length: 64,
        // SAFETY: the MR just registered.
        lkey: unsafe { (*rmr).lkey },
    };
    let mut rwr = ibv_recv_wr {
        wr_id: 7,
        next: ptr::null_mut(),
        sg_list: &mut rsge,
        num_sge: 1,
    };
    let mut bad = ptr::null_mut();
    // SAFETY: the child's QP; the context's data-path op.
    let rc = unsafe {
        (*(*(*child).qp).context).ops.post_recv.unwrap()((*child).qp, &mut rwr, &mut bad)
    };
    assert_eq!(rc, 0);
    // SAFETY: the new id with its QP; valid parameters.
    assert_eq!(unsafe { rdma_accept(child, &p as *const _ as *mut _) }, 0);
    expect(ch, event::ESTABLISHED);
    expect(lch, event::ESTABLISHED);
    // Each QP sends from its own address's GID to the other's.
    // SAFETY: both ids have QPs.
    let (cq_av, sq_av) = unsafe { (av_of((*id).qp), av_of((*child).qp)) };
    assert_eq!(cq_av.0, v4([192, 0, 2, 2]));
    assert_eq!(gid_at(id, i32::from(cq_av.1)), v4([192, 0, 2, 1]));
    assert_eq!(sq_av.0, v4([192, 0, 2, 1]));
    assert_eq!(gid_at(child, i32::from(sq_av.1)), v4([192, 0, 2, 2]));

    // A SEND crosses from soft0 to soft1.
    let mut msg = *b"over the veth, soft0 to soft1";
    let smr = reg(id, &mut msg);
    let mut ssge = ibv_sge {
        addr: msg.as_mut_ptr() as u64,
        length: msg.len() as u32,
        // SAFETY: the MR just registered.
        lkey: unsafe { (*smr).lkey },
    };
    let mut swr = ibv_send_wr {
        wr_id: 9,
        sg_list: &mut ssge,
        num_sge: 1,
        opcode: IBV_WR_SEND,
        send_flags: IBV_SEND_SIGNALED,
        ..Default::default()
    };
    let mut sbad = ptr::null_mut();
    // SAFETY: the connected QP; the context's data-path op.
    let rc =
        unsafe { (*(*(*id).qp).context).ops.post_send.unwrap()((*id).qp, &mut swr, &mut sbad) };
    assert_eq!(rc, 0);
    // SAFETY: the CQs the library made for the ids.
    let (sent, got) = unsafe { (completion((*id).send_cq), completion((*child).recv_cq)) };
    assert_eq!((sent.status, sent.wr_id), (IBV_WC_SUCCESS, 9));
    assert_eq!((got.status, got.wr_id), (IBV_WC_SUCCESS, 7));
    assert_eq!(&inbox[..msg.len()], &msg[..]);

    // Without a source, the destination's own address (and device) is the source.
    let ch2 = channel();
    let id2 = create_id(ch2);
    // SAFETY: a fresh id and a valid address.
    assert_eq!(
        unsafe { rdma_resolve_addr(id2, ptr::null_mut(), sa(&mut dst), 2000) },
        0
    );
    expect(ch2, event::ADDR_RESOLVED);
    assert_eq!(device_name(id2), "soft1");
    assert_eq!(sgid(id2), v4([192, 0, 2, 2]));
    destroy(id2);
    close(ch2);

    let t = vqp_rdmacm::verbs::table().unwrap();
    // SAFETY: the test's objects, not used again.
    unsafe {
        assert_eq!(rdma_disconnect(id), 0);
        (t.dereg_mr)(smr);
        (t.dereg_mr)(rmr);
        rdma_destroy_qp(id);
        rdma_destroy_qp(child);
    }
    destroy(child);
    destroy(id);
    destroy(lid);
    close(ch);
    close(lch);
}
