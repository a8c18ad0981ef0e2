//! Compile-time proof that our ABI types (vqp-sys') match `rdma-sys`' (bindgen over the
//! same `<infiniband/verbs.h>`), which is what makes `table::linked` sound: its function
//! pointers are `rdma-sys`' functions seen through our types.
//!
//! `ibv_port_attr` is the one deliberate difference: ours has reserved tail space and
//! must be at least as large as the header's, with every shared field at the same offset.

use core::mem::{align_of, offset_of, size_of};

use static_assertions::{const_assert, const_assert_eq};

use crate::sys;

macro_rules! same_layout {
    ($($t:ident),+ $(,)?) => {$(
        const_assert_eq!(size_of::<sys::$t>(), size_of::<rdma_sys::$t>());
        const_assert_eq!(align_of::<sys::$t>(), align_of::<rdma_sys::$t>());
    )+};
}

same_layout!(
    ibv_device,
    _ibv_device_ops,
    ibv_context,
    ibv_context_ops,
    ibv_pd,
    ibv_mr,
    ibv_cq,
    ibv_comp_channel,
    ibv_qp,
    ibv_srq,
    ibv_srq_attr,
    ibv_srq_init_attr,
    ibv_async_event,
    ibv_ah,
    ibv_mw,
    ibv_mw_bind,
    ibv_mw_bind_info,
    ibv_sge,
    ibv_send_wr,
    ibv_recv_wr,
    ibv_wc,
    ibv_qp_attr,
    ibv_qp_init_attr,
    ibv_qp_cap,
    ibv_ah_attr,
    ibv_global_route,
    ibv_gid,
    ibv_device_attr,
);

const_assert!(size_of::<sys::ibv_port_attr>() >= size_of::<rdma_sys::ibv_port_attr>());
const_assert_eq!(
    align_of::<sys::ibv_port_attr>(),
    align_of::<rdma_sys::ibv_port_attr>()
);

macro_rules! same_offsets {
    ($t:ident { $($f:ident),+ $(,)? }) => {$(
        const_assert_eq!(offset_of!(sys::$t, $f), offset_of!(rdma_sys::$t, $f));
    )+};
}

same_offsets!(ibv_context {
    device,
    ops,
    cmd_fd,
    async_fd,
    num_comp_vectors,
    mutex,
    abi_compat
});
same_offsets!(ibv_context_ops {
    poll_cq,
    req_notify_cq,
    post_srq_recv,
    post_send,
    post_recv
});
same_offsets!(ibv_cq {
    context,
    channel,
    cq_context,
    handle,
    cqe
});
same_offsets!(ibv_qp {
    context,
    qp_context,
    pd,
    send_cq,
    recv_cq,
    srq,
    handle,
    qp_num,
    state,
    qp_type
});
same_offsets!(ibv_mr {
    context,
    pd,
    addr,
    length,
    handle,
    lkey,
    rkey
});
same_offsets!(ibv_send_wr {
    wr_id,
    next,
    sg_list,
    num_sge,
    opcode,
    send_flags,
    wr,
    qp_type
});
same_offsets!(ibv_recv_wr {
    wr_id,
    next,
    sg_list,
    num_sge
});
same_offsets!(ibv_wc {
    wr_id,
    status,
    opcode,
    vendor_err,
    byte_len,
    qp_num,
    src_qp,
    wc_flags,
    pkey_index,
    slid,
    sl,
    dlid_path_bits
});
same_offsets!(ibv_qp_attr {
    qp_state,
    cur_qp_state,
    path_mtu,
    path_mig_state,
    qkey,
    rq_psn,
    sq_psn,
    dest_qp_num,
    qp_access_flags,
    cap,
    ah_attr,
    alt_ah_attr,
    pkey_index,
    alt_pkey_index,
    en_sqd_async_notify,
    sq_draining,
    max_rd_atomic,
    max_dest_rd_atomic,
    min_rnr_timer,
    port_num,
    timeout,
    retry_cnt,
    rnr_retry,
    alt_port_num,
    alt_timeout,
    rate_limit
});
same_offsets!(ibv_qp_init_attr {
    qp_context,
    send_cq,
    recv_cq,
    srq,
    cap,
    qp_type,
    sq_sig_all
});
same_offsets!(ibv_ah_attr {
    grh,
    dlid,
    sl,
    src_path_bits,
    static_rate,
    is_global,
    port_num
});
same_offsets!(ibv_port_attr {
    state,
    max_mtu,
    active_mtu,
    gid_tbl_len,
    port_cap_flags,
    max_msg_sz,
    bad_pkey_cntr,
    qkey_viol_cntr,
    pkey_tbl_len,
    lid,
    sm_lid,
    lmc,
    max_vl_num,
    sm_sl,
    subnet_timeout,
    init_type_reply,
    active_width,
    active_speed,
    phys_state,
    link_layer,
    flags,
    port_cap_flags2
});
same_offsets!(ibv_device_attr {
    fw_ver,
    node_guid,
    max_qp_rd_atom,
    max_qp_init_rd_atom,
    atomic_cap,
    max_pkeys,
    phys_port_cnt
});
