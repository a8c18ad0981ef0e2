//! [`Wc`]: one work completion.

use crate::enums::{WcOpcode, WcStatus};
use crate::error::{Error, Result};
use crate::flags::WcFlags;
use crate::sys;

/// One work completion: an `ibv_wc` (same layout, so a `&mut [Wc]` is handed to the
/// provider's `poll_cq` as is) with typed accessors.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Wc(sys::ibv_wc);

impl Wc {
    /// Wraps a raw completion.
    pub const fn from_raw(raw: sys::ibv_wc) -> Self {
        Wc(raw)
    }

    /// The raw completion.
    pub const fn raw(&self) -> &sys::ibv_wc {
        &self.0
    }

    /// The work request's id.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }

    /// The status; unknown values are kept as [`WcStatus::Unknown`].
    #[inline]
    pub fn status(&self) -> WcStatus {
        WcStatus::from_raw(self.0.status)
    }

    /// Whether the request succeeded.
    #[inline]
    pub fn is_ok(&self) -> bool {
        self.0.status == sys::IBV_WC_SUCCESS
    }

    /// `Ok(())` on success, else [`Error::BadCompletion`] with the status and vendor
    /// syndrome.
    pub fn ok(&self) -> Result<()> {
        if self.is_ok() {
            Ok(())
        } else {
            Err(Error::BadCompletion {
                wr_id: self.0.wr_id,
                status: self.status(),
                vendor_err: self.0.vendor_err,
            })
        }
    }

    /// The opcode. Only meaningful when [`is_ok`](Self::is_ok): verbs leaves it undefined
    /// in error completions.
    #[inline]
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode::from_raw(self.0.opcode)
    }

    /// The local QP number.
    #[inline]
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }

    /// Bytes received (receives) or read (RDMA READ).
    #[inline]
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }

    /// The flags.
    #[inline]
    pub fn flags(&self) -> WcFlags {
        WcFlags::from_bits(self.0.wc_flags)
    }

    /// The immediate data in host byte order, when the completion carries one.
    #[inline]
    pub fn imm_data(&self) -> Option<u32> {
        if self.0.wc_flags & sys::IBV_WC_WITH_IMM != 0 {
            // SAFETY: both union members are `u32`s over the same 4 bytes.
            Some(u32::from_be(unsafe { self.0.imm.imm_data }))
        } else {
            None
        }
    }

    /// The vendor error syndrome.
    #[inline]
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err
    }

    /// The source QP (UD receives).
    #[inline]
    pub fn src_qp(&self) -> u32 {
        self.0.src_qp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessors() {
        let mut raw = sys::ibv_wc {
            wr_id: 42,
            status: sys::IBV_WC_SUCCESS,
            opcode: sys::IBV_WC_RECV_RDMA_WITH_IMM,
            wc_flags: sys::IBV_WC_WITH_IMM,
            imm: sys::ibv_wc_imm {
                imm_data: 0x1234_5678u32.to_be(),
            },
            ..Default::default()
        };
        let wc = Wc::from_raw(raw);
        assert!(wc.is_ok());
        assert!(wc.ok().is_ok());
        assert_eq!(wc.opcode(), WcOpcode::RecvRdmaWithImm);
        assert_eq!(wc.imm_data(), Some(0x1234_5678));

        raw.wc_flags = 0;
        raw.status = sys::IBV_WC_WR_FLUSH_ERR;
        raw.vendor_err = 0x249;
        let wc = Wc::from_raw(raw);
        assert_eq!(wc.imm_data(), None);
        match wc.ok() {
            Err(Error::BadCompletion {
                wr_id: 42,
                status: WcStatus::WrFlushErr,
                vendor_err: 0x249,
            }) => {}
            other => panic!("{other:?}"),
        }
        raw.status = 1000;
        assert_eq!(Wc::from_raw(raw).status(), WcStatus::Unknown(1000));
    }
}
