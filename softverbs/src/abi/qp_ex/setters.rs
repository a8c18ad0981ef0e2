//! The setters of an extended QP's batch (`ibv_wr_set_sge`, `ibv_wr_set_inline_data`,
//! `ibv_wr_set_ud_addr`, …): each completes the request being built, or fails the batch
//! with the errno `ibv_post_send` would return for it.

use core::ffi::{c_int, c_void};

use vqp_sys::*;

use super::batch::set;
use crate::abi::object::{unchecked, AhObj, QpObj};
use crate::abi::state::Building;
use crate::qp::{Datagram, Sges};

/// `ibv_wr_set_xrc_srqn`: the remote SRQ an XRC send QP's request goes to (`EINVAL`
/// at complete on a QP of another type, where mlx5 has no such setter).
///
/// # Safety
/// `qp` is a live extended QP.
pub(super) unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, remote_srqn: u32) {
    // SAFETY: forwarded.
    unsafe {
        set(qp, |q, cur| {
            if q.core.qp_type != IBV_QPT_XRC_SEND {
                return Err(libc::EINVAL);
            }
            cur.wqe.xrc_srqn = remote_srqn;
            Ok(())
        })
    }
}

/// `ibv_wr_set_sge`: the request's one SGE.
///
/// # Safety
/// `qp` is a live extended QP; the buffer stays registered until the request completes.
pub(super) unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let sge = ibv_sge { addr, length, lkey };
    // SAFETY: forwarded.
    unsafe {
        set(qp, |_, cur| {
            cur.wqe.sges = Sges::from_slice(&[sge]);
            cur.wqe.inline = None;
            cur.sge_n = 1;
            Ok(())
        })
    }
}

/// `ibv_wr_set_sge_list`: the request's SGEs (`ENOMEM` at complete for more than the
/// QP's `max_send_sge`, as `ibv_post_send`; `EINVAL` for a null list).
///
/// # Safety
/// `qp` is a live extended QP; `sg_list` holds `num_sge` entries.
pub(super) unsafe extern "C" fn wr_set_sge_list(
    qp: *mut ibv_qp_ex,
    num_sge: usize,
    sg_list: *const ibv_sge,
) {
    // SAFETY: forwarded.
    unsafe {
        set(qp, |q, cur| {
            if num_sge > q.core.cap.max_send_sge as usize {
                return Err(libc::ENOMEM);
            }
            let list: &[ibv_sge] = if num_sge == 0 {
                &[]
            } else if sg_list.is_null() {
                return Err(libc::EINVAL);
            } else {
                // SAFETY: `num_sge` entries (contract), at most `max_send_sge`.
                core::slice::from_raw_parts(sg_list, num_sge)
            };
            cur.wqe.sges = Sges::from_slice(list);
            cur.wqe.inline = None;
            cur.sge_n = num_sge as u32;
            Ok(())
        })
    }
}

/// Copies inline pieces (`ENOMEM` beyond the QP's `max_inline_data`, as
/// `ibv_post_send`; `EINVAL` for a null piece with a length).
///
/// # Safety
/// Each piece's buffer is readable for its length.
unsafe fn set_inline(q: &QpObj, cur: &mut Building, pieces: &[ibv_data_buf]) -> Result<(), c_int> {
    let total = pieces
        .iter()
        .fold(0u64, |t, p| t.saturating_add(p.length as u64));
    q.core.check_inline(total)?;
    let mut data = Vec::with_capacity(total as usize);
    for p in pieces.iter().filter(|p| p.length != 0) {
        if p.addr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: readable for `length` bytes (contract); copied now, as a NIC's
        // driver copies inline data into the WQE.
        data.extend_from_slice(unsafe {
            core::slice::from_raw_parts(p.addr.cast::<u8>(), p.length)
        });
    }
    cur.wqe.inline = Some(data.into_boxed_slice());
    cur.wqe.sges = Sges::default();
    cur.sge_n = 0;
    Ok(())
}

/// `ibv_wr_set_inline_data`: the request's data, copied now.
///
/// # Safety
/// `qp` is a live extended QP; `addr` readable for `length` bytes.
pub(super) unsafe extern "C" fn wr_set_inline_data(
    qp: *mut ibv_qp_ex,
    addr: *mut c_void,
    length: usize,
) {
    let piece = [ibv_data_buf { addr, length }];
    // SAFETY: forwarded.
    unsafe { set(qp, |q, cur| set_inline(q, cur, &piece)) }
}

/// `ibv_wr_set_inline_data_list`: the request's data from `num_buf` pieces, copied now.
///
/// # Safety
/// `qp` is a live extended QP; `buf_list` holds `num_buf` readable pieces.
pub(super) unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    // SAFETY: forwarded.
    unsafe {
        set(qp, |q, cur| {
            if num_buf == 0 {
                return set_inline(q, cur, &[]);
            }
            if buf_list.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: `num_buf` pieces (contract).
            let pieces = core::slice::from_raw_parts(buf_list, num_buf);
            set_inline(q, cur, pieces)
        })
    }
}

/// `ibv_wr_set_ud_addr`: a UD request's destination (`EINVAL` at complete for a null
/// address handle).
///
/// # Safety
/// `qp` is a live extended QP; `ah` a live address handle of this provider.
pub(super) unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    // SAFETY: forwarded.
    unsafe {
        set(qp, |_, cur| {
            // SAFETY: a live address handle (contract; the data path does not consult
            // the registry, as in `ibv_post_send`).
            let Some(ah) = unchecked::<AhObj>(ah) else {
                return Err(libc::EINVAL);
            };
            cur.wqe.ud = Some(Datagram {
                dev: ah.dev,
                qpn: remote_qpn & 0x00ff_ffff,
                qkey: remote_qkey,
                global: ah.attr.is_global != 0,
                sgid_index: ah.attr.grh.sgid_index,
            });
            if ah.dev.is_none() && ah.attr.is_global != 0 {
                // Another machine's GID (see `SendWqe::set_remote_dgid`).
                cur.wqe
                    .set_remote_dgid(vqp_sys::Gid::from_sys(&ah.attr.grh.dgid).as_bytes());
            }
            Ok(())
        })
    }
}
