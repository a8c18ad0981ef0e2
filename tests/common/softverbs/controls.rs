//! The loaded provider's fault and order controls and its asynchronous-event verbs.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use vqp_host::sys::ibv_context;
use vqp_host::Context;
use vqp_softverbs::{ibv_async_event, Reorder};

use super::verbs;

type SetReorder = extern "C" fn(c_int, u64) -> c_int;
type FailQpAfter = extern "C" fn(u32, u64);
type ClearFaults = extern "C" fn();
type GetAsyncEvent = unsafe extern "C" fn(*mut ibv_context, *mut ibv_async_event) -> c_int;
type AckAsyncEvent = unsafe extern "C" fn(*mut ibv_async_event);

/// `IBV_EVENT_QP_ACCESS_ERR`.
pub const EVENT_QP_ACCESS_ERR: u32 = 3;

/// The loaded provider's fault and order controls (`vqp_soft_*`, resolved by `dlsym`),
/// and its asynchronous-event verbs.
pub struct Controls {
    set_reorder: SetReorder,
    fail_qp_after: FailQpAfter,
    clear_faults: ClearFaults,
    get_async_event: GetAsyncEvent,
    ack_async_event: AckAsyncEvent,
}

impl Controls {
    /// Sets the loaded provider's reorder policy.
    pub fn set_order(&self, order: Reorder) {
        let (code, seed) = vqp_softverbs::reorder_to_c(order);
        assert_eq!((self.set_reorder)(code, seed), 0, "{order:?} refused");
    }

    /// Puts QP `qp_num` into error when it starts its (`wqes` + 1)-th WQE from now.
    pub fn fail_qp_after(&self, qp_num: u32, wqes: u64) {
        (self.fail_qp_after)(qp_num, wqes);
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        (self.clear_faults)();
    }

    /// The asynchronous events waiting on `ctx`, taken without blocking (its
    /// `async_fd` is made non-blocking): `(event_type, element)`, the element as an
    /// address (QP or CQ events) or a port number.
    pub fn async_events(&self, ctx: &Context) -> Vec<(u32, usize)> {
        let raw = ctx.as_raw();
        // SAFETY: an open context of the loaded provider; `async_fd` is its eventfd.
        let fd = unsafe { (*raw).async_fd };
        // SAFETY: fcntl on a descriptor the context owns; only its status flags change.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            assert!(flags >= 0, "F_GETFL on the async fd");
            assert_eq!(libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK), 0);
        }
        let mut out = Vec::new();
        loop {
            let mut ev = ibv_async_event::default();
            // SAFETY: the library's `ibv_get_async_event` on its own open context, with
            // a writable event of the C layout.
            if unsafe { (self.get_async_event)(raw, &mut ev) } != 0 {
                let err = std::io::Error::last_os_error().raw_os_error();
                assert_eq!(err, Some(libc::EAGAIN), "ibv_get_async_event");
                return out;
            }
            // SAFETY: every member of the element union is plain data over the same
            // bytes.
            out.push((ev.event_type, unsafe { ev.element.qp } as usize));
            // SAFETY: an event `ibv_get_async_event` returned.
            unsafe { (self.ack_async_event)(&mut ev) };
        }
    }
}

/// The controls of [`verbs`]' library.
pub fn controls() -> &'static Controls {
    static CONTROLS: OnceLock<Controls> = OnceLock::new();
    CONTROLS.get_or_init(|| {
        let v = verbs();
        let sym = |name: &str| {
            v.symbol(name)
                .unwrap_or_else(|| panic!("{name} is not exported by {:?}", v.library_path()))
                .as_ptr()
        };
        Controls {
            // SAFETY: the provider's `vqp_soft_set_reorder(int, uint64_t) -> int`; the
            // library stays loaded for the process (`verbs` is never dropped).
            set_reorder: unsafe {
                std::mem::transmute::<*mut c_void, SetReorder>(sym("vqp_soft_set_reorder"))
            },
            // SAFETY: as above, `vqp_soft_fail_qp_after(uint32_t, uint64_t)`.
            fail_qp_after: unsafe {
                std::mem::transmute::<*mut c_void, FailQpAfter>(sym("vqp_soft_fail_qp_after"))
            },
            // SAFETY: as above, `vqp_soft_clear_faults(void)`.
            clear_faults: unsafe {
                std::mem::transmute::<*mut c_void, ClearFaults>(sym("vqp_soft_clear_faults"))
            },
            // SAFETY: as above, libibverbs' `int ibv_get_async_event(struct ibv_context *,
            // struct ibv_async_event *)`.
            get_async_event: unsafe {
                std::mem::transmute::<*mut c_void, GetAsyncEvent>(sym("ibv_get_async_event"))
            },
            // SAFETY: as above, `void ibv_ack_async_event(struct ibv_async_event *)`.
            ack_async_event: unsafe {
                std::mem::transmute::<*mut c_void, AckAsyncEvent>(sym("ibv_ack_async_event"))
            },
        }
    })
}
