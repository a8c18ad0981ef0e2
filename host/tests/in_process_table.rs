//! `Verbs::from_table` with an in-process fake provider: the path a software provider
//! takes. The fake implements just enough of the libibverbs ABI to drive every wrapper:
//! device listing, opening, queries (including a port query that writes the newer,
//! larger `ibv_port_attr`), object creation and release order, connection transitions,
//! and the data path through the context's ops table.
//!
//! A fake and not softverbs (which the other provider tests use): these tests check how
//! the wrappers take answers softverbs never gives — a port attribute in the tail that a
//! newer library appends, device limits and a port MTU that connect must lower to, an
//! unsupported QP type, a refused WR in a chain, a remote access error on a chosen WR,
//! a status string of the library's own, a second `ibv_get_cq_event` with nothing
//! pending — and read what no provider reports: every attribute passed to
//! `ibv_modify_qp` and the order in which objects are released.

#[path = "in_process_table/absent.rs"]
mod absent;
#[path = "in_process_table/fake.rs"]
mod fake;

use std::ptr::{self, null_mut};

use fake::{log_lines, setup, BAD_WR_ID, FAKE_QPN, MODIFIES};
use vqp_host::connect::{self, Address, Path, INIT_MASK, RTR_MASK, RTS_MASK};
use vqp_host::sys::*;
use vqp_host::{
    AccessFlags, Context, DeviceList, Error, LinkLayer, Mtu, PortState, QpCap, QpInit, QpState, Wc,
    WcOpcode,
};

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

// ---- tests ------------------------------------------------------------------------------

#[test]
fn devices_are_listed_found_and_opened() {
    let (_g, verbs) = setup();
    assert_eq!(verbs.library_path(), None);
    assert_eq!(
        verbs.wc_status_str(vqp_host::WcStatus::Success),
        "fake status"
    );
    let list = DeviceList::new(&verbs).unwrap();
    assert_eq!(list.len(), 1);
    let dev = list.get(0).unwrap();
    assert_eq!(dev.name(), "fake0");
    assert_eq!(dev.guid(), 0x1122_3344_5566_7788);
    assert!(list.get(1).is_none());
    match list.find("mlx5_0") {
        Err(Error::DeviceNotFound { name }) => assert_eq!(name, "mlx5_0"),
        other => panic!("{other:?}"),
    }
    drop(list);
    assert_eq!(log_lines().as_slice(), ["free_device_list"]);

    let ctx = Context::open(&verbs, Some("fake0")).unwrap();
    assert_eq!(ctx.device_name(), "fake0");
    assert_eq!(ctx.num_comp_vectors(), 2);
    assert!(matches!(
        Context::open(&verbs, Some("nope")),
        Err(Error::DeviceNotFound { .. })
    ));
}

#[test]
fn queries_decode_and_port_buffer_has_room_for_newer_layouts() {
    let (_g, verbs) = setup();
    let ctx = Context::open(&verbs, None).unwrap();
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.state(), PortState::Active);
    assert_eq!(port.active_mtu(), Mtu::Mtu1024);
    assert_eq!(port.link_layer(), LinkLayer::InfiniBand);
    assert_eq!(port.lid(), 7);
    assert_eq!(
        port.active_speed(),
        0x100,
        "the field a newer library appends is read"
    );
    match ctx.query_port(2) {
        Err(
            e @ Error::Verbs {
                function: "ibv_query_port",
                ..
            },
        ) => assert_eq!(e.raw_os_error(), Some(libc::EINVAL)),
        other => panic!("{other:?}"),
    }
    let dev = ctx.query_device().unwrap();
    assert_eq!(
        (
            dev.max_qp_rd_atom(),
            dev.max_qp_init_rd_atom(),
            dev.phys_port_cnt()
        ),
        (4, 2, 1)
    );
    let gid = ctx.query_gid(1, 0).unwrap();
    assert_eq!(gid.subnet_prefix(), 0xfe80_0000_0000_0000);
    assert_eq!(gid.interface_id(), 7);
    assert!(matches!(
        ctx.query_gid(1, 1),
        Err(Error::Verbs {
            function: "ibv_query_gid",
            ..
        })
    ));
}

#[test]
fn children_keep_parents_alive_and_release_in_order() {
    let (_g, verbs) = setup();
    let ctx = Context::open(&verbs, None).unwrap();
    log_lines().clear(); // the device list used by `open`
    let channel = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq(32, Some(&channel), 0).unwrap();
    assert_eq!(cq.capacity(), 32);
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.register_buffer(8192, AccessFlags::ALL_REMOTE).unwrap();
    assert_eq!((mr.lkey(), mr.rkey(), mr.len()), (0x11, 0x22, 8192));
    assert_eq!(mr.addr() % 4096, 0);
    assert_eq!(mr.sge(4096, 100).unwrap().addr, mr.addr() + 4096);
    assert!(mr.sge(8100, 100).is_none());
    let qp = pd.create_qp(&QpInit::rc(&cq, cap())).unwrap();
    assert_eq!(qp.qp_num(), FAKE_QPN);
    assert_eq!(
        qp.cap().max_inline_data,
        64,
        "granted sizes are written back"
    );

    // Drop parents first: nothing may be released while children live.
    drop(ctx);
    drop(channel);
    drop(pd);
    drop(cq);
    let early = log_lines().clone();
    assert!(early.is_empty(), "released while children live: {early:?}");
    drop(qp);
    drop(mr);
    let log = log_lines().clone();
    let pos = |s: &str| {
        log.iter()
            .position(|l| l == s)
            .unwrap_or_else(|| panic!("{s} missing from {log:?}"))
    };
    assert!(pos("destroy_qp") < pos("destroy_cq"));
    assert!(pos("destroy_qp") < pos("dealloc_pd"));
    assert!(pos("dereg_mr") < pos("dealloc_pd"));
    assert!(pos("destroy_cq") < pos("destroy_comp_channel"));
    assert_eq!(log.last().map(String::as_str), Some("close_device"));
    assert_eq!(log.len(), 6);
}

#[test]
fn bad_inputs_are_errors() {
    let (_g, verbs) = setup();
    let ctx = Context::open(&verbs, None).unwrap();
    assert!(matches!(
        ctx.create_cq(0, None, 0),
        Err(Error::Verbs {
            function: "ibv_create_cq",
            ..
        })
    ));
    let pd = ctx.alloc_pd().unwrap();
    assert!(matches!(
        pd.register_buffer(0, AccessFlags::LOCAL_WRITE),
        Err(Error::InvalidArgument { .. })
    ));
    let cq = ctx.create_cq(8, None, 0).unwrap();
    let mut init = QpInit::rc(&cq, cap());
    init.qp_type = vqp_host::QpType::Ud;
    match pd.create_qp(&init) {
        Err(
            e @ Error::Verbs {
                function: "ibv_create_qp",
                ..
            },
        ) => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP)),
        other => panic!("{other:?}"),
    }
    // A CQ of another context is refused before the library sees it.
    let other_ctx = Context::open(&verbs, None).unwrap();
    let other_cq = other_ctx.create_cq(8, None, 0).unwrap();
    assert!(matches!(
        pd.create_qp(&QpInit::rc(&other_cq, cap())),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn connect_applies_three_transitions_with_exact_masks() {
    let (_g, verbs) = setup();
    let ctx = Context::open(&verbs, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None, 0).unwrap();
    let qp = pd.create_qp(&QpInit::rc(&cq, cap())).unwrap();
    let path = Path::new(1, Address::lid(0x21), 0x1234, 0x100, 0x200);
    let applied = connect::connect(&qp, &path).unwrap();
    assert_eq!(
        applied.mtu,
        Mtu::Mtu1024,
        "lowered to the port's active MTU"
    );
    assert_eq!(
        (applied.max_rd_atomic, applied.max_dest_rd_atomic),
        (2, 4),
        "capped by the device"
    );

    let mods = MODIFIES.lock().unwrap().clone();
    let masks: Vec<u32> = mods.iter().map(|(_, m)| *m as u32).collect();
    assert_eq!(masks, [INIT_MASK.bits(), RTR_MASK.bits(), RTS_MASK.bits()]);
    let (init, rtr, rts) = (mods[0].0, mods[1].0, mods[2].0);
    assert_eq!(
        (init.qp_state, init.port_num, init.pkey_index),
        (IBV_QPS_INIT, 1, 0)
    );
    assert_eq!(rtr.qp_state, IBV_QPS_RTR);
    assert_eq!(
        (rtr.path_mtu, rtr.dest_qp_num, rtr.rq_psn),
        (IBV_MTU_1024, 0x1234, 0x200)
    );
    assert_eq!(
        (
            rtr.ah_attr.dlid,
            rtr.ah_attr.port_num,
            rtr.max_dest_rd_atomic
        ),
        (0x21, 1, 4)
    );
    assert_eq!(
        (rts.qp_state, rts.sq_psn, rts.max_rd_atomic),
        (IBV_QPS_RTS, 0x100, 2)
    );
    assert_eq!((rts.timeout, rts.retry_cnt, rts.rnr_retry), (14, 7, 7));
    assert_eq!(qp.state().unwrap(), QpState::Rts);

    let mut bad = path;
    bad.local_psn = 1 << 24;
    assert!(matches!(
        connect::connect(&qp, &bad),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn data_path_goes_through_the_ops_table() {
    let (_g, verbs) = setup();
    let ctx = Context::open(&verbs, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let channel = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq(8, Some(&channel), 0).unwrap();
    let qp = pd.create_qp(&QpInit::rc(&cq, cap())).unwrap();
    let mr = pd.register_buffer(4096, AccessFlags::LOCAL_WRITE).unwrap();

    let mut sge = mr.sge(0, 64).unwrap();
    let sge_ptr = ptr::addr_of_mut!(sge);
    let mut wrs = [ibv_send_wr::default(); 3];
    for (i, wr) in wrs.iter_mut().enumerate() {
        wr.wr_id = i as u64 + 1;
        wr.sg_list = sge_ptr;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
    }
    wrs[2].wr_id = 0xe77;
    let base = wrs.as_mut_ptr();
    // SAFETY: indices within the array; the chain is null-terminated.
    unsafe {
        (*base).next = base.add(1);
        (*base.add(1)).next = base.add(2);
    }
    // SAFETY: a valid chain whose SGE lies in `mr`, which outlives the completions.
    unsafe { qp.post_send(&mut *base) }.unwrap();

    let mut wcs = [Wc::default(); 2];
    let got = cq.poll(&mut wcs).unwrap();
    assert_eq!(got.len(), 2, "never more than the caller's buffer");
    assert_eq!((got[0].wr_id(), got[1].wr_id()), (1, 2));
    assert!(got
        .iter()
        .all(|w| w.is_ok() && w.qp_num() == FAKE_QPN && w.opcode() == WcOpcode::RdmaWrite));
    let got = cq.poll(&mut wcs).unwrap();
    assert_eq!(got.len(), 1);
    match got[0].ok() {
        Err(e @ Error::BadCompletion { wr_id: 0xe77, .. }) => {
            assert!(e.to_string().contains("remote access error"))
        }
        other => panic!("{other:?}"),
    }
    assert!(cq.poll(&mut wcs).unwrap().is_empty());

    // A chain whose second request is refused: the index names it.
    // SAFETY: index within the array, written through the pointer the chain uses.
    unsafe { (*base.add(1)).wr_id = BAD_WR_ID };
    // SAFETY: as above.
    match unsafe { qp.post_send(&mut *base) } {
        Err(Error::PostFailed {
            function: "ibv_post_send",
            index: 1,
            source,
        }) => {
            assert_eq!(source.raw_os_error(), Some(libc::EINVAL))
        }
        other => panic!("{other:?}"),
    }
    let mut rwr = ibv_recv_wr {
        wr_id: 5,
        next: null_mut(),
        sg_list: sge_ptr,
        num_sge: 1,
    };
    // SAFETY: a single valid receive request.
    assert!(matches!(
        unsafe { qp.post_recv(&mut rwr) },
        Err(Error::PostFailed {
            function: "ibv_post_recv",
            index: 0,
            ..
        })
    ));

    // Arming, then an event for this CQ, acknowledged on drop.
    cq.req_notify(false).unwrap();
    let event = channel.get_cq_event().unwrap();
    assert!(event.is_for(&cq));
    drop(event);
    assert!(log_lines().contains(&"ack 1".to_string()));
    let again = channel.get_cq_event();
    match again {
        Err(
            e @ Error::Verbs {
                function: "ibv_get_cq_event",
                ..
            },
        ) => assert_eq!(e.raw_os_error(), Some(libc::EAGAIN)),
        other => panic!("{other:?}"),
    }
}
