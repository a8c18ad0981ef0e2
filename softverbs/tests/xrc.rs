//! XRC (eXtended Reliable Connected): XRC domains shared through a file, XRC SRQs with
//! their own CQs and numbers, XRC send QPs whose requests name the remote SRQ, XRC
//! receive QPs that serve them from the SRQ of their domain, `ibv_open_qp`, and the
//! same between two processes (the test binary re-run as a child: `xproc_support`).
//! Debian's `ibv_xsrq_pingpong` runs in `debian_programs.rs`.

mod common;
mod xproc_support;
mod xrc_support;
mod xverbs_support;

use std::ptr::null_mut;

use common::verbs;
use vqp_host::sys::*;
use vqp_softverbs as sv;
use xproc_support::child::{out, serve};
use xproc_support::{isolate, Peer, ENV_CHILD};
use xrc_support::*;

/// Two SRQs of one domain, each with its own CQ, behind one XRC receive QP: each
/// request lands in the SRQ it names and completes on that SRQ's CQ, reporting the
/// receive QP and the sender; the sender completes on its send CQ.
#[test]
fn each_request_takes_a_receive_of_the_srq_it_names() {
    isolate();
    let v = verbs();
    let a = Node::new(&v, "soft0");
    let b = Node::new(&v, "soft1");
    let x = open_xrcd(b.c(), -1, 0).unwrap();
    let cq2 = new_cq(&b.ctx);
    let s1 = xrc_srq(&b, x, b.cq).unwrap();
    let s2 = xrc_srq(&b, x, cq2).unwrap();
    let (n1, n2) = (srq_num(s1).unwrap(), srq_num(s2).unwrap());
    assert_ne!(n1, n2);
    let r = recv_qp(b.c(), x).unwrap();
    let s = send_qp(&a, 0).unwrap();
    connect_recv(r, a.lid(), qpn(s));
    connect_send(s, b.lid(), qpn(r));
    post_srq_recv(s1, b.sge(0, 64), 11);
    post_srq_recv(s2, b.sge(64, 64), 22);
    a.buf()[..5].copy_from_slice(b"first");
    a.buf()[8..14].copy_from_slice(b"second");
    assert_eq!(post_xrc(s, n2, IBV_WR_SEND, a.sge(8, 6), 2), 0);
    assert_eq!(post_xrc(s, n1, IBV_WR_SEND, a.sge(0, 5), 1), 0);
    let sent = poll(a.cq, 2, 5000);
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|w| w.status == IBV_WC_SUCCESS));
    let w2 = poll(cq2, 1, 5000);
    let w1 = poll(b.cq, 1, 5000);
    assert_eq!((w1.len(), w2.len()), (1, 1));
    for (w, id, len) in [(&w1[0], 11, 5), (&w2[0], 22, 6)] {
        assert_eq!((w.status, w.opcode), (IBV_WC_SUCCESS, IBV_WC_RECV));
        assert_eq!((w.wr_id, w.byte_len), (id, len));
        assert_eq!(w.qp_num, qpn(r), "the XRC receive QP");
        assert_eq!(w.src_qp, qpn(s), "the XRC send QP");
    }
    assert_eq!(&b.buf()[..5], b"first");
    assert_eq!(&b.buf()[64..70], b"second");
    assert!(poll(b.cq, 1, 50).is_empty() && poll(cq2, 1, 50).is_empty());
    // SAFETY: live objects; the CQ and the domain are refused while an SRQ uses them.
    unsafe {
        assert_eq!(sv::ibv_destroy_cq(cq2), libc::EBUSY);
        assert_eq!(close_xrcd(x), libc::EBUSY);
        assert_eq!(sv::ibv_destroy_qp(s), 0);
        assert_eq!(sv::ibv_destroy_qp(r), 0);
        assert_eq!(sv::ibv_destroy_srq(s1), 0);
        assert_eq!(sv::ibv_destroy_srq(s2), 0);
        assert_eq!(sv::ibv_destroy_cq(cq2), 0);
    }
    assert_eq!(close_xrcd(x), 0);
}

/// RDMA WRITE with immediate through XRC: the SRQ's PD checks the rkey, the immediate
/// consumes one of its receives.
#[test]
fn a_write_with_immediate_uses_the_named_srq() {
    isolate();
    let v = verbs();
    let a = Node::new(&v, "soft0");
    let b = Node::new(&v, "soft1");
    let x = open_xrcd(b.c(), -1, 0).unwrap();
    let srq = xrc_srq(&b, x, b.cq).unwrap();
    let r = recv_qp(b.c(), x).unwrap();
    let s = send_qp(&a, 0).unwrap();
    connect_recv(r, a.lid(), qpn(s));
    connect_send(s, b.lid(), qpn(r));
    post_srq_recv(srq, b.sge(0, 8), 5);
    a.buf()[..4].copy_from_slice(b"wimm");
    let mut sge = a.sge(0, 4);
    // SAFETY: plain data.
    let mut wr: ibv_send_wr = unsafe { core::mem::zeroed() };
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm.imm_data = 0x0102_0304u32.to_be();
    wr.wr.rdma.remote_addr = b.mr.addr() + 1000;
    wr.wr.rdma.rkey = b.mr.rkey();
    wr.qp_type.xrc.remote_srqn = srq_num(srq).unwrap();
    assert_eq!(post_wr(s, &mut wr), 0);
    assert_eq!(poll(a.cq, 1, 5000)[0].status, IBV_WC_SUCCESS);
    let w = poll(b.cq, 1, 5000);
    assert_eq!(w[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    assert_eq!(w[0].wr_id, 5);
    assert_eq!(&b.buf()[1000..1004], b"wimm");
}

/// An SRQ of another domain is an invalid request: the sender completes with
/// `IBV_WC_REM_INV_REQ_ERR`, the receive QP goes to error, the SRQ keeps its receive.
/// A number that names no SRQ is the same.
#[test]
fn an_srq_of_another_domain_is_an_invalid_request() {
    isolate();
    let v = verbs();
    let a = Node::new(&v, "soft0");
    let b = Node::new(&v, "soft1");
    let x1 = open_xrcd(b.c(), -1, 0).unwrap();
    let x2 = open_xrcd(b.c(), -1, 0).unwrap();
    let other = xrc_srq(&b, x2, b.cq).unwrap();
    post_srq_recv(other, b.sge(0, 64), 9);
    for srqn in [srq_num(other).unwrap(), 0x00ff_fff0] {
        let r = recv_qp(b.c(), x1).unwrap();
        let s = send_qp(&a, 0).unwrap();
        connect_recv(r, a.lid(), qpn(s));
        connect_send(s, b.lid(), qpn(r));
        assert_eq!(post_xrc(s, srqn, IBV_WR_SEND, a.sge(0, 8), 1), 0);
        let w = poll(a.cq, 1, 5000);
        assert_eq!(w[0].status, IBV_WC_REM_INV_REQ_ERR, "srqn {srqn:#x}");
        assert_eq!(state(r), IBV_QPS_ERR);
    }
    assert!(poll(b.cq, 1, 100).is_empty(), "the SRQ's receive stays");
    // Closing a domain an SRQ uses is refused until the SRQ is gone.
    assert_eq!(close_xrcd(x2), libc::EBUSY);
    // SAFETY: a live SRQ nothing uses.
    assert_eq!(unsafe { sv::ibv_destroy_srq(other) }, 0);
    assert_eq!(close_xrcd(x2), 0);
}

/// `ibv_open_xrcd` with a file: the kernel's `O_CREAT`/`O_EXCL` rules, the same domain
/// through two handles (a receive QP of one serves an SRQ of the other), `EBUSY` while
/// used, and the domain gone once every handle is closed.
#[test]
fn a_file_names_one_domain_with_o_creat_semantics() {
    let ns = isolate();
    let v = verbs();
    let a = Node::new(&v, "soft0");
    let b = Node::new(&v, "soft1");
    let f = DomainFile::new("creat");
    assert_eq!(open_xrcd(b.c(), f.fd(), 0).err(), Some(libc::EAGAIN));
    let x1 = open_xrcd(b.c(), f.fd(), libc::O_CREAT).unwrap();
    assert_eq!(
        open_xrcd(b.c(), f.fd(), libc::O_CREAT | libc::O_EXCL).err(),
        Some(libc::EINVAL)
    );
    // Another descriptor of the same file names the same domain, without O_CREAT.
    let again = std::fs::File::open(&f.path).unwrap();
    let x2 = {
        use std::os::fd::AsRawFd;
        open_xrcd(b.c(), again.as_raw_fd(), 0).unwrap()
    };
    // On the other device the file names another domain, which nobody has.
    assert_eq!(open_xrcd(a.c(), f.fd(), 0).err(), Some(libc::EAGAIN));
    assert_eq!(open_xrcd(b.c(), 999_999, 0).err(), Some(libc::EBADF));
    let mut no_oflags = ibv_xrcd_init_attr {
        comp_mask: IBV_XRCD_INIT_ATTR_FD,
        fd: -1,
        oflags: 0,
    };
    assert_eq!(
        open_xrcd_with(b.c(), &mut no_oflags).err(),
        Some(libc::EINVAL)
    );
    no_oflags.comp_mask = IBV_XRCD_INIT_ATTR_RESERVED;
    assert_eq!(
        open_xrcd_with(b.c(), &mut no_oflags).err(),
        Some(libc::EOPNOTSUPP)
    );
    let srq = xrc_srq(&b, x2, b.cq).unwrap();
    let r = recv_qp(b.c(), x1).unwrap();
    let s = send_qp(&a, 0).unwrap();
    connect_recv(r, a.lid(), qpn(s));
    connect_send(s, b.lid(), qpn(r));
    post_srq_recv(srq, b.sge(0, 64), 3);
    assert_eq!(
        post_xrc(s, srq_num(srq).unwrap(), IBV_WR_SEND, a.sge(0, 16), 1),
        0
    );
    assert_eq!(poll(a.cq, 1, 5000)[0].status, IBV_WC_SUCCESS);
    assert_eq!(poll(b.cq, 1, 5000)[0].wr_id, 3);
    assert_eq!(close_xrcd(x1), libc::EBUSY, "its receive QP");
    assert_eq!(close_xrcd(x2), libc::EBUSY, "its SRQ");
    // SAFETY: live objects nothing else uses.
    unsafe {
        assert_eq!(sv::ibv_destroy_qp(s), 0);
        assert_eq!(sv::ibv_destroy_qp(r), 0);
        assert_eq!(sv::ibv_destroy_srq(srq), 0);
    }
    assert_eq!(close_xrcd(x1), 0);
    // x2 still holds it: opening without O_CREAT works; once it is closed, it does not.
    let x3 = open_xrcd(b.c(), f.fd(), 0).expect("x2 still holds the domain");
    assert_eq!(close_xrcd(x3), 0);
    let ino = {
        use std::os::unix::fs::MetadataExt;
        f.file.metadata().unwrap().ino()
    };
    let domain_files = || {
        std::fs::read_dir(&ns)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("xrcd-1-") && n.ends_with(&format!("-{ino:x}")))
            .count()
    };
    assert_eq!(domain_files(), 1, "the domain's file while x2 holds it");
    assert_eq!(close_xrcd(x2), 0);
    assert_eq!(domain_files(), 0, "the last holder removes it");
    assert_eq!(open_xrcd(b.c(), f.fd(), 0).err(), Some(libc::EAGAIN));
    assert_eq!(domain_files(), 0, "a refused open leaves none");
}

/// The state machine of each XRC type (the kernel's `qp_state_table`), the queues they
/// do not have, and what `ibv_get_srq_num` and `ibv_query_device` say.
#[test]
fn each_xrc_type_has_its_attributes_and_only_its_queues() {
    isolate();
    let v = verbs();
    let a = Node::new(&v, "soft0");
    let x = open_xrcd(a.c(), -1, 0).unwrap();
    let r = recv_qp(a.c(), x).unwrap();
    let s = send_qp(&a, 0).unwrap();
    let init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    let rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    let mut at = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        port_num: 1,
        path_mtu: IBV_MTU_1024,
        dest_qp_num: 5,
        min_rnr_timer: 12,
        ..Default::default()
    };
    at.ah_attr.dlid = 1;
    at.ah_attr.port_num = 1;
    for q in [r, s] {
        at.qp_state = IBV_QPS_INIT;
        assert_eq!(
            modify(q, &mut at, init & !IBV_QP_ACCESS_FLAGS),
            libc::EINVAL
        );
        assert_eq!(modify(q, &mut at, init), 0);
        at.qp_state = IBV_QPS_RTR;
    }
    // The receive half needs the responder's attributes; the send half has none, and
    // ignores them when given (as the kernel's `modify_qp_mask` drops them: perftest
    // passes RC's mask for both halves).
    assert_eq!(modify(r, &mut at, rtr), libc::EINVAL);
    let responder = IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    assert_eq!(modify(r, &mut at, rtr | responder), 0);
    assert_eq!(modify(s, &mut at, rtr | responder), 0);
    at.qp_state = IBV_QPS_RTS;
    at.timeout = 14;
    at.retry_cnt = 7;
    let tgt_rts = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
    let ini_rts = tgt_rts | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    assert_eq!(modify(s, &mut at, tgt_rts), libc::EINVAL);
    assert_eq!(modify(s, &mut at, ini_rts), 0);
    // The receive half needs only the timeout and send PSN, and ignores the retries.
    assert_eq!(modify(r, &mut at, ini_rts), 0);
    let (mut ra, mut sa) = (ibv_qp_attr::default(), ibv_qp_attr::default());
    let mut init_attr = ibv_qp_init_attr::default();
    // SAFETY: live QPs, writable structs.
    unsafe {
        sv::ibv_query_qp(r, &mut ra, 0, &mut init_attr);
        sv::ibv_query_qp(s, &mut sa, 0, &mut init_attr);
    }
    assert_eq!(
        (ra.qp_state, ra.timeout, ra.retry_cnt),
        (IBV_QPS_RTS, 14, 0)
    );
    assert_eq!(
        (sa.qp_state, sa.min_rnr_timer, sa.retry_cnt),
        (IBV_QPS_RTS, 0, 7)
    );
    assert_eq!(ra.min_rnr_timer, 12);
    // No receive queue on either, no send queue on the receive half.
    let mut sge = a.sge(0, 8);
    let mut rwr = ibv_recv_wr {
        wr_id: 1,
        next: null_mut(),
        sg_list: &mut sge,
        num_sge: 1,
    };
    let mut bad = null_mut();
    for q in [r, s] {
        // SAFETY: a live QP; the data-path op.
        let rc = unsafe { (*a.c()).ops.post_recv.unwrap()(q, &mut rwr, &mut bad) };
        assert_eq!(rc, libc::ENOMEM);
    }
    assert_eq!(post_xrc(r, 1, IBV_WR_SEND, a.sge(0, 8), 1), libc::EINVAL);
    // A basic SRQ has no number; the device says it has XRC.
    let mut basic = ibv_srq_init_attr_ex {
        attr: ibv_srq_attr {
            max_wr: 4,
            max_sge: 1,
            srq_limit: 0,
        },
        comp_mask: IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE,
        srq_type: IBV_SRQT_BASIC,
        pd: a.pd.as_raw(),
        ..Default::default()
    };
    let bs = create_srq_ex(a.c(), &mut basic).unwrap();
    assert_eq!(srq_num(bs).err(), Some(libc::EINVAL));
    // An XRC SRQ without its CQ, or a tag-matching one, is refused.
    let mut no_cq = ibv_srq_init_attr_ex {
        comp_mask: IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD,
        srq_type: IBV_SRQT_XRC,
        xrcd: x,
        ..basic
    };
    assert_eq!(create_srq_ex(a.c(), &mut no_cq).err(), Some(libc::EINVAL));
    no_cq.srq_type = IBV_SRQT_TM;
    assert_eq!(
        create_srq_ex(a.c(), &mut no_cq).err(),
        Some(libc::EOPNOTSUPP)
    );
    let caps = a.ctx.query_device().unwrap().raw().device_cap_flags;
    assert_ne!(caps & IBV_DEVICE_XRC, 0);
    // SAFETY: live objects nothing else uses.
    unsafe {
        assert_eq!(sv::ibv_destroy_srq(bs), 0);
        assert_eq!(sv::ibv_destroy_qp(s), 0);
        assert_eq!(sv::ibv_destroy_qp(r), 0);
    }
    assert_eq!(close_xrcd(x), 0);
}

/// `ibv_wr_set_xrc_srqn` on an extended XRC send QP names the SRQ of an `ibv_wr_*`
/// request; on another QP type it fails the batch.
#[test]
fn the_wr_api_names_the_srq_with_set_xrc_srqn() {
    isolate();
    let v = verbs();
    let a = Node::new(&v, "soft0");
    let b = Node::new(&v, "soft1");
    let x = open_xrcd(b.c(), -1, 0).unwrap();
    let srq = xrc_srq(&b, x, b.cq).unwrap();
    let r = recv_qp(b.c(), x).unwrap();
    let s = send_qp(&a, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE).unwrap();
    connect_recv(r, a.lid(), qpn(s));
    connect_send(s, b.lid(), qpn(r));
    post_srq_recv(srq, b.sge(0, 64), 77);
    a.buf()[..3].copy_from_slice(b"wrx");
    // SAFETY: a live extended QP.
    let qx = unsafe { sv::ibv_qp_to_qp_ex(s) }.cast::<ibv_qp_ex>();
    assert!(!qx.is_null());
    // SAFETY: the functions of a live extended QP, called as verbs.h's inlines do.
    unsafe {
        let q = &mut *qx;
        q.wr_start.unwrap()(qx);
        q.wr_id = 4;
        q.wr_flags = IBV_SEND_SIGNALED;
        q.wr_send.unwrap()(qx);
        q.wr_set_xrc_srqn.unwrap()(qx, srq_num(srq).unwrap());
        let sge = a.sge(0, 3);
        q.wr_set_sge.unwrap()(qx, sge.lkey, sge.addr, sge.length);
        assert_eq!(q.wr_complete.unwrap()(qx), 0);
    }
    assert_eq!(poll(a.cq, 1, 5000)[0].status, IBV_WC_SUCCESS);
    let w = poll(b.cq, 1, 5000);
    assert_eq!((w[0].wr_id, w[0].byte_len), (77, 3));
    assert_eq!(&b.buf()[..3], b"wrx");
    // On an RC QP there is no SRQ to name.
    let mut rc = ibv_qp_init_attr_ex {
        qp_type: IBV_QPT_RC,
        send_cq: a.cq,
        recv_cq: a.cq,
        cap: ibv_qp_cap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        comp_mask: IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        pd: a.pd.as_raw(),
        send_ops_flags: IBV_QP_EX_WITH_SEND,
        ..Default::default()
    };
    let rcq = create_qp_ex(a.c(), &mut rc).unwrap();
    // SAFETY: as above.
    unsafe {
        let rx = sv::ibv_qp_to_qp_ex(rcq).cast::<ibv_qp_ex>();
        let q = &mut *rx;
        q.wr_start.unwrap()(rx);
        q.wr_send.unwrap()(rx);
        q.wr_set_xrc_srqn.unwrap()(rx, 1);
        assert_eq!(q.wr_complete.unwrap()(rx), libc::EINVAL);
        assert_eq!(sv::ibv_destroy_qp(rcq), 0);
    }
}

/// `ibv_open_qp`: another context of the device opens the receive QP through its own
/// handle on the domain and moves it to RTS. A wrong type, domain or number is
/// `EINVAL`.
#[test]
fn open_qp_shares_a_receive_qp_within_the_domain() {
    isolate();
    let v = verbs();
    let a = Node::new(&v, "soft0");
    let b = Node::new(&v, "soft1");
    let b2 = Node::new(&v, "soft1");
    let f = DomainFile::new("openqp");
    let x = open_xrcd(b.c(), f.fd(), libc::O_CREAT).unwrap();
    let x2 = open_xrcd(b2.c(), f.fd(), 0).unwrap();
    let private = open_xrcd(b2.c(), -1, 0).unwrap();
    let r = recv_qp(b.c(), x).unwrap();
    assert_eq!(open_qp(b2.c(), private, qpn(r)).err(), Some(libc::EINVAL));
    assert_eq!(open_qp(b2.c(), x2, 0x00ff_fff1).err(), Some(libc::EINVAL));
    let opened = open_qp(b2.c(), x2, qpn(r)).unwrap();
    assert_eq!(qpn(opened), qpn(r));
    let s = send_qp(&a, 0).unwrap();
    // Moved to RTS through the opened handle.
    connect_recv(opened, a.lid(), qpn(s));
    assert_eq!(state(r), IBV_QPS_RTS);
    connect_send(s, b.lid(), qpn(r));
    let srq = xrc_srq(&b2, x2, b2.cq).unwrap();
    post_srq_recv(srq, b2.sge(0, 32), 8);
    assert_eq!(
        post_xrc(s, srq_num(srq).unwrap(), IBV_WR_SEND, a.sge(0, 32), 1),
        0
    );
    assert_eq!(poll(a.cq, 1, 5000)[0].status, IBV_WC_SUCCESS);
    assert_eq!(poll(b2.cq, 1, 5000)[0].qp_num, qpn(r));
    // SAFETY: live QPs.
    unsafe {
        assert_eq!(sv::ibv_destroy_qp(opened), 0);
        assert_eq!(sv::ibv_destroy_qp(r), 0);
        assert_eq!(sv::ibv_destroy_qp(s), 0);
        assert_eq!(sv::ibv_destroy_srq(srq), 0);
    }
}

/// Across processes: the child owns the domain (opened through a file), an XRC SRQ and
/// the XRC receive QP; this process opens the same file without `O_CREAT` (the domain
/// exists: the child has it) and sends through an XRC send QP naming the child's SRQ.
/// The child sees the receive on its SRQ's CQ; a number that names no SRQ of its
/// domain is an invalid request here.
/// As the kernel's shared XRC TGT QP: every handle (the creator's too) holds the QP,
/// and its affiliated events reach every handle. The creator destroys its handle
/// first: the QP lives on through the opened one (it still serves requests, its error
/// event reaches the opener's context with the opener's handle); destroying the last
/// handle destroys it (a request then finds nothing and the sender's retries run out).
#[test]
fn an_xrc_receive_qp_lives_while_any_handle_holds_it() {
    isolate();
    let v = verbs();
    let a = Node::new(&v, "soft0");
    let b = Node::new(&v, "soft1");
    let b2 = Node::new(&v, "soft1");
    let f = DomainFile::new("holds");
    let x = open_xrcd(b.c(), f.fd(), libc::O_CREAT).unwrap();
    let x2 = open_xrcd(b2.c(), f.fd(), 0).unwrap();
    let r = recv_qp(b.c(), x).unwrap();
    let rqpn = qpn(r);
    let opened = open_qp(b2.c(), x2, rqpn).unwrap();
    let s = send_qp(&a, 0).unwrap();
    connect_recv(r, a.lid(), qpn(s));
    connect_send(s, b.lid(), rqpn);
    let srq = xrc_srq(&b2, x2, b2.cq).unwrap();
    for i in 0..2 {
        post_srq_recv(srq, b2.sge(64 * i, 64), i as u64);
    }
    // SAFETY: the creator's live handle.
    assert_eq!(unsafe { sv::ibv_destroy_qp(r) }, 0, "drops one hold");
    assert_eq!(state(opened), IBV_QPS_RTS);
    let srqn = srq_num(srq).unwrap();
    assert_eq!(post_xrc(s, srqn, IBV_WR_SEND, a.sge(0, 8), 1), 0);
    assert_eq!(poll(a.cq, 1, 5000)[0].status, IBV_WC_SUCCESS);
    assert_eq!(poll(b2.cq, 1, 5000)[0].qp_num, rqpn);
    // An invalid request: the QP's error event reaches the opener's handle.
    assert_eq!(
        post_xrc(s, srqn ^ 0x00ff_0000, IBV_WR_SEND, a.sge(0, 8), 2),
        0
    );
    assert_eq!(poll(a.cq, 1, 5000)[0].status, IBV_WC_REM_INV_REQ_ERR);
    let mut e = ibv_async_event::default();
    // SAFETY: a live context with an event pending (the QP went to error above).
    assert_eq!(unsafe { sv::ibv_get_async_event(b2.c(), &mut e) }, 0);
    assert_eq!(e.event_type, IBV_EVENT_QP_REQ_ERR);
    // SAFETY: reading the union's QP member of a QP event.
    assert_eq!(unsafe { e.element.qp }, opened);
    // SAFETY: the event just got.
    unsafe { sv::ibv_ack_async_event(&mut e) };
    // SAFETY: the last handle.
    assert_eq!(unsafe { sv::ibv_destroy_qp(opened) }, 0);
    assert_eq!(open_qp(b2.c(), x2, rqpn).err(), Some(libc::EINVAL), "gone");
    // SAFETY: live objects nothing uses any more.
    unsafe {
        assert_eq!(sv::ibv_destroy_qp(s), 0);
        assert_eq!(sv::ibv_destroy_srq(srq), 0);
    }
    assert_eq!(close_xrcd(x2), 0);
    assert_eq!(close_xrcd(x), 0);
}

#[test]
fn xrc_between_two_processes() {
    isolate();
    let f = DomainFile::new("xproc");
    let v = verbs();
    let a = Node::new(&v, "soft0");
    let mut peer = Peer::spawn();
    let l = peer.cmd(&format!("setup {}", f.path.display()));
    let w: Vec<u32> = l[0]
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    let (lid, rqpn, srqn) = (w[0] as u16, w[1], w[2]);
    // The child holds the domain: it exists machine-wide.
    let x = open_xrcd(a.c(), f.fd(), 0);
    assert_eq!(x.err(), Some(libc::EAGAIN), "soft0's domain of the file");
    let b = Node::new(&v, "soft1");
    let xb = open_xrcd(b.c(), f.fd(), 0).expect("the child's domain exists");
    let s = send_qp(&a, 0).unwrap();
    connect_send(s, lid, rqpn);
    peer.cmd(&format!("connect {} {}", a.lid(), qpn(s)));
    a.buf()[..11].copy_from_slice(b"hello child");
    assert_eq!(post_xrc(s, srqn, IBV_WR_SEND, a.sge(0, 11), 1), 0);
    assert_eq!(poll(a.cq, 1, 10_000)[0].status, IBV_WC_SUCCESS);
    let got = peer.cmd("wait 1");
    assert_eq!(
        got[0],
        format!("0 {rqpn} {} 11 {}", qpn(s), hex(b"hello child"))
    );
    // An SRQ number the child's domain does not have.
    assert_eq!(
        post_xrc(s, srqn ^ 0x00ff_0000, IBV_WR_SEND, a.sge(0, 4), 2),
        0
    );
    assert_eq!(poll(a.cq, 1, 10_000)[0].status, IBV_WC_REM_INV_REQ_ERR);
    assert_eq!(peer.cmd("state")[0], IBV_QPS_ERR.to_string());
    peer.send("exit");
    assert_eq!(close_xrcd(xb), 0);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn child() {
    if std::env::var_os(ENV_CHILD).is_none() {
        return;
    }
    // The namespace is the parent's (`Peer::spawn` names it).
    let v = verbs();
    let b = Node::new(&v, "soft1");
    let mut keep = None;
    let mut r = null_mut();
    serve(|w| {
        match w.first().copied() {
            Some("setup") => {
                let file = std::fs::File::open(w[1]).unwrap();
                let fd = {
                    use std::os::fd::AsRawFd;
                    file.as_raw_fd()
                };
                let x = open_xrcd(b.c(), fd, libc::O_CREAT).unwrap();
                keep = Some((file, x));
                let srq = xrc_srq(&b, x, b.cq).unwrap();
                r = recv_qp(b.c(), x).unwrap();
                for i in 0..4 {
                    post_srq_recv(srq, b.sge(i * 64, 64), i as u64);
                }
                out(format!("{} {} {}", b.lid(), qpn(r), srq_num(srq).unwrap()));
            }
            Some("connect") => connect_recv(r, w[1].parse().unwrap(), w[2].parse().unwrap()),
            Some("wait") => {
                for wc in poll(b.cq, w[1].parse().unwrap(), 10_000) {
                    let data = &b.buf()[wc.wr_id as usize * 64..][..wc.byte_len as usize];
                    out(format!(
                        "{} {} {} {} {}",
                        wc.status,
                        wc.qp_num,
                        wc.src_qp,
                        wc.byte_len,
                        hex(data)
                    ));
                }
            }
            Some("state") => out(state(r)),
            _ => return false,
        }
        true
    });
    drop(keep);
}

/// Null and foreign arguments to every XRC operation are `EINVAL` (or null with
/// `errno` `EINVAL`), never a crash: a domain, SRQ or QP that does not exist, or an
/// object of another kind in its place.
#[test]
fn xrc_operations_refuse_null_and_foreign_objects() {
    isolate();
    let v = verbs();
    let a = Node::new(&v, "soft0");
    let x = vctx(a.c());
    let mut xa = ibv_xrcd_init_attr {
        comp_mask: IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
        fd: -1,
        oflags: 0,
    };
    // SAFETY: each call is given null or a pointer of another kind, which the provider
    // must refuse without touching it.
    unsafe {
        assert!(x.open_xrcd.unwrap()(null_mut(), &mut xa).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert!(x.open_xrcd.unwrap()(a.c(), null_mut()).is_null());
        assert_eq!(x.close_xrcd.unwrap()(null_mut()), libc::EINVAL);
        assert_eq!(x.close_xrcd.unwrap()(a.pd.as_raw().cast()), libc::EINVAL);
        assert!(x.create_srq_ex.unwrap()(a.c(), null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        let mut n = 0;
        assert_eq!(x.get_srq_num.unwrap()(null_mut(), &mut n), libc::EINVAL);
        assert_eq!(x.get_srq_num.unwrap()(a.cq.cast(), &mut n), libc::EINVAL);
        assert!(x.open_qp.unwrap()(a.c(), null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL);
    }
    let d = open_xrcd(a.c(), -1, 0).unwrap();
    // An SRQ whose domain or CQ is not one.
    let mut sa = ibv_srq_init_attr_ex {
        attr: ibv_srq_attr {
            max_wr: 4,
            max_sge: 1,
            srq_limit: 0,
        },
        comp_mask: IBV_SRQ_INIT_ATTR_TYPE
            | IBV_SRQ_INIT_ATTR_PD
            | IBV_SRQ_INIT_ATTR_XRCD
            | IBV_SRQ_INIT_ATTR_CQ,
        srq_type: IBV_SRQT_XRC,
        pd: a.pd.as_raw(),
        xrcd: a.pd.as_raw().cast(),
        cq: a.cq,
        ..Default::default()
    };
    assert_eq!(create_srq_ex(a.c(), &mut sa).err(), Some(libc::EINVAL));
    sa.xrcd = d;
    sa.cq = a.pd.as_raw().cast();
    assert_eq!(create_srq_ex(a.c(), &mut sa).err(), Some(libc::EINVAL));
    // A receive QP in no domain, or in a PD posing as one.
    assert_eq!(recv_qp(a.c(), null_mut()).err(), Some(libc::EINVAL));
    assert_eq!(
        recv_qp(a.c(), a.pd.as_raw().cast()).err(),
        Some(libc::EINVAL)
    );
    // ibv_open_qp of a QP that is not an XRC receive QP.
    let s = send_qp(&a, 0).unwrap();
    assert_eq!(open_qp(a.c(), d, qpn(s)).err(), Some(libc::EINVAL));
    // SAFETY: a live QP nothing else uses.
    assert_eq!(unsafe { sv::ibv_destroy_qp(s) }, 0);
    assert_eq!(close_xrcd(d), 0);
    // SAFETY: a domain closed already, which the provider must refuse untouched.
    let again = unsafe { x.close_xrcd.unwrap()(d) };
    assert_eq!(again, libc::EINVAL, "closed already");
}
