//! The data path: post sends and receives, poll completions into the caller's array.
//! Nothing here allocates or locks: the handle lookup is an index and one compare,
//! a send request is read in place (its layout is vqp-core's), completions are
//! written straight into the caller's array (through `WcOut`), and errors are
//! recorded as `Copy` details. `catch_unwind` (in `guard`) adds no instruction to a
//! call that does not panic: unwinding is table-driven, so it stays on the data path.

use vqp_core::{Keys, Opcode, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcOut, MAX_DEVICES};

use crate::endpoint::live;
use crate::status::{guard, vqp_status, Fail};
use crate::types::{
    vqp_endpoint, vqp_keys, vqp_recv_wr, vqp_send_wr, vqp_wc, VQP_MAX_DEVICES, VQP_POLL_BATCH,
    VQP_WC_WITH_IMM,
};

/// vqp-core's request, read in place from C's: the two have one layout (asserted
/// below), and every bit pattern of their fields is a valid `SendWr` once the key
/// mask names no device above `VQP_MAX_DEVICES` (`Keys`' one invariant), which is
/// checked here. No copy, no field-by-field conversion.
#[inline(always)]
pub(crate) fn send_wr(w: &vqp_send_wr) -> Result<&SendWr, Fail> {
    if w.key_mask & !KEY_BITS != 0 {
        return Err(Fail::invalid(
            "key_mask names a device above VQP_MAX_DEVICES",
        ));
    }
    // SAFETY: `vqp_send_wr` and `SendWr` have the same size, alignment and field
    // offsets (the assertions below), their fields are integers or `repr(transparent)`
    // integers, and `Keys`' mask (at `key_mask`) has no bit above its devices (checked
    // above); the borrow keeps `w`'s lifetime.
    Ok(unsafe { &*(w as *const vqp_send_wr).cast::<SendWr>() })
}

/// The bits of `vqp_send_wr.key_mask` that name a device.
const KEY_BITS: u32 = (1 << VQP_MAX_DEVICES) - 1;

// `vqp_send_wr` is `SendWr`, field for field; `keys[d]` is `Keys`' `[lkey, rkey]` of
// device `d` after its mask (the unit test below reads them back through `Keys`).
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<vqp_send_wr>() == size_of::<SendWr>());
    assert!(align_of::<vqp_send_wr>() == align_of::<SendWr>());
    assert!(offset_of!(vqp_send_wr, wr_id) == offset_of!(SendWr, wr_id));
    assert!(offset_of!(vqp_send_wr, opcode) == offset_of!(SendWr, opcode));
    assert!(offset_of!(vqp_send_wr, flags) == offset_of!(SendWr, flags));
    assert!(offset_of!(vqp_send_wr, local_addr) == offset_of!(SendWr, local_addr));
    assert!(offset_of!(vqp_send_wr, len) == offset_of!(SendWr, len));
    assert!(offset_of!(vqp_send_wr, remote_addr) == offset_of!(SendWr, remote_addr));
    assert!(offset_of!(vqp_send_wr, imm_data) == offset_of!(SendWr, imm_data));
    assert!(offset_of!(vqp_send_wr, key_mask) == offset_of!(SendWr, keys));
    assert!(offset_of!(vqp_send_wr, keys) == offset_of!(SendWr, keys) + 4);
    assert!(size_of::<vqp_keys>() == 8 && size_of::<Keys>() == 4 + 8 * MAX_DEVICES);
    assert!(offset_of!(vqp_send_wr, compare_add) == offset_of!(SendWr, compare_add));
    assert!(offset_of!(vqp_send_wr, swap) == offset_of!(SendWr, swap));
    assert!(VQP_MAX_DEVICES as usize == MAX_DEVICES);
    assert!(size_of::<Opcode>() == 4 && size_of::<SendFlags>() == 4);
};

/// Posts one send request: all of it or, on error, nothing. Local memory is named by
/// its keys and checked by the device, so any address is safe to pass.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STATE` (not connected),
/// `VQP_ERR_FULL` (backpressure: poll, then retry), `VQP_ERR_FAILED`,
/// `VQP_ERR_REQUEST` (unknown opcode, zero length, an unsignaled fragmented request
/// other than WRITE_WITH_IMM, a missing key, `VQP_SEND_INLINE` here…).
///
/// Thread-safety: one thread at a time per endpoint (post and poll included); no
/// allocation, no lock, no system call of its own.
///
/// # Safety
/// `wr` is null or a readable `vqp_send_wr`.
#[no_mangle]
pub unsafe extern "C" fn vqp_post_send(ep: vqp_endpoint, wr: *const vqp_send_wr) -> vqp_status {
    guard(|| {
        if wr.is_null() {
            return Err(Fail::null("wr is null"));
        }
        // SAFETY: `wr` is readable (the contract).
        let w = send_wr(unsafe { &*wr })?;
        // SAFETY: one thread at a time per endpoint (the contract).
        let l = unsafe { live(ep) }?;
        l.conn.vqp.post_send(w)?;
        Ok(())
    })
}

/// Posts one SEND or RDMA_WRITE whose payload the CPU copies into the WQE now
/// (`VQP_SEND_INLINE` is implied): `payload[0..len]` may be reused when this returns.
/// It goes whole to data QP 0.
///
/// Errors: as `vqp_post_send`; `VQP_ERR_REQUEST` also for an opcode that cannot be
/// inline, and `VQP_ERR_FULL` when data QP 0 has no room now.
///
/// Thread-safety: as `vqp_post_send`.
///
/// # Safety
/// `wr` is null or readable; `payload` is readable for `len` bytes (null only with
/// `len` 0).
#[no_mangle]
pub unsafe extern "C" fn vqp_post_send_inline(
    ep: vqp_endpoint,
    wr: *const vqp_send_wr,
    payload: *const u8,
    len: usize,
) -> vqp_status {
    guard(|| {
        if wr.is_null() || (payload.is_null() && len > 0) {
            return Err(Fail::null("wr or payload is null"));
        }
        // SAFETY: `wr` is readable (the contract).
        let w = send_wr(unsafe { &*wr })?;
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: `payload` is readable for `len` bytes (the contract).
            unsafe { std::slice::from_raw_parts(payload, len) }
        };
        // SAFETY: one thread at a time per endpoint (the contract).
        let l = unsafe { live(ep) }?;
        l.conn.vqp.post_send_inline(w, bytes)?;
        Ok(())
    })
}

/// Posts one receive: a notification receive (`len` 0) or a data receive for a SEND.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STATE`, `VQP_ERR_FULL`,
/// `VQP_ERR_FAILED`, `VQP_ERR_REQUEST` (a data receive under DQPLB with several
/// QPs).
///
/// Thread-safety: as `vqp_post_send`.
///
/// # Safety
/// `wr` is null or a readable `vqp_recv_wr`.
#[no_mangle]
pub unsafe extern "C" fn vqp_post_recv(ep: vqp_endpoint, wr: *const vqp_recv_wr) -> vqp_status {
    guard(|| {
        if wr.is_null() {
            return Err(Fail::null("wr is null"));
        }
        // SAFETY: `wr` is readable (the contract).
        let w = unsafe { &*wr };
        let r = RecvWr::data(w.wr_id, w.addr, w.len, w.lkey);
        // SAFETY: one thread at a time per endpoint (the contract).
        let l = unsafe { live(ep) }?;
        l.conn.vqp.post_recv(&r)?;
        Ok(())
    })
}

/// Polls the endpoint's completion queues once and writes up to `cap` virtual
/// completions (at most `VQP_POLL_BATCH` per call; more wait for the next call) to
/// `wc`, their number to `*n`. Sends and receives each come in posting order.
///
/// Errors: `VQP_ERR_NULL` (`n` null, or `wc` null with `cap` > 0),
/// `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STATE`, `VQP_ERR_POLL` (the provider's
/// `poll_cq` failed).
///
/// Thread-safety: as `vqp_post_send`.
///
/// # Safety
/// `wc` is writable for `cap` completions (or null with `cap` 0); `n` writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_poll(
    ep: vqp_endpoint,
    wc: *mut vqp_wc,
    cap: u32,
    n: *mut u32,
) -> vqp_status {
    guard(|| {
        if n.is_null() || (wc.is_null() && cap > 0) {
            return Err(Fail::null("n is null, or wc is null with cap > 0"));
        }
        // SAFETY: one thread at a time per endpoint (the contract).
        let l = unsafe { live(ep) }?;
        let mut out = CWcs {
            wc,
            cap: (cap as usize).min(VQP_POLL_BATCH as usize),
        };
        let c = &mut l.conn;
        let got = c.vcq.poll_into(&mut [&mut c.vqp], &mut out)?;
        // SAFETY: `n` is non-null and writable.
        unsafe { n.write(got as u32) };
        Ok(())
    })
}

/// The caller's `vqp_wc` array, written in place by the virtual CQ's poll.
struct CWcs {
    /// Writable for `cap` completions (`vqp_poll`'s contract; null only with `cap` 0).
    wc: *mut vqp_wc,
    cap: usize,
}

impl WcOut for CWcs {
    #[inline(always)]
    fn capacity(&self) -> usize {
        self.cap
    }

    #[inline(always)]
    fn put(&mut self, i: usize, w: Wc) {
        if i >= self.cap {
            return;
        }
        let out = vqp_wc {
            wr_id: w.wr_id,
            byte_len: w.byte_len,
            status: w.status.0,
            opcode: w.opcode.0,
            qp_num: w.qp_num,
            imm_data: w.imm_data.unwrap_or(0),
            flags: if w.imm_data.is_some() {
                VQP_WC_WITH_IMM
            } else {
                0
            },
            reserved: 0,
        };
        // SAFETY: i < cap, and `wc` is writable for `cap` entries.
        unsafe { self.wc.add(i).write(out) };
    }
}

const _: () = assert!(
    WcOpcode::RECV.0 == 128,
    "vqp_wc.opcode is libibverbs' value"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::VQP_ERR_INVALID_ARGUMENT;
    use crate::types::vqp_keys;

    #[test]
    fn a_c_request_reads_as_the_same_send_wr() {
        let mut c = vqp_send_wr {
            wr_id: 1,
            opcode: 5,
            flags: 2,
            local_addr: 3,
            len: 4,
            remote_addr: 6,
            imm_data: 7,
            key_mask: 0b1010,
            keys: [vqp_keys::default(); 4],
            compare_add: 8,
            swap: 9,
        };
        c.keys[1] = vqp_keys { lkey: 11, rkey: 12 };
        c.keys[3] = vqp_keys { lkey: 31, rkey: 32 };
        let w = send_wr(&c).unwrap();
        let want = SendWr {
            wr_id: 1,
            opcode: Opcode(5),
            flags: SendFlags(2),
            local_addr: 3,
            len: 4,
            remote_addr: 6,
            imm_data: 7,
            keys: Keys::none().with(1, 11, 12).with(3, 31, 32),
            compare_add: 8,
            swap: 9,
        };
        assert_eq!(*w, want);
        assert_eq!(w.keys.get(1), Some((11, 12)));
        assert_eq!(w.keys.get(3), Some((31, 32)));
        assert_eq!(w.keys.get(0), None);
        assert_eq!(w.keys.present(), 0b1010);
        c.key_mask = 0x10;
        assert_eq!(send_wr(&c).unwrap_err().code, VQP_ERR_INVALID_ARGUMENT);
    }
}
