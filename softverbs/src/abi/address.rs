//! Address handles, for UD QPs: `ibv_create_ah` / `ibv_destroy_ah`, and the address
//! vector that answers a received datagram (`ibv_init_ah_from_wc`,
//! `ibv_create_ah_from_wc`). Multicast is not supported: attaching a group fails
//! cleanly as on an rdma-core provider without the operation (`EOPNOTSUPP`).

use core::ffi::c_int;

use vqp_sys::*;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::object::{live, publish, retire, AhObj, CtxObj, PdObj};
use super::set_errno;
use crate::provider;

/// `struct ibv_grh`: the global route header in front of a UD receive buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ibv_grh {
    /// IP version (4 bits), traffic class (8), flow label (20); network order.
    pub version_tclass_flow: u32,
    /// Payload length, network order.
    pub paylen: u16,
    /// Next header: 0x1b for an InfiniBand transport header.
    pub next_hdr: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source GID.
    pub sgid: ibv_gid,
    /// Destination GID.
    pub dgid: ibv_gid,
}

/// `next_hdr` of a GRH followed by an InfiniBand base transport header.
const IB_NEXT_HDR: u8 = 0x1b;

/// `ibv_init_ah_from_wc`: the address vector that answers the sender of a received
/// completion: DLID = the completion's SLID, its SL and path bits, the port; with
/// `IBV_WC_GRH`, a global route back to the GRH's source GID, from the local GID the GRH
/// was sent to. Returns 0, or -1 with `errno`: `EPROTONOSUPPORT` for a GRH that is not an
/// InfiniBand one (IPv6 version, next header 0x1b: softverbs' datagrams carry one on
/// every port, a RoCE port's included, where a RoCE v2 NIC would write an IPv4 header
/// for an IPv4 GID), `EINVAL` for a multicast destination GID, `ENOENT` when that
/// GID is not in the port's table, `EINVAL` for a null argument or a bad context.
///
/// # Safety
/// `context` is null or a live context; `wc` and `ah_attr` are null or valid; `grh` is
/// null or readable when `wc` has `IBV_WC_GRH`.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    // SAFETY: per the contract.
    let (Some(c), Some(wc), Some(out)) = (
        unsafe { live::<CtxObj>(context) },
        unsafe { wc.as_ref() },
        unsafe { ah_attr.as_mut() },
    ) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    // SAFETY: per the contract.
    let grh = unsafe { grh.as_ref() };
    match ah_from_wc(c.core.dev, port_num, wc, grh) {
        Ok(a) => {
            *out = a;
            0
        }
        Err(errno) => {
            set_errno(errno);
            -1
        }
    }
}

/// The address vector of [`ibv_init_ah_from_wc`], or the errno that refuses it.
fn ah_from_wc(
    dev: usize,
    port_num: u8,
    wc: &ibv_wc,
    grh: Option<&ibv_grh>,
) -> Result<ibv_ah_attr, c_int> {
    let mut a = ibv_ah_attr {
        dlid: wc.slid,
        sl: wc.sl,
        src_path_bits: wc.dlid_path_bits,
        port_num,
        ..Default::default()
    };
    if wc.wc_flags & IBV_WC_GRH == 0 {
        return Ok(a);
    }
    let grh = grh.ok_or(libc::EINVAL)?;
    let flow = u32::from_be(grh.version_tclass_flow);
    if flow >> 28 != 6 || grh.next_hdr != IB_NEXT_HDR {
        return Err(libc::EPROTONOSUPPORT);
    }
    // SAFETY: `raw` is the byte view of either union member.
    let (dgid, sgid) = unsafe { (grh.dgid.raw, grh.sgid.raw) };
    if dgid[0] == 0xff {
        return Err(libc::EINVAL);
    }
    // The port's GID table.
    let table = provider::get().devices[dev].gids();
    let index = if port_num == 1 {
        table.iter().position(|g| *g == dgid)
    } else {
        None
    }
    .ok_or(libc::ENOENT)?;
    a.is_global = 1;
    a.grh = ibv_global_route {
        dgid: ibv_gid { raw: sgid },
        flow_label: flow & 0xf_ffff,
        sgid_index: index as u8,
        hop_limit: grh.hop_limit,
        traffic_class: (flow >> 20) as u8,
    };
    Ok(a)
}

/// `ibv_create_ah`: an address handle for UD sends to `attr`'s destination. `EINVAL`
/// for a PD that does not exist, a port other than 1, a global route from a source
/// GID index the port does not have, or no global route on a RoCE port; a destination no device
/// answers is accepted (as on a fabric: datagrams to it are lost).
///
/// # Safety
/// `pd` is null or a live PD; `attr` null or readable.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: per the contract.
    let (Some(p), Some(a)) = (unsafe { live::<PdObj>(pd) }, unsafe { attr.as_ref() }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    let prov = provider::get();
    let port = &prov.devices[p.core.dev];
    // On a RoCE port an address needs a GRH: mlx5 refuses one without
    // (`mlx5_create_ah`: `!attr->is_global && is_eth` is `EINVAL`).
    let bad_global = a.is_global != 0 && usize::from(a.grh.sgid_index) >= port.gids().len();
    if a.port_num != 1 || bad_global || (a.is_global == 0 && port.is_roce()) {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    p.core.users.fetch_add(1, Ordering::AcqRel);
    publish(AhObj {
        ibv: ibv_ah {
            // SAFETY: a live PD (contract).
            context: unsafe { (*pd).context },
            pd,
            handle: 0,
        },
        attr: *a,
        dev: prov.resolve_av(a),
        pd: Arc::clone(&p.core),
    })
}

/// `ibv_create_ah_from_wc`: [`ibv_init_ah_from_wc`], then [`ibv_create_ah`]: null with
/// the `errno` of whichever failed.
///
/// # Safety
/// `pd` is null or a live PD; the rest as [`ibv_init_ah_from_wc`].
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    // SAFETY: a live PD (contract).
    let Some(context) = (unsafe { pd.as_ref() }).map(|p| p.context) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    let mut attr = ibv_ah_attr::default();
    // SAFETY: forwarded; `attr` is writable.
    if unsafe { ibv_init_ah_from_wc(context, port_num, wc, grh, &mut attr) } != 0 {
        return core::ptr::null_mut();
    }
    // SAFETY: nothing is dereferenced.
    unsafe { ibv_create_ah(pd, &mut attr) }
}

/// `ibv_destroy_ah`: `EINVAL` for an AH that does not exist. Sends already posted with
/// it keep their destination (it was read at post).
///
/// # Safety
/// No other thread uses the AH during the call or after it succeeds.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    match retire::<AhObj>(ah, |_| Ok(())) {
        Ok(a) => {
            a.get().pd.users.fetch_sub(1, Ordering::AcqRel);
            a.free();
            0
        }
        Err(e) => e,
    }
}

/// `ibv_attach_mcast`: `EOPNOTSUPP` (multicast needs UD QPs).
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_attach_mcast(
    _qp: *mut ibv_qp,
    _gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_detach_mcast`: `EOPNOTSUPP`, as [`ibv_attach_mcast`].
///
/// # Safety
/// Nothing is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_detach_mcast(
    _qp: *mut ibv_qp,
    _gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_resolve_eth_l2_from_gid`: `EINVAL` without a global route (as rdma-core), else
/// `EOPNOTSUPP`: softverbs resolves no neighbours (an InfiniBand port has no Ethernet
/// address; a RoCE port reaches its peers by GID, with no MAC on the way).
///
/// # Safety
/// `attr` is null or readable; nothing else is dereferenced.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
    _context: *mut ibv_context,
    attr: *mut ibv_ah_attr,
    _eth_mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    // SAFETY: readable (contract).
    match unsafe { attr.as_ref() } {
        Some(a) if a.is_global != 0 => libc::EOPNOTSUPP,
        _ => libc::EINVAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(flags: u32) -> ibv_wc {
        ibv_wc {
            slid: 7,
            sl: 3,
            dlid_path_bits: 1,
            wc_flags: flags,
            ..Default::default()
        }
    }

    fn grh(version: u32, next_hdr: u8, dgid: [u8; 16]) -> ibv_grh {
        let mut sgid = [0u8; 16];
        sgid[0] = 0xfe;
        sgid[1] = 0x80;
        sgid[15] = 0x42;
        ibv_grh {
            version_tclass_flow: ((version << 28) | (0x5a << 20) | 0x1_2345).to_be(),
            paylen: 0,
            next_hdr,
            hop_limit: 9,
            sgid: ibv_gid { raw: sgid },
            dgid: ibv_gid { raw: dgid },
        }
    }

    #[test]
    fn without_grh_the_vector_answers_the_source_lid() {
        let a = ah_from_wc(0, 1, &wc(0), None).unwrap();
        assert_eq!(
            (a.dlid, a.sl, a.src_path_bits, a.port_num, a.is_global),
            (7, 3, 1, 1, 0)
        );
    }

    #[test]
    fn an_ib_grh_gives_a_route_back_from_the_local_gid() {
        let local = provider::get().devices[1].gid;
        let g = grh(6, IB_NEXT_HDR, local);
        let a = ah_from_wc(1, 1, &wc(IBV_WC_GRH), Some(&g)).unwrap();
        assert_eq!(a.is_global, 1);
        // SAFETY: byte views.
        assert_eq!(unsafe { a.grh.dgid.raw }, unsafe { g.sgid.raw });
        assert_eq!(
            (
                a.grh.sgid_index,
                a.grh.hop_limit,
                a.grh.traffic_class,
                a.grh.flow_label
            ),
            (0, 9, 0x5a, 0x1_2345)
        );
    }

    #[test]
    fn other_headers_and_unknown_gids_are_refused() {
        let local = provider::get().devices[0].gid;
        let w = wc(IBV_WC_GRH);
        let cases = [
            (grh(4, IB_NEXT_HDR, local), libc::EPROTONOSUPPORT),
            (grh(6, 17, local), libc::EPROTONOSUPPORT),
            (grh(6, IB_NEXT_HDR, [0xff; 16]), libc::EINVAL),
            (grh(6, IB_NEXT_HDR, [1; 16]), libc::ENOENT),
        ];
        for (g, want) in cases {
            assert_eq!(ah_from_wc(0, 1, &w, Some(&g)).unwrap_err(), want);
        }
        assert_eq!(ah_from_wc(0, 1, &w, None).unwrap_err(), libc::EINVAL);
        assert_eq!(
            ah_from_wc(0, 2, &w, Some(&grh(6, IB_NEXT_HDR, local))).unwrap_err(),
            libc::ENOENT
        );
    }

    #[test]
    fn null_address_handles_are_refused_and_multicast_is_not_supported() {
        let null = core::ptr::null_mut::<u8>();
        set_errno(0);
        // SAFETY: null arguments are looked up, not dereferenced.
        assert!(unsafe { ibv_create_ah(null.cast(), null.cast()) }.is_null());
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINVAL)
        );
        // SAFETY: as above.
        unsafe {
            assert_eq!(ibv_destroy_ah(null.cast()), libc::EINVAL);
            assert_eq!(
                ibv_attach_mcast(null.cast(), null.cast(), 0),
                libc::EOPNOTSUPP
            );
            assert_eq!(
                ibv_detach_mcast(null.cast(), null.cast(), 0),
                libc::EOPNOTSUPP
            );
        }
        let mut a = ibv_ah_attr::default();
        // SAFETY: `a` is readable.
        let rc =
            unsafe { ibv_resolve_eth_l2_from_gid(null.cast(), &mut a, null.cast(), null.cast()) };
        assert_eq!(rc, libc::EINVAL);
        a.is_global = 1;
        // SAFETY: as above.
        let rc =
            unsafe { ibv_resolve_eth_l2_from_gid(null.cast(), &mut a, null.cast(), null.cast()) };
        assert_eq!(rc, libc::EOPNOTSUPP);
    }
}
