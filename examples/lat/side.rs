//! The two sides: the verbs library, each side's endpoint and registered buffers, the
//! connection between them, and the write each sends.

use vqp_core::split::SplitPolicy;
use vqp_core::{Config, Keys, Opcode, SendWr};
use vqp_host::{AccessFlags, Context, MemoryRegion, Settings, Verbs};

use crate::args::Args;
use crate::{Ep, Side, DEPTH};

/// The verbs to run on, and a description of where they came from.
pub(crate) fn load_verbs() -> (Verbs, String) {
    if let Some(path) = vqp_softverbs::find_cdylib() {
        // SAFETY: the file is vqp-softverbs' cdylib, built from this workspace, which
        // implements the libibverbs ABI the loader resolves.
        match unsafe { Verbs::load_from(&path) } {
            Ok(v) => return (v, format!("softverbs, dlopen {}", path.display())),
            Err(e) => eprintln!("lat: {e}; using the in-process provider"),
        }
    }
    // SAFETY: the table comes from vqp-softverbs linked into this binary; its functions
    // have libibverbs' prototypes and live as long as the process.
    let v = unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) };
    (v, "softverbs, in-process table".into())
}

/// One side's registered memory: `[0, size)` is what it sends, `[size, 2·size)` what
/// the peer writes.
pub(crate) struct Buffers {
    pub(crate) mr: MemoryRegion,
    pub(crate) size: u64,
}

impl Buffers {
    fn src(&self) -> u64 {
        self.mr.addr()
    }
    fn dst(&self) -> u64 {
        self.mr.addr() + self.size
    }
}

/// Fills `mr`'s first `len` bytes with a pattern of `seed`.
pub(crate) fn fill(mr: &mut MemoryRegion, len: usize, seed: u8) -> Result<(), String> {
    // SAFETY: called before any work request is posted: nothing else reads or writes
    // the region.
    let bytes = unsafe { mr.as_mut_slice() }.ok_or("the buffer is not mapped")?;
    for (i, b) in bytes[..len].iter_mut().enumerate() {
        *b = (i % 251) as u8 ^ seed;
    }
    Ok(())
}

/// Whether `from`'s source half arrived whole in `to`'s destination half.
pub(crate) fn arrived(from: &Buffers, to: &Buffers) -> Result<bool, String> {
    let n = from.size as usize;
    // SAFETY: called after both sides finished: no work request is outstanding, and
    // the peer no longer writes.
    let (a, b) = unsafe { (from.mr.as_slice(), to.mr.as_slice()) };
    let (a, b) = (a.ok_or("not mapped")?, b.ok_or("not mapped")?);
    Ok(a[..n] == b[n..2 * n])
}

/// One side on `device`: its endpoint (not yet connected) and registered buffers.
pub(crate) fn endpoint(
    verbs: &Verbs,
    a: &Args,
    device: &str,
    qp_num: u32,
    seed: u8,
) -> Result<(Ep, Buffers), String> {
    let e = |e: vqp_host::Error| format!("{device}: {e}");
    let ctx = Context::open(verbs, Some(device)).map_err(e)?;
    let pd = ctx.alloc_pd().map_err(e)?;
    let cfg = Config {
        split: SplitPolicy::new(a.max_frag),
        max_outstanding: DEPTH,
        recv_depth: DEPTH,
        qp_num,
        ..Config::new(a.mode)
    };
    let ep = Ep::create(&pd, &Settings::new(cfg, a.qps), None).map_err(e)?;
    let mut mr = pd
        .register_buffer(2 * a.size as usize, AccessFlags::ALL_REMOTE)
        .map_err(e)?;
    fill(&mut mr, a.size as usize, seed)?;
    Ok((ep, Buffers { mr, size: a.size }))
}

/// Opens soft0 and soft1, builds a virtual QP on each with its buffers, and connects
/// them (the cards are swapped in process).
pub(crate) fn connect(verbs: &Verbs, a: &Args) -> Result<[(Side, Buffers); 2], String> {
    let (ep_a, buf_a) = endpoint(verbs, a, "soft0", 1, 0x5a)?;
    let (ep_b, buf_b) = endpoint(verbs, a, "soft1", 2, 0xa5)?;
    let (card_a, card_b) = (ep_a.card(), ep_b.card());
    let side_a = ep_a.connect(&card_b).map_err(|e| e.to_string())?;
    let side_b = ep_b.connect(&card_a).map_err(|e| e.to_string())?;
    Ok([(side_a, buf_a), (side_b, buf_b)])
}

/// The write each side sends: its source half to the peer's destination half.
pub(crate) fn write(own: &Buffers, peer: &Buffers) -> SendWr {
    let keys = Keys::single(own.mr.lkey(), peer.mr.rkey());
    SendWr::new(
        0,
        Opcode::RDMA_WRITE_WITH_IMM,
        own.src(),
        own.size,
        peer.dst(),
        keys,
    )
}
