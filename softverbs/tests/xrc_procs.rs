//! XRC across three processes: the XRC receive QP in one process (a child, "tgt"), the
//! XRC SRQ a request names in another (a second child, "srq"), both of one domain
//! opened through a file, and the XRC send QP in this process. The request is
//! delivered to that SRQ: the receive consumed there, its completion on that SRQ's CQ
//! in that process; order kept per QP across SRQs of both processes; an RNR while the
//! SRQ has no receive (the sender completes only once one is posted); the SRQ's limit
//! event in its owner; an SRQ of another domain is an invalid request that moves the
//! receive QP, in its own process, to error. Debian's `ibv_xsrq_pingpong -c 2`, whose
//! layout this is, runs in `xsrq_procs.rs`.

mod common;
mod xproc_support;
mod xrc_support;
mod xverbs_support;

use std::ptr::null_mut;
use std::time::Duration;

use common::verbs;
use vqp_host::sys::*;
use vqp_softverbs as sv;
use xproc_support::child::{out, serve};
use xproc_support::{isolate, Peer, ENV_CHILD};
use xrc_support::*;

/// Numbers of a child's answer line.
fn nums(l: &str) -> Vec<u32> {
    l.split_whitespace().map(|t| t.parse().unwrap()).collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The three processes, connected: (this side, its send QP, the tgt child, its lid
/// and receive QP number, the srq child, its SRQ number, the tgt child's own SRQ
/// number, the domain file).
struct Rig {
    a: Node,
    s: *mut ibv_qp,
    tgt: Peer,
    rqpn: u32,
    srq: Peer,
    srqn: u32,
    own_srqn: u32,
    _f: DomainFile,
}

fn rig(tag: &str, receives: u32) -> Rig {
    isolate();
    let f = DomainFile::new(tag);
    let v = verbs();
    let a = Node::new(&v, "soft0");
    let mut tgt = Peer::spawn();
    let w = nums(&tgt.one(&format!("tgt {}", f.path.display())));
    let (lid, rqpn, own_srqn) = (w[0] as u16, w[1], w[2]);
    let mut srq = Peer::spawn();
    let srqn = nums(&srq.one(&format!("srq {} {receives}", f.path.display())))[0];
    let s = send_qp(&a, 0).unwrap();
    connect_send(s, lid, rqpn);
    tgt.cmd(&format!("connect {} {}", a.lid(), qpn(s)));
    Rig {
        a,
        s,
        tgt,
        rqpn,
        srq,
        srqn,
        own_srqn,
        _f: f,
    }
}

/// A SEND through the tgt child's receive QP into the srq child's SRQ: the srq child
/// polls the receive on its SRQ's CQ (the receive QP's number, the sender's), the
/// tgt child sees nothing; then requests to both processes' SRQs, interleaved on the
/// one send QP, complete in order, each where its SRQ is.
#[test]
fn an_srq_of_another_process_receives_through_the_receive_qp() {
    let mut r = rig("deliver", 8);
    r.a.buf()[..11].copy_from_slice(b"hello there");
    assert_eq!(post_xrc(r.s, r.srqn, IBV_WR_SEND, r.a.sge(0, 11), 1), 0);
    let wc = poll(r.a.cq, 1, 10_000);
    assert_eq!(wc.len(), 1, "the sender completes");
    assert_eq!(wc[0].status, IBV_WC_SUCCESS);
    assert_eq!(
        r.srq.cmd("wait 1"),
        [format!(
            "0 {} {} 11 {}",
            r.rqpn,
            qpn(r.s),
            hex(b"hello there")
        )]
    );
    assert_eq!(r.tgt.cmd("wait 0"), Vec::<String>::new());
    // Interleaved: srq, own, srq, own, srq.
    for i in 0..5u64 {
        let b = (b'a' + i as u8).to_string();
        r.a.buf()[64 * i as usize] = b'a' + i as u8;
        let n = if i % 2 == 0 { r.srqn } else { r.own_srqn };
        assert_eq!(
            post_xrc(r.s, n, IBV_WR_SEND, r.a.sge(64 * i as usize, 1), 10 + i),
            0,
            "{b}"
        );
    }
    let wcs = poll(r.a.cq, 5, 10_000);
    let ids: Vec<(u64, u32)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        (10..15).map(|i| (i, IBV_WC_SUCCESS)).collect::<Vec<_>>()
    );
    let data = |l: &[String]| -> Vec<String> {
        l.iter()
            .map(|l| l.rsplit(' ').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(data(&r.srq.cmd("wait 3")), ["61", "63", "65"]);
    assert_eq!(data(&r.tgt.cmd("wait 2")), ["62", "64"]);
    r.srq.send("exit");
    r.tgt.send("exit");
}

/// RDMA through the receive QP into the SRQ's process: a WRITE with immediate lands in
/// that process's memory under its rkey (checked against the SRQ's PD) and consumes a
/// receive of its SRQ; a READ of that memory returns it; an rkey of that process
/// outside the region is a remote access error, and the receive QP (in its own
/// process) goes to error.
#[test]
fn rdma_through_the_receive_qp_into_the_srq_s_process() {
    let mut r = rig("rdma", 4);
    let w = r.srq.one("mem");
    let m: Vec<u64> = w.split(' ').map(|t| t.parse().unwrap()).collect();
    let (addr, rkey) = (m[0], m[1] as u32);
    r.a.buf()[..5].copy_from_slice(b"wimm!");
    let rdma = |opcode: u32, sge: &mut ibv_sge, raddr: u64, wr_id: u64| {
        // SAFETY: plain data.
        let mut wr: ibv_send_wr = unsafe { core::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = sge;
        wr.num_sge = 1;
        wr.opcode = opcode;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.imm.imm_data = 0x0a0b_0c0du32.to_be();
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = rkey;
        wr.qp_type.xrc.remote_srqn = r.srqn;
        post_wr(r.s, &mut wr)
    };
    let mut sge = r.a.sge(0, 5);
    assert_eq!(
        rdma(IBV_WR_RDMA_WRITE_WITH_IMM, &mut sge, addr + 5000, 1),
        0
    );
    assert_eq!(poll(r.a.cq, 1, 10_000)[0].status, IBV_WC_SUCCESS);
    assert_eq!(r.srq.one("peek 5000 5"), hex(b"wimm!"));
    let got = r.srq.cmd("wait 1");
    assert!(
        got[0].starts_with(&format!("0 {} {} 5 ", r.rqpn, qpn(r.s))),
        "{got:?}"
    );
    let mut back = r.a.sge(100, 5);
    assert_eq!(rdma(IBV_WR_RDMA_READ, &mut back, addr + 5000, 2), 0);
    assert_eq!(poll(r.a.cq, 1, 10_000)[0].status, IBV_WC_SUCCESS);
    assert_eq!(&r.a.buf()[100..105], b"wimm!");
    let mut sge = r.a.sge(0, 5);
    assert_eq!(rdma(IBV_WR_RDMA_WRITE, &mut sge, addr + (1 << 16), 3), 0);
    assert_eq!(poll(r.a.cq, 1, 10_000)[0].status, IBV_WC_REM_ACCESS_ERR);
    assert_eq!(r.tgt.one("state"), IBV_QPS_ERR.to_string());
    r.srq.send("exit");
    r.tgt.send("exit");
}

/// No receive on the other process's SRQ: the request is NAKed (RNR) and retried, and
/// the sender completes only after that process posted a receive and took the
/// request. The SRQ's limit, armed in its owner, fires there as its receives are used.
#[test]
fn rnr_until_the_other_process_posts_and_its_limit_event() {
    let mut r = rig("rnr", 0);
    r.a.buf()[..5].copy_from_slice(b"later");
    assert_eq!(post_xrc(r.s, r.srqn, IBV_WR_SEND, r.a.sge(0, 5), 7), 0);
    assert!(
        poll(r.a.cq, 1, 300).is_empty(),
        "no completion while no receive"
    );
    r.srq.cmd("post 3");
    r.srq.cmd("limit 2");
    let wc = poll(r.a.cq, 1, 10_000);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (7, IBV_WC_SUCCESS));
    assert_eq!(
        r.srq.cmd("wait 1"),
        [format!("0 {} {} 5 {}", r.rqpn, qpn(r.s), hex(b"later"))]
    );
    // Two receives left: at the limit, not below it yet.
    assert_eq!(r.srq.cmd("events"), Vec::<String>::new());
    assert_eq!(post_xrc(r.s, r.srqn, IBV_WR_SEND, r.a.sge(0, 5), 8), 0);
    assert_eq!(poll(r.a.cq, 1, 10_000)[0].status, IBV_WC_SUCCESS);
    r.srq.cmd("wait 1");
    assert_eq!(
        r.srq.cmd("events"),
        [IBV_EVENT_SRQ_LIMIT_REACHED.to_string()]
    );
    r.srq.send("exit");
    r.tgt.send("exit");
}

/// An XRC SRQ of another process that is not in the receive QP's domain: an invalid
/// request. The sender completes with `IBV_WC_REM_INV_REQ_ERR`, the receive QP (in the
/// tgt child) goes to error with `IBV_EVENT_QP_REQ_ERR`, that SRQ keeps its receive.
#[test]
fn an_srq_of_another_domain_in_another_process_is_an_invalid_request() {
    let mut r = rig("other", 4);
    let g = DomainFile::new("other-2");
    let other = nums(&r.srq.one(&format!("srq {} 1", g.path.display())))[0];
    // The SRQ of the domain, in the same process, is served.
    assert_eq!(post_xrc(r.s, r.srqn, IBV_WR_SEND, r.a.sge(0, 4), 2), 0);
    assert_eq!(poll(r.a.cq, 1, 10_000)[0].status, IBV_WC_SUCCESS);
    assert_eq!(r.srq.cmd("wait 1").len(), 1);
    assert_eq!(post_xrc(r.s, other, IBV_WR_SEND, r.a.sge(0, 4), 3), 0);
    let wc = poll(r.a.cq, 1, 10_000);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].status, IBV_WC_REM_INV_REQ_ERR);
    assert_eq!(r.tgt.one("state"), IBV_QPS_ERR.to_string());
    assert_eq!(r.tgt.cmd("events"), [IBV_EVENT_QP_REQ_ERR.to_string()]);
    assert_eq!(r.srq.cmd("wait 0"), Vec::<String>::new());
    r.srq.send("exit");
    r.tgt.send("exit");
}

/// The SRQ's process dies while a request for its SRQ is outstanding (stopped, then
/// killed): the request is answered as one naming an SRQ that no longer exists, an
/// invalid request, and the receive QP goes to error; nothing waits for ever.
#[test]
fn the_srq_s_process_dying_with_a_request_outstanding() {
    let mut r = rig("dies", 4);
    r.srq.signal_stop(true);
    assert_eq!(post_xrc(r.s, r.srqn, IBV_WR_SEND, r.a.sge(0, 4), 5), 0);
    let early = poll(r.a.cq, 1, 300);
    assert!(
        early.is_empty(),
        "outstanding while it is stopped: {:?}",
        early
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>()
    );
    r.srq.kill();
    let wc = poll(r.a.cq, 1, 10_000);
    assert_eq!(wc.len(), 1, "answered once the process died");
    assert_eq!((wc[0].wr_id, wc[0].status), (5, IBV_WC_REM_INV_REQ_ERR));
    assert_eq!(r.tgt.one("state"), IBV_QPS_ERR.to_string());
    r.tgt.send("exit");
}

/// `ibv_open_qp` here of the receive QP the tgt child created: this process moves it
/// to RTS and queries it through its handle (the child runs both), the tgt child then
/// destroys its own handle and the QP lives on, held by ours, still serving requests
/// into the srq child's SRQ; its error event reaches our handle; destroying our handle,
/// the last, destroys it.
#[test]
fn open_qp_of_another_process_s_receive_qp() {
    isolate();
    let f = DomainFile::new("open");
    let v = verbs();
    let a = Node::new(&v, "soft0");
    let mut tgt = Peer::spawn();
    let w = nums(&tgt.one(&format!("tgt {}", f.path.display())));
    let (lid, rqpn) = (w[0] as u16, w[1]);
    let mut srq = Peer::spawn();
    let srqn = nums(&srq.one(&format!("srq {} 8", f.path.display())))[0];
    let x = open_xrcd(a.c(), f.fd(), 0).expect("the children's domain");
    let private = open_xrcd(a.c(), -1, 0).unwrap();
    assert_eq!(open_qp(a.c(), private, rqpn).err(), Some(libc::EINVAL));
    let opened = open_qp(a.c(), x, rqpn).expect("opens the child's QP");
    assert_eq!(qpn(opened), rqpn);
    let s = send_qp(&a, 0).unwrap();
    connect_recv(opened, a.lid(), qpn(s));
    assert_eq!(state(opened), IBV_QPS_RTS);
    assert_eq!(
        tgt.one("state"),
        IBV_QPS_RTS.to_string(),
        "the child's QP moved"
    );
    connect_send(s, lid, rqpn);
    assert_eq!(post_xrc(s, srqn, IBV_WR_SEND, a.sge(0, 8), 1), 0);
    assert_eq!(poll(a.cq, 1, 10_000)[0].status, IBV_WC_SUCCESS);
    assert_eq!(srq.cmd("wait 1").len(), 1);
    // The creator's handle goes; ours holds the QP.
    tgt.cmd("destroy");
    assert_eq!(state(opened), IBV_QPS_RTS);
    assert_eq!(post_xrc(s, srqn, IBV_WR_SEND, a.sge(0, 8), 2), 0);
    assert_eq!(poll(a.cq, 1, 10_000)[0].status, IBV_WC_SUCCESS);
    assert_eq!(srq.cmd("wait 1").len(), 1);
    // An invalid request: the event reaches our handle.
    assert_eq!(
        post_xrc(s, srqn ^ 0x00ff_0000, IBV_WR_SEND, a.sge(0, 8), 3),
        0
    );
    assert_eq!(poll(a.cq, 1, 10_000)[0].status, IBV_WC_REM_INV_REQ_ERR);
    let mut e = ibv_async_event::default();
    // SAFETY: a live context; the event comes from the child.
    assert_eq!(unsafe { sv::ibv_get_async_event(a.c(), &mut e) }, 0);
    assert_eq!(e.event_type, IBV_EVENT_QP_REQ_ERR);
    // SAFETY: the QP member of a QP event.
    assert_eq!(unsafe { e.element.qp }, opened);
    // SAFETY: the event just got.
    unsafe { sv::ibv_ack_async_event(&mut e) };
    assert_eq!(state(opened), IBV_QPS_ERR);
    // SAFETY: our handle, the last.
    assert_eq!(unsafe { sv::ibv_destroy_qp(opened) }, 0);
    assert_eq!(open_qp(a.c(), x, rqpn).err(), Some(libc::EINVAL), "gone");
    // SAFETY: a live QP nothing uses any more.
    assert_eq!(unsafe { sv::ibv_destroy_qp(s) }, 0);
    assert_eq!(close_xrcd(x), 0);
    assert_eq!(close_xrcd(private), 0);
    srq.send("exit");
    tgt.send("exit");
}

/// The children: "tgt FILE" opens the domain (creating it), makes an XRC receive QP
/// and an SRQ of its own with four receives; "srq FILE N" opens the domain and makes
/// an XRC SRQ with N receives (a second one with another file: another domain);
/// "connect LID QPN" connects the receive QP; "post N" posts N more receives to the
/// last SRQ; "limit N" arms its limit; "wait N" polls N receive completions;
/// "events" lists the asynchronous events raised so far; "state" the QP's state.
#[test]
fn child() {
    if std::env::var_os(ENV_CHILD).is_none() {
        return;
    }
    let v = verbs();
    let b = Node::new(&v, "soft0");
    let mut keep = Vec::new();
    let mut r = null_mut();
    let mut srq = null_mut();
    let mut posted = 0usize;
    let mut post = |srq: *mut ibv_srq, n: usize| {
        for _ in 0..n {
            post_srq_recv(srq, b.sge(posted % 64 * 64, 64), (posted % 64) as u64);
            posted += 1;
        }
    };
    let open = |path: &str| {
        let file = std::fs::File::open(path).unwrap();
        let fd = {
            use std::os::fd::AsRawFd;
            file.as_raw_fd()
        };
        let x = open_xrcd(b.c(), fd, libc::O_CREAT).unwrap();
        (file, x)
    };
    serve(|w| {
        match w.first().copied() {
            Some("tgt") => {
                let (file, x) = open(w[1]);
                r = recv_qp(b.c(), x).unwrap();
                srq = xrc_srq(&b, x, b.cq).unwrap();
                post(srq, 4);
                out(format!("{} {} {}", b.lid(), qpn(r), srq_num(srq).unwrap()));
                keep.push((file, x));
            }
            Some("srq") => {
                let (file, x) = open(w[1]);
                srq = xrc_srq(&b, x, b.cq).unwrap();
                post(srq, w[2].parse().unwrap());
                out(srq_num(srq).unwrap());
                keep.push((file, x));
            }
            Some("connect") => connect_recv(r, w[1].parse().unwrap(), w[2].parse().unwrap()),
            Some("post") => post(srq, w[1].parse().unwrap()),
            Some("limit") => {
                let mut a = ibv_srq_attr {
                    srq_limit: w[1].parse().unwrap(),
                    ..Default::default()
                };
                // SAFETY: a live SRQ, a readable attribute struct.
                let rc = unsafe { sv::ibv_modify_srq(srq, &mut a, IBV_SRQ_LIMIT) };
                assert_eq!(rc, 0);
            }
            Some("wait") => {
                let n: usize = w[1].parse().unwrap();
                let wcs = poll(b.cq, n, if n == 0 { 200 } else { 10_000 });
                for wc in wcs {
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
            Some("events") => {
                std::thread::sleep(Duration::from_millis(100));
                let c = b.c();
                // SAFETY: a live context; its async fd polled without blocking.
                let mut p = libc::pollfd {
                    fd: unsafe { (*c).async_fd },
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one pollfd.
                while unsafe { libc::poll(&mut p, 1, 0) } == 1 {
                    let mut e = ibv_async_event::default();
                    // SAFETY: a live context, a writable event.
                    assert_eq!(unsafe { sv::ibv_get_async_event(c, &mut e) }, 0);
                    out(e.event_type);
                    // SAFETY: the event just got.
                    unsafe { sv::ibv_ack_async_event(&mut e) };
                }
            }
            Some("state") => out(state(r)),
            Some("mem") => out(format!("{} {}", b.mr.addr(), b.mr.rkey())),
            Some("peek") => {
                let (at, n): (usize, usize) = (w[1].parse().unwrap(), w[2].parse().unwrap());
                out(hex(&b.buf()[at..at + n]));
            }
            Some("destroy") => {
                // SAFETY: the receive QP's live handle, not used after.
                assert_eq!(unsafe { sv::ibv_destroy_qp(r) }, 0);
            }
            _ => return false,
        }
        true
    });
    drop(keep);
}
