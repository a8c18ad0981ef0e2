//! Proves that vqp-sys matches the system's `<infiniband/verbs.h>`.
//!
//! One list below names every struct, every field (nested union members by their C
//! path) and every constant we mirror. From it the test generates a C program, compiles
//! it with `cc` (or `$CC`) against the installed header, runs it, and compares what it
//! prints — `sizeof`, `alignof`, `offsetof` and field sizes, constant values — with what
//! Rust computes for our types. The two sides come from the same list, so they cannot
//! drift apart.
//!
//! Where the header or the compiler is missing the test is skipped, naming the package
//! (see `system`); CI installs `libibverbs-dev` and makes a skip a failure.

mod system;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::mem::{align_of, size_of, MaybeUninit};
use std::path::PathBuf;
use std::process::Command;

use vqp_sys as sys;

/// One struct or union as Rust lays it out.
struct Layout {
    /// C type, e.g. `struct ibv_sge`.
    c_type: &'static str,
    size: usize,
    align: usize,
    /// The Rust type may be larger than C's (reserved tail space for structs the
    /// library grows); field offsets must still agree.
    grows: bool,
    /// (C member path, offset, size).
    fields: Vec<(&'static str, usize, usize)>,
}

fn size_of_pointee<T>(_: *const T) -> usize {
    size_of::<T>()
}

macro_rules! layouts {
    ($(
        $kind:tt $name:ident $([$grows:ident])? {
            $( $($rust:ident).+ $(= $c:literal)? ),* $(,)?
        }
    )*) => {
        fn rust_layouts() -> Vec<Layout> {
            let mut out = Vec::new();
            $(
                let base = MaybeUninit::<sys::$name>::uninit();
                let base = base.as_ptr();
                #[allow(unused_mut)]
                let mut fields = Vec::new();
                $(
                    // SAFETY: only the address of the (possibly union) member is taken,
                    // within the allocation of `base`; nothing is read.
                    let field = unsafe { std::ptr::addr_of!((*base).$($rust).+) };
                    let c_path = layouts!(@cpath $($rust).+ $(= $c)?);
                    fields.push((c_path, field as usize - base as usize, size_of_pointee(field)));
                )*
                out.push(Layout {
                    c_type: concat!(stringify!($kind), " ", stringify!($name)),
                    size: size_of::<sys::$name>(),
                    align: align_of::<sys::$name>(),
                    grows: layouts!(@grows $($grows)?),
                    fields,
                });
            )*
            out
        }
    };
    (@cpath $($rust:ident).+ = $c:literal) => { $c };
    (@cpath $($rust:ident).+) => { stringify!($($rust).+) };
    (@grows grows) => { true };
    (@grows) => { false };
}

macro_rules! constants {
    ($($name:ident),* $(,)?) => {
        fn rust_constants() -> Vec<(&'static str, i64)> {
            vec![$((stringify!($name), sys::$name as i64)),*]
        }
    };
}

layouts! {
    struct _ibv_device_ops { _dummy1, _dummy2 }
    struct ibv_device { _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path }
    struct ibv_context_ops {
        _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd,
        _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw,
        _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq,
        _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq,
        _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp,
        _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah,
        _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast, _compat_async_event,
    }
    struct ibv_context { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
    struct ibv_pd { context, handle }
    struct ibv_mr { context, pd, addr, length, handle, lkey, rkey }
    struct ibv_comp_channel { context, fd, refcnt }
    struct ibv_cq {
        context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed,
    }
    struct ibv_srq { context, srq_context, pd, handle, mutex, cond, events_completed }
    struct ibv_ah { context, pd, handle }
    struct ibv_mw { context, pd, rkey, handle, type_ = "type" }
    struct ibv_sge { addr, length, lkey }
    struct ibv_mw_bind_info { mr, addr, length, mw_access_flags }
    struct ibv_mw_bind { wr_id, send_flags, bind_info, bind_info.mr, bind_info.mw_access_flags }
    struct ibv_send_wr {
        wr_id, next, sg_list, num_sge, opcode, send_flags,
        imm.imm_data = "imm_data", imm.invalidate_rkey = "invalidate_rkey",
        wr, wr.rdma, wr.rdma.remote_addr, wr.rdma.rkey,
        wr.atomic, wr.atomic.remote_addr, wr.atomic.compare_add, wr.atomic.swap, wr.atomic.rkey,
        wr.ud, wr.ud.ah, wr.ud.remote_qpn, wr.ud.remote_qkey,
        qp_type, qp_type.xrc, qp_type.xrc.remote_srqn,
        bind_mw_tso.bind_mw = "bind_mw",
        bind_mw_tso.bind_mw.mw = "bind_mw.mw",
        bind_mw_tso.bind_mw.rkey = "bind_mw.rkey",
        bind_mw_tso.bind_mw.bind_info = "bind_mw.bind_info",
        bind_mw_tso.tso = "tso",
        bind_mw_tso.tso.hdr = "tso.hdr",
        bind_mw_tso.tso.hdr_sz = "tso.hdr_sz",
        bind_mw_tso.tso.mss = "tso.mss",
    }
    struct ibv_recv_wr { wr_id, next, sg_list, num_sge }
    struct ibv_wc {
        wr_id, status, opcode, vendor_err, byte_len,
        imm.imm_data = "imm_data", imm.invalidated_rkey = "invalidated_rkey",
        qp_num, src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits,
    }
    struct ibv_qp {
        context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type,
        mutex, cond, events_completed,
    }
    struct ibv_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
    struct ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
    union ibv_gid { raw, global, global.subnet_prefix, global.interface_id }
    struct ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
    struct ibv_ah_attr {
        grh, grh.dgid, grh.sgid_index, dlid, sl, src_path_bits, static_rate, is_global, port_num,
    }
    struct ibv_qp_attr {
        qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
        qp_access_flags, cap, ah_attr, ah_attr.grh.dgid, ah_attr.dlid, ah_attr.port_num,
        alt_ah_attr, pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining,
        max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt,
        rnr_retry, alt_port_num, alt_timeout, rate_limit,
    }
    struct ibv_device_attr {
        fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
        vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
        max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
        max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
        max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
        max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
        max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt,
    }
    struct verbs_context {
        query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow,
        create_counters, destroy_counters, reg_dm_mr, alloc_dm, free_dm,
        modify_flow_action_esp, destroy_flow_action, create_flow_action_esp,
        modify_qp_rate_limit, alloc_parent_domain, dealloc_td, alloc_td, modify_cq,
        post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table, destroy_wq, modify_wq,
        create_wq, query_rt_values, create_cq_ex, priv_ = "priv", query_device_ex,
        ibv_destroy_flow, abi_placeholder2 = "ABI_placeholder2", ibv_create_flow,
        abi_placeholder1 = "ABI_placeholder1", open_qp, create_qp_ex, get_srq_num,
        create_srq_ex, open_xrcd, close_xrcd, abi_placeholder3 = "_ABI_placeholder3", sz,
        context,
    }
    struct ibv_odp_caps { general_caps, per_transport_caps, per_transport_caps.rc_odp_caps,
        per_transport_caps.uc_odp_caps, per_transport_caps.ud_odp_caps }
    struct ibv_tso_caps { max_tso, supported_qpts }
    struct ibv_rss_caps {
        supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size,
        rx_hash_fields_mask, rx_hash_function,
    }
    struct ibv_packet_pacing_caps { qp_rate_limit_min, qp_rate_limit_max, supported_qpts }
    struct ibv_tm_caps { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge }
    struct ibv_cq_moderation_caps { max_cq_count, max_cq_period }
    struct ibv_pci_atomic_caps { fetch_add, swap, compare_swap }
    struct ibv_device_attr_ex {
        orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock,
        device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps,
        raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps, xrc_odp_caps,
        phys_port_cnt_ex,
    }
    struct ibv_query_device_ex_input { comp_mask }
    struct ibv_values_ex { comp_mask, raw_clock }
    struct ibv_cq_init_attr_ex {
        cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain,
    }
    struct ibv_poll_cq_attr { comp_mask }
    struct ibv_wc_tm_info { tag, priv_ = "priv" }
    struct ibv_cq_ex {
        context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed, comp_mask, status, wr_id, start_poll, next_poll, end_poll,
        read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num, read_src_qp,
        read_wc_flags, read_slid, read_sl, read_dlid_path_bits, read_completion_ts,
        read_cvlan, read_flow_tag, read_tm_info, read_completion_wallclock_ns,
    }
    struct ibv_rx_hash_conf { rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask }
    struct ibv_qp_init_attr_ex {
        qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd,
        create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags,
    }
    struct ibv_data_buf { addr, length }
    struct ibv_qp_ex {
        qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add,
        wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send,
        wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn,
        wr_set_inline_data, wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start,
        wr_complete, wr_abort, wr_atomic_write,
    }
    struct ibv_td_init_attr { comp_mask }
    struct ibv_td { context }
    struct ibv_parent_domain_init_attr { pd, td, comp_mask, alloc, free, pd_context }
    struct ibv_dm { context, memcpy_to_dm, memcpy_from_dm, comp_mask, handle }
    struct ibv_alloc_dm_attr { length, log_align_req, comp_mask }
    struct ibv_xrcd { context }
    struct ibv_xrcd_init_attr { comp_mask, fd, oflags }
    struct ibv_tm_cap { max_num_tags, max_ops }
    struct ibv_srq_init_attr_ex { srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap }
    struct ibv_qp_open_attr { comp_mask, qp_num, xrcd, qp_context, qp_type }
    struct ibv_port_attr [grows] {
        state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
        qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
        init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
        port_cap_flags2,
    }
}

constants! {
    IBV_SYSFS_NAME_MAX, IBV_SYSFS_PATH_MAX,
    IBV_NODE_UNKNOWN, IBV_NODE_CA, IBV_NODE_SWITCH, IBV_NODE_ROUTER, IBV_NODE_RNIC,
    IBV_NODE_USNIC, IBV_NODE_USNIC_UDP, IBV_NODE_UNSPECIFIED,
    IBV_TRANSPORT_UNKNOWN, IBV_TRANSPORT_IB, IBV_TRANSPORT_IWARP, IBV_TRANSPORT_USNIC,
    IBV_TRANSPORT_USNIC_UDP, IBV_TRANSPORT_UNSPECIFIED,
    IBV_ATOMIC_NONE, IBV_ATOMIC_HCA, IBV_ATOMIC_GLOB,
    IBV_MTU_256, IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096,
    IBV_PORT_NOP, IBV_PORT_DOWN, IBV_PORT_INIT, IBV_PORT_ARMED, IBV_PORT_ACTIVE,
    IBV_PORT_ACTIVE_DEFER,
    IBV_LINK_LAYER_UNSPECIFIED, IBV_LINK_LAYER_INFINIBAND, IBV_LINK_LAYER_ETHERNET,
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ,
    IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_MW_BIND, IBV_ACCESS_ZERO_BASED, IBV_ACCESS_ON_DEMAND,
    IBV_ACCESS_HUGETLB, IBV_ACCESS_OPTIONAL_FIRST, IBV_ACCESS_RELAXED_ORDERING,
    IBV_ACCESS_OPTIONAL_RANGE,
    IBV_MW_TYPE_1, IBV_MW_TYPE_2,
    IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
    IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
    IBV_WR_LOCAL_INV, IBV_WR_BIND_MW, IBV_WR_SEND_WITH_INV, IBV_WR_TSO, IBV_WR_DRIVER1,
    IBV_WR_ATOMIC_WRITE,
    IBV_SEND_FENCE, IBV_SEND_SIGNALED, IBV_SEND_SOLICITED, IBV_SEND_INLINE, IBV_SEND_IP_CSUM,
    IBV_WC_SUCCESS, IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOC_EEC_OP_ERR,
    IBV_WC_LOC_PROT_ERR, IBV_WC_WR_FLUSH_ERR, IBV_WC_MW_BIND_ERR, IBV_WC_BAD_RESP_ERR,
    IBV_WC_LOC_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_OP_ERR,
    IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_LOC_RDD_VIOL_ERR,
    IBV_WC_REM_INV_RD_REQ_ERR, IBV_WC_REM_ABORT_ERR, IBV_WC_INV_EECN_ERR,
    IBV_WC_INV_EEC_STATE_ERR, IBV_WC_FATAL_ERR, IBV_WC_RESP_TIMEOUT_ERR, IBV_WC_GENERAL_ERR,
    IBV_WC_TM_ERR, IBV_WC_TM_RNDV_INCOMPLETE,
    IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD,
    IBV_WC_BIND_MW, IBV_WC_LOCAL_INV, IBV_WC_TSO, IBV_WC_ATOMIC_WRITE, IBV_WC_RECV,
    IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_TM_ADD, IBV_WC_TM_DEL, IBV_WC_TM_SYNC, IBV_WC_TM_RECV,
    IBV_WC_TM_NO_TAG, IBV_WC_DRIVER1, IBV_WC_DRIVER2, IBV_WC_DRIVER3,
    IBV_WC_GRH, IBV_WC_WITH_IMM, IBV_WC_IP_CSUM_OK, IBV_WC_WITH_INV, IBV_WC_TM_SYNC_REQ,
    IBV_WC_TM_MATCH, IBV_WC_TM_DATA_VALID,
    IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND,
    IBV_QPT_XRC_RECV, IBV_QPT_DRIVER,
    IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_SQE,
    IBV_QPS_ERR, IBV_QPS_UNKNOWN,
    IBV_MIG_MIGRATED, IBV_MIG_REARM, IBV_MIG_ARMED,
    IBV_QP_STATE, IBV_QP_CUR_STATE, IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_ACCESS_FLAGS,
    IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY, IBV_QP_AV, IBV_QP_PATH_MTU, IBV_QP_TIMEOUT,
    IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN, IBV_QP_MAX_QP_RD_ATOMIC,
    IBV_QP_ALT_PATH, IBV_QP_MIN_RNR_TIMER, IBV_QP_SQ_PSN, IBV_QP_MAX_DEST_RD_ATOMIC,
    IBV_QP_PATH_MIG_STATE, IBV_QP_CAP, IBV_QP_DEST_QPN, IBV_QP_RATE_LIMIT,
    IBV_VALUES_MASK_RAW_CLOCK,
    IBV_WC_EX_WITH_BYTE_LEN, IBV_WC_EX_WITH_IMM, IBV_WC_EX_WITH_QP_NUM, IBV_WC_EX_WITH_SRC_QP,
    IBV_WC_EX_WITH_SLID, IBV_WC_EX_WITH_SL, IBV_WC_EX_WITH_DLID_PATH_BITS,
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, IBV_WC_EX_WITH_CVLAN, IBV_WC_EX_WITH_FLOW_TAG,
    IBV_WC_EX_WITH_TM_INFO, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, IBV_WC_STANDARD_FLAGS,
    IBV_CQ_INIT_ATTR_MASK_FLAGS, IBV_CQ_INIT_ATTR_MASK_PD, IBV_CREATE_CQ_ATTR_SINGLE_THREADED,
    IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN,
    IBV_QP_INIT_ATTR_PD, IBV_QP_INIT_ATTR_XRCD, IBV_QP_INIT_ATTR_CREATE_FLAGS,
    IBV_QP_INIT_ATTR_MAX_TSO_HEADER, IBV_QP_INIT_ATTR_IND_TABLE, IBV_QP_INIT_ATTR_RX_HASH,
    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
    IBV_QP_EX_WITH_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_SEND,
    IBV_QP_EX_WITH_SEND_WITH_IMM, IBV_QP_EX_WITH_RDMA_READ, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, IBV_QP_EX_WITH_LOCAL_INV, IBV_QP_EX_WITH_BIND_MW,
    IBV_QP_EX_WITH_SEND_WITH_INV, IBV_QP_EX_WITH_TSO, IBV_QP_EX_WITH_ATOMIC_WRITE,
    IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS, IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
    IBV_XRCD_INIT_ATTR_FD, IBV_XRCD_INIT_ATTR_OFLAGS, IBV_XRCD_INIT_ATTR_RESERVED,
    IBV_SRQ_INIT_ATTR_TYPE, IBV_SRQ_INIT_ATTR_PD, IBV_SRQ_INIT_ATTR_XRCD, IBV_SRQ_INIT_ATTR_CQ,
    IBV_SRQ_INIT_ATTR_TM, IBV_SRQT_BASIC, IBV_SRQT_XRC, IBV_SRQT_TM,
    IBV_QP_OPEN_ATTR_NUM, IBV_QP_OPEN_ATTR_XRCD, IBV_QP_OPEN_ATTR_CONTEXT, IBV_QP_OPEN_ATTR_TYPE,
    IBV_QP_OPEN_ATTR_RESERVED, IBV_DEVICE_XRC,
}

/// The C program printing the header's view of every entry of the list.
fn probe_source(layouts: &[Layout], constants: &[(&'static str, i64)]) -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <stdalign.h>\n\
         #include <infiniband/verbs.h>\n\n\
         #define S(T) printf(\"S|%s|%zu|%zu\\n\", #T, sizeof(T), alignof(T))\n\
         #define F(T, f) printf(\"F|%s|%s|%zu|%zu\\n\", #T, #f, offsetof(T, f), sizeof(((T *)0)->f))\n\
         #define C(c) printf(\"C|%s|%lld\\n\", #c, (long long)(c))\n\n\
         int main(void)\n{\n",
    );
    for l in layouts {
        writeln!(c, "\tS({});", l.c_type).unwrap();
        for (path, _, _) in &l.fields {
            writeln!(c, "\tF({}, {});", l.c_type, path).unwrap();
        }
    }
    for (name, _) in constants {
        writeln!(c, "\tC({name});").unwrap();
    }
    c.push_str("\treturn 0;\n}\n");
    c
}

/// The C compiler the probe is built with.
fn c_compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Compiles and runs the probe; panics with the compiler's output when that fails.
fn run_probe(source: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vqp-host-layout-probe");
    std::fs::create_dir_all(&dir).expect("create the probe directory");
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, source).expect("write probe.c");
    let cc = c_compiler();
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?}: {e}"));
    assert!(
        out.status.success(),
        "the layout probe does not compile against <infiniband/verbs.h> \
         (install libibverbs-dev and a C compiler):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the layout probe");
    assert!(run.status.success(), "the layout probe failed: {run:?}");
    String::from_utf8(run.stdout).expect("probe output is UTF-8")
}

#[test]
fn sys_types_match_the_system_header() {
    if !system::verbs_header("sys_types_match_the_system_header", &c_compiler()) {
        return;
    }
    let layouts = rust_layouts();
    let constants = rust_constants();
    let output = run_probe(&probe_source(&layouts, &constants));

    let mut c_sizes = HashMap::new();
    let mut c_fields = HashMap::new();
    let mut c_consts = HashMap::new();
    for line in output.lines() {
        let parts: Vec<&str> = line.split('|').collect();
        match parts.as_slice() {
            ["S", ty, size, align] => {
                c_sizes.insert(
                    ty.to_string(),
                    (
                        size.parse::<usize>().unwrap(),
                        align.parse::<usize>().unwrap(),
                    ),
                );
            }
            ["F", ty, field, off, size] => {
                c_fields.insert(
                    (ty.to_string(), field.to_string()),
                    (
                        off.parse::<usize>().unwrap(),
                        size.parse::<usize>().unwrap(),
                    ),
                );
            }
            ["C", name, value] => {
                c_consts.insert(name.to_string(), value.parse::<i64>().unwrap());
            }
            _ => panic!("unexpected probe line {line:?}"),
        }
    }

    let mut mismatches = Vec::new();
    let mut checked_fields = 0;
    for l in &layouts {
        let (c_size, c_align) = c_sizes[l.c_type];
        let size_ok = if l.grows {
            l.size >= c_size
        } else {
            l.size == c_size
        };
        if !size_ok || l.align != c_align {
            mismatches.push(format!(
                "{}: Rust size {} align {}, C size {} align {}",
                l.c_type, l.size, l.align, c_size, c_align
            ));
        }
        for &(path, off, size) in &l.fields {
            let (c_off, c_size) = c_fields[&(l.c_type.to_string(), path.to_string())];
            if (off, size) != (c_off, c_size) {
                mismatches.push(format!(
                    "{}.{path}: Rust offset {off} size {size}, C offset {c_off} size {c_size}",
                    l.c_type
                ));
            }
            checked_fields += 1;
        }
    }
    for (name, value) in &constants {
        if c_consts[*name] != *value {
            mismatches.push(format!("{name}: Rust {value}, C {}", c_consts[*name]));
        }
    }
    assert!(
        mismatches.is_empty(),
        "ABI mismatches with <infiniband/verbs.h>:\n{}",
        mismatches.join("\n")
    );
    assert!(
        layouts.len() >= 25 && checked_fields >= 250 && constants.len() >= 140,
        "the list shrank"
    );
}

/// `ibv_port_attr` keeps room for the fields newer libraries append: the reserved tail
/// starts where the v44 struct ends, and the whole is at least the newest known size.
#[test]
fn port_attr_has_room_for_newer_libraries() {
    assert_eq!(
        std::mem::offset_of!(sys::ibv_port_attr, reserved),
        sys::IBV_PORT_ATTR_V44_SIZE
    );
    assert!(size_of::<sys::ibv_port_attr>() >= 56);
}
