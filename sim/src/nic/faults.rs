//! Fault injection: failing one QP, or every QP of a device.

use super::qp::QpState;
use super::{Nic, SimError};

impl Nic {
    /// The QP with number `qp_num` fails after `n` more successful send WQEs: the
    /// (n + 1)-th completes with `RETRY_EXC_ERR` (signaled or not), the QP goes to
    /// error and everything outstanding on it is flushed. Its peer is not told (as
    /// when packets stop arriving); it fails with `RETRY_EXC_ERR` when it next sends.
    /// A later call replaces the count; on a QP already in error it does nothing.
    pub fn fail_qp_after(&self, qp_num: u32, n: u64) -> Result<(), SimError> {
        let mut st = self.state.borrow_mut();
        let i = st.qp_index(qp_num)?;
        if st.qps[i].state != QpState::Error {
            st.qps[i].fail_after = Some(n);
        }
        Ok(())
    }

    /// The QP with number `qp_num` loses an acknowledgement after `n` more successful
    /// send WQEs: the (n + 1)-th takes effect at the responder (its data lands, the
    /// receive it consumes completes there) but completes here with `RETRY_EXC_ERR`
    /// (signaled or not), and the QP goes to error, as when every retry's
    /// acknowledgement is lost. The requester cannot tell this from a WQE that never
    /// arrived. Its peer is not told. On a QP already in error it does nothing.
    pub fn lose_ack_after(&self, qp_num: u32, n: u64) -> Result<(), SimError> {
        let mut st = self.state.borrow_mut();
        let i = st.qp_index(qp_num)?;
        if st.qps[i].state != QpState::Error {
            st.qps[i].lose_ack_after = Some(n);
        }
        Ok(())
    }

    /// Puts the QP with number `qp_num` in error now (as an asynchronous fatal event
    /// would): no WQE fails with its own status, everything outstanding is flushed.
    pub fn fail_qp(&self, qp_num: u32) -> Result<(), SimError> {
        let mut st = self.state.borrow_mut();
        let i = st.qp_index(qp_num)?;
        st.enter_error(i);
        Ok(())
    }

    /// Drops the link of `device`: every QP on it goes to error (and is flushed), QPs
    /// created on it later start in error, and peers on other devices fail with
    /// `RETRY_EXC_ERR` when they next send to it.
    pub fn set_link_down(&self, device: usize) -> Result<(), SimError> {
        let mut st = self.state.borrow_mut();
        st.check_device(device)?;
        st.link_up[device] = false;
        for i in 0..st.qps.len() {
            if st.qps[i].device == device {
                st.enter_error(i);
            }
        }
        Ok(())
    }

    /// True while the link of `device` is up.
    pub fn link_up(&self, device: usize) -> Result<bool, SimError> {
        let st = self.state.borrow();
        st.check_device(device)?;
        Ok(st.link_up[device])
    }
}
