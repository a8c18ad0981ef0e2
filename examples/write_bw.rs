//! write_bw: a virtual QP moving messages from one endpoint to another, in the
//! spirit of perftest's `ib_write_bw`, with every byte checked on the receiver.
//!
//! Both endpoints run in this process over vqp's deterministic simulated NIC
//! (`vqp-sim`), which really copies the bytes and reorders work across QPs; the
//! bandwidth printed is therefore the engine plus a memory copy, not a fabric.
//!
//! ```text
//! cargo run --release --example write_bw -- --size 1048576 --qps 4 --mode dqplb
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use vqp_core::split::SplitPolicy;
use vqp_core::{
    Config, Keys, Mode, Opcode, PostSendError, RecvWr, SendWr, VirtualCq, VirtualQp, Wc, WcOpcode,
};
use vqp_sim::{Access, Nic, NicConfig, QpCaps, ReorderPolicy, SimCq, SimQp};

type Vqp = VirtualQp<SimQp, 16, 64, 1024, 2048>;
type Vcq = VirtualCq<SimCq, 1, 64>;

#[derive(Clone, Debug)]
struct Args {
    size: u64,
    iters: u64,
    duration: Option<Duration>,
    qps: u32,
    max_frag: u32,
    mode: Mode,
    opcode: Opcode,
    reorder: ReorderPolicy,
    seed: u64,
    json: bool,
}

const USAGE: &str = "usage: write_bw [--size BYTES] [--iters N | --duration SECS] [--qps N]
                [--max-frag BYTES] [--mode spray|dqplb] [--opcode write|write_imm|read]
                [--reorder fifo|random|adversarial] [--seed N] [--json]";

fn parse() -> Result<Args, String> {
    let mut a = Args {
        size: 1 << 20,
        iters: 1000,
        duration: None,
        qps: 4,
        max_frag: 64 << 10,
        mode: Mode::Dqplb,
        opcode: Opcode::RDMA_WRITE_WITH_IMM,
        reorder: ReorderPolicy::Random,
        seed: 1,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--json" {
            a.json = true;
            continue;
        }
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.to_string());
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| -> Result<u64, String> {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: '{v}' is not a whole number"))
        };
        match flag.as_str() {
            "--size" => a.size = num(&value)?,
            "--iters" => a.iters = num(&value)?,
            "--duration" => a.duration = Some(Duration::from_secs(num(&value)?)),
            "--qps" => a.qps = num(&value)? as u32,
            "--max-frag" => a.max_frag = num(&value)?.min(u64::from(u32::MAX)) as u32,
            "--seed" => a.seed = num(&value)?,
            "--mode" => {
                a.mode = match value.as_str() {
                    "spray" => Mode::Spray,
                    "dqplb" => Mode::Dqplb,
                    v => return Err(format!("--mode: '{v}' is not spray or dqplb")),
                }
            }
            "--opcode" => {
                a.opcode = match value.as_str() {
                    "write" => Opcode::RDMA_WRITE,
                    "write_imm" => Opcode::RDMA_WRITE_WITH_IMM,
                    "read" => Opcode::RDMA_READ,
                    v => return Err(format!("--opcode: '{v}' is not write, write_imm or read")),
                }
            }
            "--reorder" => {
                a.reorder = match value.as_str() {
                    "fifo" => ReorderPolicy::Fifo,
                    "random" => ReorderPolicy::Random,
                    "adversarial" => ReorderPolicy::Adversarial,
                    v => {
                        return Err(format!(
                            "--reorder: '{v}' is not fifo, random or adversarial"
                        ))
                    }
                }
            }
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    if a.size == 0 {
        return Err("--size must be at least 1 byte".into());
    }
    if a.size > 1 << 30 {
        return Err("--size above 1 GiB is not supported by the simulated NIC".into());
    }
    if a.qps == 0 || a.qps > 16 {
        return Err("--qps must be between 1 and 16".into());
    }
    if a.iters == 0 {
        return Err("--iters must be at least 1".into());
    }
    Ok(a)
}

struct Side {
    /// Boxed: some hundreds of KB.
    vqp: Box<Vqp>,
    vcq: Vcq,
    buf: u64,
    lkey: u32,
    rkey: u32,
}

fn side(nic: &Nic, a: &Args, qp_num: u32, buf_len: usize) -> Result<Side, String> {
    let cfg = Config {
        mode: a.mode,
        split: SplitPolicy::new(a.max_frag),
        max_outstanding: 64,
        recv_depth: 64,
        qp_num,
        ..Config::new(a.mode)
    };
    let caps = QpCaps {
        max_send_wr: 64,
        max_recv_wr: 64,
    };
    let cq_len = (a.qps as usize + 1) * 128;
    let cq = nic.create_cq(0, cq_len).map_err(|e| e.to_string())?;
    let data: Vec<(SimQp, u8)> = (0..a.qps)
        .map(|_| nic.create_qp(0, &cq, &cq, caps).map(|q| (q, 0)))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let notify = (a.mode == Mode::Spray && a.qps > 1)
        .then(|| nic.create_qp(0, &cq, &cq, caps).map(|q| (q, 0)))
        .transpose()
        .map_err(|e| e.to_string())?;
    let mut vqp = Box::new(Vqp::new(cfg, data, notify).map_err(|e| e.to_string())?);
    let mut vcq = Vcq::new();
    vcq.add_cq(cq, 0, cq_len as u32)
        .map_err(|e| e.to_string())?;
    vcq.attach(&mut *vqp).map_err(|e| e.to_string())?;
    let mr = nic
        .alloc_mr(0, buf_len, Access::ALL)
        .map_err(|e| e.to_string())?;
    Ok(Side {
        vqp,
        vcq,
        buf: mr.addr,
        lkey: mr.lkey,
        rkey: mr.rkey,
    })
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn run(a: &Args) -> Result<(), String> {
    let nic = Nic::new(NicConfig {
        devices: 1,
        seed: a.seed,
        policy: a.reorder,
        ..NicConfig::default()
    });
    let len = a.size as usize;
    let mut tx = side(&nic, a, 1, len)?;
    let mut rx = side(&nic, a, 2, len)?;
    let pairs = (0..a.qps as usize)
        .map(|i| (tx.vqp.data_qp(i), rx.vqp.data_qp(i)))
        .chain([(tx.vqp.notify_qp(), rx.vqp.notify_qp())]);
    for pair in pairs {
        if let (Some(x), Some(y)) = pair {
            nic.connect(x, y).map_err(|e| e.to_string())?;
        }
    }
    rx.vqp.arm_receiver();
    // The read direction moves the receiver's bytes to the sender.
    let (src_addr, dst_addr) = if a.opcode == Opcode::RDMA_READ {
        (rx.buf, tx.buf)
    } else {
        (tx.buf, rx.buf)
    };
    let data = pattern(len, a.seed);
    nic.write(src_addr, &data).map_err(|e| e.to_string())?;
    let keys = Keys::single(tx.lkey, rx.rkey);
    let wr = SendWr::new(0, a.opcode, tx.buf, a.size, rx.buf, keys).imm(0x1234_5678u32.to_be());
    let notified = a.opcode == Opcode::RDMA_WRITE_WITH_IMM;

    let start = Instant::now();
    let deadline = a.duration.map(|d| start + d);
    let (mut posted, mut done, mut received) = (0u64, 0u64, 0u64);
    let mut peak = 0f64;
    let mut window = (Instant::now(), 0u64);
    let mut last_report = Instant::now();
    let mut out = [Wc::EMPTY; 64];
    let target = |posted: u64| match deadline {
        Some(d) => Instant::now() < d,
        None => posted < a.iters,
    };
    loop {
        while target(posted) {
            if notified && rx.vqp.post_recv(&RecvWr::notification(posted)).is_err() {
                break;
            }
            match tx.vqp.post_send(&SendWr {
                wr_id: posted,
                ..wr
            }) {
                Ok(()) => posted += 1,
                Err(PostSendError::Full) => break,
                Err(e) => return Err(format!("post_send: {e}")),
            }
        }
        nic.run_for(256);
        let n = tx
            .vcq
            .poll(&mut [&mut *tx.vqp], &mut out)
            .map_err(|e| format!("poll: {e:?}"))?;
        for wc in &out[..n] {
            if !wc.status.is_ok() {
                return Err(format!("request {} failed: {}", wc.wr_id, wc.status));
            }
            done += 1;
        }
        let n = rx
            .vcq
            .poll(&mut [&mut *rx.vqp], &mut out)
            .map_err(|e| format!("poll: {e:?}"))?;
        for wc in &out[..n] {
            if !wc.status.is_ok() || wc.opcode != WcOpcode::RECV_RDMA_WITH_IMM {
                return Err(format!("notification {} failed: {}", wc.wr_id, wc.status));
            }
            received += 1;
        }
        let now = Instant::now();
        if now.duration_since(window.0) >= Duration::from_millis(100) {
            let rate = (done - window.1) as f64 * a.size as f64
                / now.duration_since(window.0).as_secs_f64();
            peak = peak.max(rate);
            window = (now, done);
        }
        if !a.json && now.duration_since(last_report) >= Duration::from_secs(1) {
            eprintln!(
                "  ... {done} messages, {:.1} MB/s so far",
                done as f64 * a.size as f64 / now.duration_since(start).as_secs_f64() / 1e6
            );
            last_report = now;
        }
        let all_sent = !target(posted) && done == posted;
        if all_sent && (!notified || received == posted) {
            break;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let got = nic.read_vec(dst_addr, len).map_err(|e| e.to_string())?;
    if got != data {
        let at = got.iter().zip(&data).position(|(x, y)| x != y).unwrap_or(0);
        return Err(format!("data check FAILED at byte {at}"));
    }
    let avg = done as f64 * a.size as f64 / elapsed;
    let peak = peak.max(avg);
    let per_qp: Vec<u64> = (0..a.qps as usize)
        .map(|i| tx.vqp.lane_stats(i).map(|s| s.wqes).unwrap_or(0))
        .collect();
    let mode = match a.mode {
        Mode::Spray => "spray",
        Mode::Dqplb => "dqplb",
    };
    if a.json {
        println!(
            "{{\"bytes\":{},\"iterations\":{},\"bw_peak_mb_s\":{:.2},\"bw_avg_mb_s\":{:.2},\"msg_rate_mpps\":{:.6},\"qps\":{},\"mode\":\"{}\",\"fragments_per_qp\":{:?},\"data_check\":\"passed\"}}",
            a.size, done, peak / 1e6, avg / 1e6, done as f64 / elapsed / 1e6, a.qps, mode, per_qp
        );
    } else {
        println!("---------------------------------------------------------------------------------------");
        println!(" vqp write_bw: {} QPs, {mode}, {} fragments of at most {} B, {:?} cross-QP order, simulated NIC",
            a.qps, a.opcode, a.max_frag, a.reorder);
        println!("---------------------------------------------------------------------------------------");
        println!(
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        );
        println!(
            " {:<10} {:<14} {:<18.2} {:<20.2} {:.6}",
            a.size,
            done,
            peak / 1e6,
            avg / 1e6,
            done as f64 / elapsed / 1e6
        );
        println!("---------------------------------------------------------------------------------------");
        for (i, n) in per_qp.iter().enumerate() {
            println!(" data QP {i}: {n} WQEs");
        }
        println!(
            " data check: {} bytes verified on the receiver: passed",
            len
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("write_bw: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("write_bw: {e}");
            ExitCode::from(1)
        }
    }
}
