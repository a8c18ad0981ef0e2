//! quickstart: one 1 MiB RDMA_WRITE_WITH_IMM over a virtual QP of 4 data QPs.
//!
//! Both sides live in this process, on the two devices of the software provider linked
//! into this binary, so it runs anywhere. On a real NIC, take `Verbs::load()` (it opens
//! `libibverbs.so.1`) and send the cards over TCP with `vqp::host::exchange`.
//!
//! ```text
//! cargo run --example quickstart
//! ```

use std::error::Error;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use vqp::core::{Config, Keys, Mode, Opcode, RecvWr, SendWr, Wc};
use vqp::host::{AccessFlags, Context, Endpoint, Settings};

const LEN: usize = 1 << 20;

fn run() -> Result<String, Box<dyn Error>> {
    // The software provider linked in; on a real NIC: `Verbs::load()?` (libibverbs.so.1).
    let verbs = vqp::softverbs::verbs();
    let (ctx_a, ctx_b) = (
        Context::open(&verbs, Some("soft0"))?,
        Context::open(&verbs, Some("soft1"))?,
    );
    let (pd_a, pd_b) = (ctx_a.alloc_pd()?, ctx_b.alloc_pd()?);

    // One virtual QP per side: 4 data QPs, DQPLB, 64 KiB fragments (Config's default).
    let settings = Settings::new(Config::new(Mode::Dqplb), 4);
    let a: Endpoint = Endpoint::create(&pd_a, &settings, None)?;
    let b: Endpoint = Endpoint::create(&pd_b, &settings, None)?;
    // Swap cards (between hosts: vqp::host::exchange over TCP), then connect.
    let (card_a, card_b) = (a.card(), b.card());
    let mut a = a.connect(&card_b)?;
    let mut b = b.connect(&card_a)?;

    let mut src = pd_a.register_buffer(LEN, AccessFlags::ALL_REMOTE)?;
    let dst = pd_b.register_buffer(LEN, AccessFlags::ALL_REMOTE)?;
    // SAFETY: no work request uses `src` yet.
    let bytes = unsafe { src.as_mut_slice() }.ok_or("source not mapped")?;
    for (i, x) in bytes.iter_mut().enumerate() {
        *x = (i % 251) as u8;
    }

    // B: a notification receive completes once the whole message has landed.
    b.vqp.post_recv(&RecvWr::notification(1))?;
    // A: one 1 MiB write, cut into 16 fragments of 64 KiB over the 4 data QPs.
    let keys = Keys::single(src.lkey(), dst.rkey());
    let wr = SendWr::new(
        7,
        Opcode::RDMA_WRITE_WITH_IMM,
        src.addr(),
        LEN as u64,
        dst.addr(),
        keys,
    );
    a.vqp.post_send(&wr)?;

    // Poll both virtual CQs: one completion per request, whatever the fragments did.
    let (mut sent, mut landed) = (None, None);
    let mut out = [Wc::EMPTY; 4];
    let deadline = Instant::now() + Duration::from_secs(10);
    while sent.is_none() || landed.is_none() {
        let polled = |e: vqp::core::PollFailure| format!("poll failed: errno {}", e.errno);
        if a.vcq.poll(&mut [&mut a.vqp], &mut out).map_err(polled)? > 0 {
            sent = Some(out[0]);
        }
        if b.vcq.poll(&mut [&mut b.vqp], &mut out).map_err(polled)? > 0 {
            landed = Some(out[0]);
        }
        if Instant::now() > deadline {
            return Err("no completion within 10 s".into());
        }
    }
    for wc in sent.iter().chain(&landed) {
        if !wc.status.is_ok() {
            return Err(format!("request {} failed: {}", wc.wr_id, wc.status).into());
        }
    }

    // SAFETY: both requests completed; nothing writes the buffers any more.
    let (sent_bytes, landed_bytes) = unsafe { (src.as_slice(), dst.as_slice()) };
    if sent_bytes.is_none() || sent_bytes != landed_bytes {
        return Err("the destination differs from the source".into());
    }
    let per_qp: Vec<u64> = (0..4)
        .filter_map(|i| a.vqp.lane_stats(i))
        .map(|s| s.wqes)
        .collect();
    Ok(format!("{LEN} bytes soft0 -> soft1, fragments per data QP {per_qp:?}, one completion per side, data verified"))
}

fn main() -> ExitCode {
    match run() {
        Ok(line) => {
            println!("quickstart: {line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}
