//! The fault and scheduling controls as C functions, for programs that `dlopen` the
//! cdylib.
//!
//! A program that loads `libvqp_softverbs.so` with `dlopen` gets its own copy of the
//! provider's state: the Rust functions of this crate ([`crate::set_reorder`],
//! [`crate::fail_qp_after`], …), linked into the program, would configure a different
//! copy than the one its verbs calls reach. These exports give such a program (and C
//! programs) the same controls on the loaded copy; resolve them with `dlsym` on the
//! library's handle.
//!
//! [`register`] applies the fault rules to a new QP, for the modules that create one.
//!
//! Only plain C integers cross the boundary: nothing here takes a pointer, so every
//! function is safe to call with any arguments. Functions returning `int` return 0 on
//! success or an errno value (`EINVAL`) for an argument they refuse, as libibverbs does.
//!
//! ```c
//! int  vqp_soft_set_reorder(int policy, uint64_t seed);  /* VQP_SOFT_REORDER_* */
//! void vqp_soft_fail_qp_after(uint32_t qp_num, uint64_t wqes);
//! void vqp_soft_delay_qp(uint32_t qp_num, uint64_t micros);
//! void vqp_soft_clear_faults(void);
//! int  vqp_soft_set_link(uint32_t device, int up);
//! ```

use core::ffi::c_int;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{QpSelector, Reorder};
use crate::qp::Qp;

/// `policy` of [`vqp_soft_set_reorder`]: [`Reorder::Fifo`].
pub const VQP_SOFT_REORDER_FIFO: c_int = 0;
/// `policy` of [`vqp_soft_set_reorder`]: [`Reorder::Random`] with the given seed.
pub const VQP_SOFT_REORDER_RANDOM: c_int = 1;
/// `policy` of [`vqp_soft_set_reorder`]: [`Reorder::Adversarial`].
pub const VQP_SOFT_REORDER_ADVERSARIAL: c_int = 2;

/// The [`Reorder`] policy a C `policy` code and seed name, if any.
pub fn reorder_from_c(policy: c_int, seed: u64) -> Option<Reorder> {
    match policy {
        VQP_SOFT_REORDER_FIFO => Some(Reorder::Fifo),
        VQP_SOFT_REORDER_RANDOM => Some(Reorder::Random { seed }),
        VQP_SOFT_REORDER_ADVERSARIAL => Some(Reorder::Adversarial),
        _ => None,
    }
}

/// The C `policy` code and seed of a [`Reorder`] policy: the inverse of
/// [`reorder_from_c`], for callers of [`vqp_soft_set_reorder`] through `dlsym`.
pub fn reorder_to_c(policy: Reorder) -> (c_int, u64) {
    match policy {
        Reorder::Fifo => (VQP_SOFT_REORDER_FIFO, 0),
        Reorder::Random { seed } => (VQP_SOFT_REORDER_RANDOM, seed),
        Reorder::Adversarial => (VQP_SOFT_REORDER_ADVERSARIAL, 0),
    }
}

/// [`crate::set_reorder`]: sets the cross-QP order of execution. `policy` is one of
/// the `VQP_SOFT_REORDER_*` codes; `seed` matters only for the random policy.
/// Returns 0, or `EINVAL` (nothing changed) for an unknown code.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn vqp_soft_set_reorder(policy: c_int, seed: u64) -> c_int {
    match reorder_from_c(policy, seed) {
        Some(p) => {
            crate::set_reorder(p);
            0
        }
        None => libc::EINVAL,
    }
}

/// [`crate::fail_qp_after`] for the QP numbered `qp_num`: it goes to the error state
/// when it starts its (`wqes` + 1)-th WQE from now.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn vqp_soft_fail_qp_after(qp_num: u32, wqes: u64) {
    crate::fail_qp_after(QpSelector::QpNum(qp_num), wqes);
}

/// [`crate::delay_qp`] for the QP numbered `qp_num`: each of its WQEs executes no
/// earlier than `micros` µs after it was posted.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn vqp_soft_delay_qp(qp_num: u32, micros: u64) {
    crate::delay_qp(QpSelector::QpNum(qp_num), Duration::from_micros(micros));
}

/// [`crate::clear_faults`]: removes every failure and delay rule (a QP already in
/// error stays there; links are untouched).
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn vqp_soft_clear_faults() {
    crate::clear_faults();
}

/// [`crate::set_link`]: takes device `device`'s link down (`up == 0`) or up (any
/// other value). Returns 0, or `EINVAL` when there is no such device.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn vqp_soft_set_link(device: u32, up: c_int) -> c_int {
    match crate::set_link(device as usize, up != 0) {
        Ok(()) => 0,
        Err(_) => libc::EINVAL,
    }
}

/// [`crate::fail_qp`] for the QP numbered `qp_num`: it goes to the error state now.
/// Returns 0, or `EINVAL` when no live QP has that number.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn vqp_soft_fail_qp(qp_num: u32) -> c_int {
    if crate::fail_qp(QpSelector::QpNum(qp_num)) > 0 {
        0
    } else {
        libc::EINVAL
    }
}

/// [`crate::set_rate`]: device `device`'s link rate in bytes per second (0:
/// unlimited). Returns 0, or `EINVAL` when there is no such device.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn vqp_soft_set_rate(device: u32, bytes_per_sec: u64) -> c_int {
    match crate::set_rate(device as usize, bytes_per_sec) {
        Ok(()) => 0,
        Err(_) => libc::EINVAL,
    }
}

/// Applies the fault rules that name a new QP and makes it findable by its number.
pub(super) fn register(prov: &crate::provider::Provider, core: &Arc<Qp>) {
    let faults = crate::os::lock(&prov.faults);
    if let Some(n) = faults.fail_after(core.qpn, core.nth) {
        core.fail_after.store(n, Ordering::Relaxed);
    }
    if let Some(d) = faults.delay(core.qpn, core.nth) {
        core.delay_ns.store(
            d.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }
    drop(faults);
    prov.register_qp(core);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_codes_map_to_policies() {
        assert_eq!(reorder_from_c(0, 9), Some(Reorder::Fifo));
        assert_eq!(reorder_from_c(1, 9), Some(Reorder::Random { seed: 9 }));
        assert_eq!(reorder_from_c(2, 9), Some(Reorder::Adversarial));
        assert_eq!(reorder_from_c(3, 9), None);
        assert_eq!(reorder_from_c(-1, 0), None);
        for p in [
            Reorder::Fifo,
            Reorder::Random { seed: 9 },
            Reorder::Adversarial,
        ] {
            let (code, seed) = reorder_to_c(p);
            assert_eq!(reorder_from_c(code, seed), Some(p));
        }
    }
}
