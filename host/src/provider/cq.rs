//! [`VerbsCq`]: vqp-core's [`PhysCq`] over a verbs [`CompletionQueue`].

use vqp_core::{PhysCq, PhysWc, PollFailure, WcOpcode, WcStatus};

use crate::verbs::{CompletionQueue, Wc};

/// A physical CQ for vqp-core: polls into a preallocated `ibv_wc` batch and converts
/// each entry to a [`PhysWc`].
///
/// Status and opcode keep their raw libibverbs values (`WcStatus(u32)`,
/// `WcOpcode(u32)`), so a value this crate does not know passes through for the core
/// to report. The immediate is taken only when `IBV_WC_WITH_IMM` is set, and kept in
/// network byte order, as the core expects.
pub struct VerbsCq {
    cq: CompletionQueue,
    batch: Box<[Wc]>,
}

impl VerbsCq {
    /// Wraps `cq`, polling at most [`DEFAULT_POLL_BATCH`](super::DEFAULT_POLL_BATCH)
    /// completions per call.
    pub fn new(cq: CompletionQueue) -> Self {
        Self::with_batch(cq, super::DEFAULT_POLL_BATCH)
    }

    /// Wraps `cq`, polling at most `batch` (at least one) completions per call.
    pub fn with_batch(cq: CompletionQueue, batch: usize) -> Self {
        VerbsCq {
            cq,
            batch: vec![Wc::default(); batch.max(1)].into_boxed_slice(),
        }
    }

    /// The completion queue (to arm it, or read its capacity).
    pub fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// How many completions one poll returns at most.
    pub fn batch(&self) -> usize {
        self.batch.len()
    }
}

/// A verbs completion as the core sees it.
#[inline]
pub(crate) fn convert(wc: &Wc) -> PhysWc {
    let raw = wc.raw();
    PhysWc {
        wr_id: raw.wr_id,
        status: WcStatus(raw.status),
        opcode: WcOpcode(raw.opcode),
        qp_num: raw.qp_num,
        byte_len: raw.byte_len,
        // `Wc::imm_data` checks IBV_WC_WITH_IMM and gives host order; back to wire order.
        imm_data: wc.imm_data().map(u32::to_be),
    }
}

impl PhysCq for VerbsCq {
    fn poll(&mut self, out: &mut [PhysWc]) -> Result<usize, PollFailure> {
        let n = out.len().min(self.batch.len());
        let got = self
            .cq
            .poll(&mut self.batch[..n])
            .map_err(|e| PollFailure {
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            })?;
        for (o, wc) in out.iter_mut().zip(got.iter()) {
            *o = convert(wc);
        }
        Ok(got.len())
    }
}

impl core::fmt::Debug for VerbsCq {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VerbsCq")
            .field("cq", &self.cq)
            .field("batch", &self.batch.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;

    #[test]
    fn conversion_keeps_raw_values_and_wire_order() {
        let raw = sys::ibv_wc {
            wr_id: 9,
            status: 77,
            opcode: sys::IBV_WC_RECV_RDMA_WITH_IMM,
            byte_len: 4096,
            qp_num: 0x123,
            wc_flags: sys::IBV_WC_WITH_IMM,
            imm: sys::ibv_wc_imm {
                imm_data: 0x8000_0001u32.to_be(),
            },
            ..Default::default()
        };
        let wc = convert(&Wc::from_raw(raw));
        assert_eq!(wc.wr_id, 9);
        assert_eq!(wc.status, WcStatus(77), "unknown statuses pass through");
        assert_eq!(wc.opcode, WcOpcode::RECV_RDMA_WITH_IMM);
        assert_eq!((wc.qp_num, wc.byte_len), (0x123, 4096));
        assert_eq!(wc.imm_data, Some(0x8000_0001u32.to_be()), "network order");

        let wc = convert(&Wc::from_raw(sys::ibv_wc {
            wc_flags: sys::IBV_WC_GRH,
            ..raw
        }));
        assert_eq!(wc.imm_data, None, "no IBV_WC_WITH_IMM, no immediate");
    }
}
