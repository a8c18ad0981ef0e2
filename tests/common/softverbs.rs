//! Virtual QPs over the `dlopen`ed `libvqp_softverbs.so`, built by host `Endpoint`s:
//! the library, its fault controls, connected pairs over one or two devices, a driver
//! that posts a list of requests and collects every completion, and the checks.
//!
//! Include with `#[path = "common/softverbs.rs"] mod softverbs;`.
#![allow(dead_code)]

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use vqp_core::split::SplitPolicy;
use vqp_core::{
    Config, Keys, Mode, Opcode, PostRecvError, PostSendError, RecvWr, SendWr, Wc, WcOpcode,
    WcStatus,
};
use vqp_host::sys::ibv_context;
use vqp_host::{
    AccessFlags, Card, Connected, Context, Endpoint, MemoryRegion, QpState, Settings, Verbs,
};
use vqp_softverbs::{ibv_async_event, Reorder};

/// Up to 8 data QPs of 16 WQEs, 128 requests per direction, a window of 512, over up
/// to two devices.
pub type Ep = Endpoint<8, 16, 128, 512, 32, 2>;
/// A connected side of [`Ep`].
pub type Conn = Connected<8, 16, 128, 512, 32, 2>;

/// Fragment size of every pair: 1 MiB is 16 fragments.
pub const MAX_FRAG: u32 = 64 << 10;

/// The cdylib cargo builds next to the test binary (`target/<profile>/deps/`, with a
/// copy in `target/<profile>/`); panics, naming the places looked at, when missing.
pub fn cdylib() -> PathBuf {
    vqp_softverbs::find_cdylib().unwrap_or_else(|| {
        panic!(
            "the cdylib was not built; looked at {:?}",
            vqp_softverbs::cdylib_candidates()
        )
    })
}

/// The loaded provider, once per process and never unloaded (its progress thread
/// runs for the life of the process).
pub fn verbs() -> &'static Verbs {
    static VERBS: OnceLock<Verbs> = OnceLock::new();
    VERBS.get_or_init(|| {
        // SAFETY: the library implements the libibverbs ABI.
        unsafe { Verbs::load_from(&cdylib()) }.expect("dlopen the provider")
    })
}

/// Takes the lock every test of a binary holds: the reorder policy and the fault
/// rules are the loaded provider's, shared by every thread.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

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

/// One side: its connected virtual QP and one buffer registered on each of its
/// devices. Fields drop in order: the virtual QP, then the extra registrations, then
/// the owner of the memory.
pub struct Side {
    pub conn: Box<Conn>,
    /// The buffer's registrations on devices 1.. (over `owner`'s memory).
    extra: Vec<MemoryRegion>,
    /// The buffer, registered on device 0, owning the memory.
    owner: MemoryRegion,
}

impl Side {
    /// Address of byte `off` of the buffer.
    pub fn addr(&self, off: u64) -> u64 {
        self.owner.addr() + off
    }

    /// The buffer's registration on `device`.
    pub fn mr(&self, device: usize) -> &MemoryRegion {
        if device == 0 {
            &self.owner
        } else {
            &self.extra[device - 1]
        }
    }

    /// The buffer, to check once every request on it has completed.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: callers read after the requests touching the buffer completed (or
        // were flushed); the provider writes it only while one is outstanding.
        unsafe { self.owner.as_slice() }.expect("mapped")
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: called before any request is posted on the buffer.
        unsafe { self.owner.as_mut_slice() }.expect("mapped")
    }

    /// The data QPs' states and the asynchronous events their contexts hold, taken
    /// now (see [`Controls::async_events`]).
    pub fn data_qp_events(&self) -> DataQpEvents {
        let vqp = &self.conn.vqp;
        let qps: Vec<_> = (0..vqp.data_qps())
            .map(|i| vqp.data_qp(i).expect("data QP").qp())
            .collect();
        let mut events = Vec::new();
        let mut seen = Vec::new();
        for qp in &qps {
            let ctx = qp.context();
            if !seen.contains(&ctx.as_raw()) {
                seen.push(ctx.as_raw());
                events.extend(controls().async_events(&ctx));
            }
        }
        let per_qp = qps
            .iter()
            .map(|qp| {
                let mine = events
                    .iter()
                    .filter(|&&(_, e)| e == qp.as_raw() as usize)
                    .map(|&(t, _)| t)
                    .collect();
                (qp.state().expect("query QP"), mine)
            })
            .collect();
        let others = events
            .into_iter()
            .filter(|&(_, e)| !qps.iter().any(|qp| qp.as_raw() as usize == e))
            .collect();
        DataQpEvents { per_qp, others }
    }

    /// Polls once, appending completions to `into`.
    pub fn poll(&mut self, into: &mut Vec<Wc>) {
        let mut out = [Wc::EMPTY; 32];
        let c = &mut *self.conn;
        let n = c.vcq.poll(&mut [&mut c.vqp], &mut out).expect("poll");
        into.extend_from_slice(&out[..n]);
    }
}

/// What [`Side::data_qp_events`] found.
pub struct DataQpEvents {
    /// For each data QP: its state and the types of the events raised for it.
    pub per_qp: Vec<(QpState, Vec<u32>)>,
    /// Events about anything else: `(event_type, element)`.
    pub others: Vec<(u32, usize)>,
}

/// Sender `a` and receiver `b`. Each buffer is a write area of `write_len` bytes (A's
/// holds a pattern, B's zeros) followed by a read area of `read_len` (A's zeros, B's
/// another pattern).
pub struct Pair {
    pub mode: Mode,
    pub qps: usize,
    pub devices: usize,
    pub write_len: u64,
    pub a: Side,
    pub b: Side,
}

/// `buf` filled with a pattern that repeats every 4093 bytes (a prime: fragment
/// boundaries never line up with it), from `seed`.
pub fn fill_pattern(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let block: Vec<u8> = (0..4093)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    for chunk in buf.chunks_mut(block.len()) {
        chunk.copy_from_slice(&block[..chunk.len()]);
    }
}

/// A connected pair, `qps` data QPs in `mode` over `devices` (1 or 2) devices per side:
/// A on soft0 (and soft1), B on soft1 (and soft0), so every QP connects across devices.
/// The cards go through their byte form, as over the wire.
pub fn pair(mode: Mode, qps: usize, devices: usize, write_len: u64, read_len: u64) -> Pair {
    assert!((1..=2).contains(&devices));
    let cfg = Config {
        split: SplitPolicy::new(MAX_FRAG),
        max_outstanding: 16,
        recv_depth: 16,
        ..Config::new(mode)
    };
    let settings = Settings::new(cfg, qps);
    let len = (write_len + read_len) as usize;
    let side = |names: &[&str], qp_num: u32| {
        let pds: Vec<_> = names[..devices]
            .iter()
            .map(|n| {
                let ctx = Context::open(verbs(), Some(n)).expect("open device");
                ctx.alloc_pd().expect("pd")
            })
            .collect();
        let settings = Settings {
            config: Config {
                qp_num,
                ..settings.config
            },
            ..settings
        };
        let ep = if devices == 1 {
            Ep::create(&pds[0], &settings, None)
        } else {
            Ep::create_on(&pds.iter().collect::<Vec<_>>(), &settings, &[])
        }
        .expect("endpoint");
        let owner = pds[0]
            .register_buffer(len, AccessFlags::ALL_REMOTE)
            .expect("mr");
        let extra = pds[1..]
            .iter()
            .map(|pd| {
                // SAFETY: `owner`'s memory, which outlives this registration (`Side`
                // drops `extra` before `owner`).
                unsafe { pd.register_raw(owner.as_ptr(), len, AccessFlags::ALL_REMOTE) }
                    .expect("mr")
            })
            .collect();
        (ep, owner, extra)
    };
    let (ea, owner_a, extra_a) = side(&["soft0", "soft1"], 0xa);
    let (eb, owner_b, extra_b) = side(&["soft1", "soft0"], 0xb);
    let wire = |c: Card| Card::decode(&c.to_bytes().expect("encode")).expect("decode");
    let (card_a, card_b) = (wire(ea.card()), wire(eb.card()));
    assert_eq!(card_a.ports.len(), devices);
    let conn_a = ea.connect(&card_b).expect("connect A");
    let conn_b = eb.connect(&card_a).expect("connect B");
    let mut p = Pair {
        mode,
        qps,
        devices,
        write_len,
        a: Side {
            conn: Box::new(conn_a),
            extra: extra_a,
            owner: owner_a,
        },
        b: Side {
            conn: Box::new(conn_b),
            extra: extra_b,
            owner: owner_b,
        },
    };
    let w = write_len as usize;
    fill_pattern(&mut p.a.bytes_mut()[..w], 1);
    fill_pattern(&mut p.b.bytes_mut()[w..], 2);
    p
}

impl Pair {
    /// A's lkey and B's rkey on every device.
    pub fn keys(&self) -> Keys {
        (0..self.devices).fold(Keys::none(), |k, d| {
            k.with(d, self.a.mr(d).lkey(), self.b.mr(d).rkey())
        })
    }

    /// What the receiver's virtual completion of a `len`-byte WRITE_WITH_IMM with
    /// immediate `imm` carries, as vqp-core defines it: `(imm_data, byte_len)`.
    pub fn expected_recv(&self, len: u64, imm: u32) -> (Option<u32>, u64) {
        match (self.mode, self.qps) {
            // One QP: passed through, the physical completion as it is.
            (_, 1) => (Some(imm), len),
            // DQPLB: the immediate carries sequence numbers; the length is the request's.
            (Mode::Dqplb, _) => (None, len),
            // SPRAY: the zero-byte notify carries the user's immediate.
            (Mode::Spray, _) => (Some(imm), 0),
        }
    }
}

/// One request: `op` of `len` bytes at offset `off` of the write area (WRITE, WRITE
/// WITH_IMM: A → B) or of the read area (READ: B → A).
#[derive(Clone, Copy, Debug)]
pub struct Req {
    pub op: Opcode,
    pub len: u64,
    pub off: u64,
    /// Keys to use instead of the pair's.
    pub keys: Option<Keys>,
}

impl Req {
    /// The immediate of request `i` (network order).
    pub fn imm(i: usize) -> u32 {
        (0x5100_0000 | i as u32).to_be()
    }
}

/// Requests of the given ops and sizes laid out one after the other in their areas,
/// 13 untouched bytes apart (so a write past a request's end shows); returns them and
/// the (write, read) area lengths they need.
pub fn layout(ops: &[(Opcode, u64)]) -> (Vec<Req>, u64, u64) {
    let (mut w, mut r) = (0u64, 0u64);
    let reqs = ops
        .iter()
        .map(|&(op, len)| {
            let area = if op == Opcode::RDMA_READ {
                &mut r
            } else {
                &mut w
            };
            let off = *area;
            *area += len + 13;
            Req {
                op,
                len,
                off,
                keys: None,
            }
        })
        .collect();
    (reqs, w, r.max(1))
}

/// What a run reported.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Index after the last request the sender accepted (from 0, including those of
    /// earlier runs).
    pub posted: usize,
    /// Indices of the requests a notification receive was posted for, in order.
    pub recv_for: Vec<usize>,
    /// The sender's completions, in the order reported.
    pub sends: Vec<Wc>,
    /// The receiver's completions, in the order reported.
    pub recvs: Vec<Wc>,
}

/// How long a receiver that is owed receives may stay quiet, once its sender is done,
/// before a run that tolerates it stops waiting. Only how many receives end in success
/// rather than in the shutdown's flush depends on it, and the checks accept both.
pub const SILENCE: Duration = Duration::from_millis(200);

/// How long a run may take before it is declared hung.
pub const DEADLINE: Duration = Duration::from_secs(40);

/// Posts `reqs` in order on A (wr_id = index), each WRITE_WITH_IMM preceded by a
/// notification receive on B (wr_id = index), retrying on backpressure while polling
/// both sides; stops posting when the virtual QP refuses as failed. Returns once every
/// posted request is reported on A and either every receive is reported on B or, with
/// `tolerate_silence`, B has reported nothing for [`SILENCE`] (a failed sender
/// leaves receives that only a shutdown of B ends: see [`shut_down_receiver`]).
/// Panics, with what it saw, if nothing ends it within [`DEADLINE`].
pub fn run(p: &mut Pair, reqs: &[Req], tolerate_silence: bool) -> Outcome {
    run_from(p, reqs, 0, tolerate_silence)
}

/// [`run`] from request `first` on (the earlier ones were run before): `posted`
/// counts from `first`, the completions are those of this run only.
pub fn run_from(p: &mut Pair, reqs: &[Req], first: usize, tolerate_silence: bool) -> Outcome {
    let mut o = Outcome {
        posted: first,
        ..Outcome::default()
    };
    let base_keys = p.keys();
    let deadline = Instant::now() + DEADLINE;
    let mut refused = false;
    let mut last_recv = Instant::now();
    loop {
        while o.posted < reqs.len() && !refused {
            let i = o.posted;
            let r = reqs[i];
            let (local, remote) = if r.op == Opcode::RDMA_READ {
                (p.a.addr(p.write_len + r.off), p.b.addr(p.write_len + r.off))
            } else {
                (p.a.addr(r.off), p.b.addr(r.off))
            };
            let mut wr = SendWr::new(
                i as u64,
                r.op,
                local,
                r.len,
                remote,
                r.keys.unwrap_or(base_keys),
            );
            if r.op == Opcode::RDMA_WRITE_WITH_IMM {
                wr = wr.imm(Req::imm(i));
                if o.recv_for.last() != Some(&i) {
                    match p.b.conn.vqp.post_recv(&RecvWr::notification(i as u64)) {
                        Ok(()) => o.recv_for.push(i),
                        Err(PostRecvError::Full) => break,
                        Err(e) => panic!("receive {i} refused: {e}"),
                    }
                }
            }
            match p.a.conn.vqp.post_send(&wr) {
                Ok(()) => o.posted += 1,
                Err(PostSendError::Full) => break,
                Err(PostSendError::Failed(_)) => refused = true,
                Err(e) => panic!("request {i} refused: {e}"),
            }
        }
        let before = o.recvs.len();
        p.a.poll(&mut o.sends);
        p.b.poll(&mut o.recvs);
        if o.recvs.len() != before {
            last_recv = Instant::now();
        }
        let sender_done = (o.posted == reqs.len() || refused) && o.sends.len() >= o.posted - first;
        if sender_done {
            if o.recvs.len() >= o.recv_for.len() {
                return o;
            }
            if tolerate_silence && last_recv.elapsed() > SILENCE {
                return o;
            }
        }
        assert!(
            Instant::now() < deadline,
            "hung: {} of {} requests posted, {} sends and {} of {} receives reported; \
             sender failure {:?}, receiver failure {:?}",
            o.posted,
            reqs.len(),
            o.sends.len(),
            o.recvs.len(),
            o.recv_for.len(),
            p.a.conn.vqp.failure(),
            p.b.conn.vqp.failure(),
        );
    }
}

/// Shuts B's virtual QP down and polls until every receive it holds is reported
/// (appended to `o.recvs`), within [`DEADLINE`].
pub fn shut_down_receiver(p: &mut Pair, o: &mut Outcome) {
    p.b.conn.vqp.shut_down();
    let deadline = Instant::now() + DEADLINE;
    while o.recvs.len() < o.recv_for.len() {
        p.b.poll(&mut o.recvs);
        assert!(
            Instant::now() < deadline,
            "receiver shutdown hung: {} of {} receives reported",
            o.recvs.len(),
            o.recv_for.len()
        );
    }
}

/// The bytes request `r` read or wrote, on A and on B.
pub fn regions<'a>(p: &'a Pair, r: &Req) -> (&'a [u8], &'a [u8]) {
    let base = if r.op == Opcode::RDMA_READ {
        p.write_len
    } else {
        0
    };
    let range = (base + r.off) as usize..(base + r.off + r.len) as usize;
    (&p.a.bytes()[range.clone()], &p.b.bytes()[range])
}

/// Whether request `r`'s destination holds its source.
pub fn landed(p: &Pair, r: &Req) -> bool {
    let (a, b) = regions(p, r);
    a == b
}

/// Checks a sender completion of request `i` other than its status.
pub fn check_send_fields(p: &Pair, reqs: &[Req], i: usize, wc: &Wc) {
    let what = format!("{:?} {} QPs: send {i}", p.mode, p.qps);
    assert_eq!(wc.wr_id, i as u64, "{what}: reported out of order");
    assert_eq!(wc.opcode, reqs[i].op.completion(), "{what}: opcode");
    assert_eq!(wc.byte_len, reqs[i].len, "{what}: byte_len");
    assert_eq!(wc.qp_num, p.a.conn.vqp.qp_num(), "{what}: qp_num");
    assert_eq!(wc.imm_data, None, "{what}: a send carries no immediate");
}

/// Checks a run in which everything must succeed: every request reported once, in
/// order, successful, with its fields; every receive likewise, with what vqp-core
/// defines for the mode; every destination byte; nothing written between requests;
/// nothing stray, nothing left in flight.
pub fn check_all_ok(p: &Pair, reqs: &[Req], o: &Outcome) {
    let what = format!("{:?} {} QPs over {} devices", p.mode, p.qps, p.devices);
    assert_eq!(o.posted, reqs.len(), "{what}");
    assert_eq!(
        o.sends.len(),
        reqs.len(),
        "{what}: one completion per request"
    );
    for (i, wc) in o.sends.iter().enumerate() {
        check_send_fields(p, reqs, i, wc);
        assert_eq!(
            wc.status,
            WcStatus::SUCCESS,
            "{what}: send {i}: {}",
            wc.status
        );
    }
    assert_eq!(o.recvs.len(), o.recv_for.len(), "{what}: one per receive");
    for (wc, &i) in o.recvs.iter().zip(&o.recv_for) {
        assert_eq!(wc.wr_id, i as u64, "{what}: receives out of order");
        assert_eq!(
            wc.status,
            WcStatus::SUCCESS,
            "{what}: recv {i}: {}",
            wc.status
        );
        assert_eq!(wc.opcode, WcOpcode::RECV_RDMA_WITH_IMM, "{what}: recv {i}");
        assert_eq!(wc.qp_num, p.b.conn.vqp.qp_num(), "{what}: recv {i}");
        assert_eq!(
            (wc.imm_data, wc.byte_len),
            p.expected_recv(reqs[i].len, Req::imm(i)),
            "{what}: recv {i}: (imm_data, byte_len)"
        );
    }
    for (i, r) in reqs.iter().enumerate() {
        assert!(landed(p, r), "{what}: request {i} ({r:?}): data differs");
    }
    check_untouched_gaps(p, reqs);
    for side in [&p.a, &p.b] {
        assert_eq!(side.conn.vcq.strays(), 0, "{what}: stray completions");
        assert_eq!(side.conn.vqp.strays(), 0, "{what}: stray completions");
        assert_eq!(side.conn.vqp.failure(), None, "{what}");
        assert_eq!(side.conn.vqp.sends_in_flight(), 0, "{what}");
        assert_eq!(side.conn.vqp.recvs_in_flight(), 0, "{what}");
    }
}

/// B's write area and A's read area are zero outside the requests' destinations.
pub fn check_untouched_gaps(p: &Pair, reqs: &[Req]) {
    let w = p.write_len as usize;
    let mut b_write = vec![false; w];
    let mut a_read = vec![false; p.a.bytes().len() - w];
    for r in reqs {
        let cover = if r.op == Opcode::RDMA_READ {
            &mut a_read
        } else {
            &mut b_write
        };
        cover[r.off as usize..(r.off + r.len) as usize].fill(true);
    }
    let stray = |bytes: &[u8], cover: &[bool]| {
        bytes
            .iter()
            .zip(cover)
            .position(|(&b, &covered)| !covered && b != 0)
    };
    assert_eq!(
        stray(&p.b.bytes()[..w], &b_write),
        None,
        "B written outside"
    );
    assert_eq!(
        stray(&p.a.bytes()[w..], &a_read),
        None,
        "A read into outside"
    );
}
