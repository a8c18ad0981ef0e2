//! Connected pairs of virtual QPs over one or two devices, with their buffers.

use vqp_core::split::SplitPolicy;
use vqp_core::{Config, Keys, Mode, Wc};
use vqp_host::{AccessFlags, Card, Context, MemoryRegion, QpState, Settings};

use super::{controls, verbs, Conn, Ep, MAX_FRAG};

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
