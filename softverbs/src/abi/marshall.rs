//! `infiniband/marshall.h`: copies between the kernel's structs (`rdma/ib_user_verbs.h`,
//! `rdma/ib_user_sa.h`) and libibverbs' (`ibv_qp_attr`, `ibv_ah_attr`,
//! `infiniband/sa.h`'s `ibv_sa_path_rec`). libibverbs exports them for rdma-core's other
//! libraries (librdmacm); they are plain field copies, the same fields rdma-core copies
//! (`ibv_copy_qp_attr_from_kern`, like rdma-core's, leaves `qp_state` and `rate_limit`
//! alone). The kernel structs are frozen ABI, mirrored here with their sizes checked.

use vqp_sys::*;

/// `struct ib_uverbs_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct ib_uverbs_global_route {
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Flow label.
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Reserved.
    pub reserved: u8,
}

/// `struct ib_uverbs_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct ib_uverbs_ah_attr {
    /// Global route.
    pub grh: ib_uverbs_global_route,
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// Whether `grh` is valid.
    pub is_global: u8,
    /// Port.
    pub port_num: u8,
    /// Reserved.
    pub reserved: u8,
}

/// `struct ib_uverbs_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub struct ib_uverbs_qp_attr {
    pub qp_attr_mask: u32,
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub ah_attr: ib_uverbs_ah_attr,
    pub alt_ah_attr: ib_uverbs_ah_attr,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 5],
}

/// `struct ib_user_path_rec` (kernel).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub struct ib_user_path_rec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: u32,
    pub flow_label: u32,
    pub reversible: u32,
    pub mtu: u32,
    pub pkey: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ibv_sa_path_rec` (`infiniband/sa.h`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: i32,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: i32,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

// The sizes of the C definitions (x86_64 and aarch64 alike).
const _: () = {
    assert!(core::mem::size_of::<ib_uverbs_global_route>() == 24);
    assert!(core::mem::size_of::<ib_uverbs_ah_attr>() == 32);
    assert!(core::mem::size_of::<ib_uverbs_qp_attr>() == 144);
    assert!(core::mem::size_of::<ib_user_path_rec>() == 64);
    assert!(core::mem::size_of::<ibv_sa_path_rec>() == 64);
    assert!(core::mem::offset_of!(ibv_sa_path_rec, reversible) == 48);
    assert!(core::mem::offset_of!(ibv_sa_path_rec, pkey) == 54);
};

fn ah_from_kern(src: &ib_uverbs_ah_attr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: src.grh.dgid },
            flow_label: src.grh.flow_label,
            sgid_index: src.grh.sgid_index,
            hop_limit: src.grh.hop_limit,
            traffic_class: src.grh.traffic_class,
        },
        dlid: src.dlid,
        sl: src.sl,
        src_path_bits: src.src_path_bits,
        static_rate: src.static_rate,
        is_global: src.is_global,
        port_num: src.port_num,
    }
}

/// `ibv_copy_ah_attr_from_kern`.
///
/// # Safety
/// `dst` is writable and `src` readable (null: nothing is copied).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_copy_ah_attr_from_kern(
    dst: *mut ibv_ah_attr,
    src: *const ib_uverbs_ah_attr,
) {
    // SAFETY: valid or null (contract).
    if let (Some(d), Some(s)) = (unsafe { dst.as_mut() }, unsafe { src.as_ref() }) {
        *d = ah_from_kern(s);
    }
}

/// `ibv_copy_qp_attr_from_kern`.
///
/// # Safety
/// `dst` is writable and `src` readable (null: nothing is copied).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_copy_qp_attr_from_kern(
    dst: *mut ibv_qp_attr,
    src: *const ib_uverbs_qp_attr,
) {
    // SAFETY: valid or null (contract).
    let (Some(d), Some(s)) = (unsafe { dst.as_mut() }, unsafe { src.as_ref() }) else {
        return;
    };
    d.cur_qp_state = s.cur_qp_state;
    d.path_mtu = s.path_mtu;
    d.path_mig_state = s.path_mig_state;
    d.qkey = s.qkey;
    d.rq_psn = s.rq_psn;
    d.sq_psn = s.sq_psn;
    d.dest_qp_num = s.dest_qp_num;
    d.qp_access_flags = s.qp_access_flags;
    d.cap = ibv_qp_cap {
        max_send_wr: s.max_send_wr,
        max_recv_wr: s.max_recv_wr,
        max_send_sge: s.max_send_sge,
        max_recv_sge: s.max_recv_sge,
        max_inline_data: s.max_inline_data,
    };
    d.ah_attr = ah_from_kern(&s.ah_attr);
    d.alt_ah_attr = ah_from_kern(&s.alt_ah_attr);
    d.pkey_index = s.pkey_index;
    d.alt_pkey_index = s.alt_pkey_index;
    d.en_sqd_async_notify = s.en_sqd_async_notify;
    d.sq_draining = s.sq_draining;
    d.max_rd_atomic = s.max_rd_atomic;
    d.max_dest_rd_atomic = s.max_dest_rd_atomic;
    d.min_rnr_timer = s.min_rnr_timer;
    d.port_num = s.port_num;
    d.timeout = s.timeout;
    d.retry_cnt = s.retry_cnt;
    d.rnr_retry = s.rnr_retry;
    d.alt_port_num = s.alt_port_num;
    d.alt_timeout = s.alt_timeout;
}

/// `ibv_copy_path_rec_from_kern`.
///
/// # Safety
/// `dst` is writable and `src` readable (null: nothing is copied).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_copy_path_rec_from_kern(
    dst: *mut ibv_sa_path_rec,
    src: *const ib_user_path_rec,
) {
    // SAFETY: valid or null (contract).
    let (Some(d), Some(s)) = (unsafe { dst.as_mut() }, unsafe { src.as_ref() }) else {
        return;
    };
    *d = ibv_sa_path_rec {
        dgid: ibv_gid { raw: s.dgid },
        sgid: ibv_gid { raw: s.sgid },
        dlid: s.dlid,
        slid: s.slid,
        raw_traffic: s.raw_traffic as i32,
        flow_label: s.flow_label,
        hop_limit: s.hop_limit,
        traffic_class: s.traffic_class,
        reversible: s.reversible as i32,
        numb_path: s.numb_path,
        pkey: s.pkey,
        sl: s.sl,
        mtu_selector: s.mtu_selector,
        mtu: s.mtu as u8,
        rate_selector: s.rate_selector,
        rate: s.rate,
        packet_life_time_selector: s.packet_life_time_selector,
        packet_life_time: s.packet_life_time,
        preference: s.preference,
    };
}

/// `ibv_copy_path_rec_to_kern`.
///
/// # Safety
/// `dst` is writable and `src` readable (null: nothing is copied).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_copy_path_rec_to_kern(
    dst: *mut ib_user_path_rec,
    src: *const ibv_sa_path_rec,
) {
    // SAFETY: valid or null (contract).
    let (Some(d), Some(s)) = (unsafe { dst.as_mut() }, unsafe { src.as_ref() }) else {
        return;
    };
    // SAFETY: `raw` is the byte view of either union member.
    let (dgid, sgid) = unsafe { (s.dgid.raw, s.sgid.raw) };
    *d = ib_user_path_rec {
        dgid,
        sgid,
        dlid: s.dlid,
        slid: s.slid,
        raw_traffic: s.raw_traffic as u32,
        flow_label: s.flow_label,
        reversible: s.reversible as u32,
        mtu: u32::from(s.mtu),
        pkey: s.pkey,
        hop_limit: s.hop_limit,
        traffic_class: s.traffic_class,
        numb_path: s.numb_path,
        sl: s.sl,
        mtu_selector: s.mtu_selector,
        rate_selector: s.rate_selector,
        rate: s.rate,
        packet_life_time_selector: s.packet_life_time_selector,
        packet_life_time: s.packet_life_time,
        preference: s.preference,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kern_ah(seed: u8) -> ib_uverbs_ah_attr {
        ib_uverbs_ah_attr {
            grh: ib_uverbs_global_route {
                dgid: [seed; 16],
                flow_label: 0x1_2345,
                sgid_index: seed + 1,
                hop_limit: seed + 2,
                traffic_class: seed + 3,
                reserved: 0,
            },
            dlid: 0x100 + u16::from(seed),
            sl: 4,
            src_path_bits: 5,
            static_rate: 6,
            is_global: 1,
            port_num: 1,
            reserved: 0,
        }
    }

    #[test]
    fn qp_attr_copies_every_field_rdma_core_copies() {
        let s = ib_uverbs_qp_attr {
            qp_state: 3,
            cur_qp_state: 2,
            path_mtu: 5,
            path_mig_state: 1,
            qkey: 0x1111,
            rq_psn: 10,
            sq_psn: 11,
            dest_qp_num: 0x42,
            qp_access_flags: 7,
            ah_attr: kern_ah(1),
            alt_ah_attr: kern_ah(9),
            max_send_wr: 20,
            max_recv_wr: 21,
            max_send_sge: 22,
            max_recv_sge: 23,
            max_inline_data: 24,
            pkey_index: 25,
            alt_pkey_index: 26,
            en_sqd_async_notify: 1,
            sq_draining: 1,
            max_rd_atomic: 27,
            max_dest_rd_atomic: 28,
            min_rnr_timer: 29,
            port_num: 1,
            timeout: 30,
            retry_cnt: 31,
            rnr_retry: 32,
            alt_port_num: 2,
            alt_timeout: 33,
            ..Default::default()
        };
        let mut d = ibv_qp_attr::default();
        // SAFETY: valid structs.
        unsafe { ibv_copy_qp_attr_from_kern(&mut d, &s) };
        assert_eq!(d.qp_state, 0, "rdma-core does not copy qp_state");
        assert_eq!(
            (
                d.cur_qp_state,
                d.path_mtu,
                d.path_mig_state,
                d.qkey,
                d.rq_psn,
                d.sq_psn
            ),
            (2, 5, 1, 0x1111, 10, 11)
        );
        assert_eq!((d.dest_qp_num, d.qp_access_flags), (0x42, 7));
        assert_eq!(
            (
                d.cap.max_send_wr,
                d.cap.max_recv_wr,
                d.cap.max_send_sge,
                d.cap.max_recv_sge
            ),
            (20, 21, 22, 23)
        );
        assert_eq!(d.cap.max_inline_data, 24);
        assert_eq!((d.ah_attr.dlid, d.alt_ah_attr.dlid), (0x101, 0x109));
        // SAFETY: byte view.
        assert_eq!(unsafe { d.alt_ah_attr.grh.dgid.raw }, [9; 16]);
        assert_eq!(
            (
                d.alt_ah_attr.grh.sgid_index,
                d.alt_ah_attr.grh.hop_limit,
                d.alt_ah_attr.grh.traffic_class
            ),
            (10, 11, 12)
        );
        assert_eq!(
            (
                d.pkey_index,
                d.alt_pkey_index,
                d.en_sqd_async_notify,
                d.sq_draining
            ),
            (25, 26, 1, 1)
        );
        assert_eq!(
            (
                d.max_rd_atomic,
                d.max_dest_rd_atomic,
                d.min_rnr_timer,
                d.port_num
            ),
            (27, 28, 29, 1)
        );
        assert_eq!(
            (
                d.timeout,
                d.retry_cnt,
                d.rnr_retry,
                d.alt_port_num,
                d.alt_timeout
            ),
            (30, 31, 32, 2, 33)
        );
    }

    #[test]
    fn path_records_round_trip() {
        let k = ib_user_path_rec {
            dgid: [1; 16],
            sgid: [2; 16],
            dlid: 3,
            slid: 4,
            raw_traffic: 1,
            flow_label: 5,
            reversible: 1,
            mtu: 5,
            pkey: 0xffff,
            hop_limit: 6,
            traffic_class: 7,
            numb_path: 8,
            sl: 9,
            mtu_selector: 2,
            rate_selector: 2,
            rate: 16,
            packet_life_time_selector: 2,
            packet_life_time: 18,
            preference: 1,
        };
        let mut u = ibv_sa_path_rec::default();
        let mut back = ib_user_path_rec::default();
        // SAFETY: valid structs.
        unsafe {
            ibv_copy_path_rec_from_kern(&mut u, &k);
            ibv_copy_path_rec_to_kern(&mut back, &u);
        }
        // SAFETY: byte views.
        assert_eq!(unsafe { (u.dgid.raw, u.sgid.raw) }, ([1; 16], [2; 16]));
        assert_eq!(
            (u.pkey, u.mtu, u.rate, u.packet_life_time),
            (0xffff, 5, 16, 18)
        );
        assert_eq!(format!("{back:?}"), format!("{k:?}"));
        let mut a = ibv_ah_attr::default();
        // SAFETY: valid structs; nulls are ignored.
        unsafe {
            ibv_copy_ah_attr_from_kern(&mut a, &kern_ah(3));
            ibv_copy_ah_attr_from_kern(core::ptr::null_mut(), &kern_ah(3));
            ibv_copy_path_rec_to_kern(&mut back, core::ptr::null());
        }
        assert_eq!(
            (a.dlid, a.is_global, a.grh.flow_label),
            (0x103, 1, 0x1_2345)
        );
    }
}
