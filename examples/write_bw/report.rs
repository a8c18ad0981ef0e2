//! What the client measured, the progress line, and the table (perftest's columns;
//! MB is 2^20 bytes, as perftest counts it) or one JSON object.

use std::time::{Duration, Instant};

/// MB as perftest reports it.
const MB: f64 = (1u64 << 20) as f64;
/// The window over which the peak rate is taken.
const WINDOW: Duration = Duration::from_millis(100);

/// The sender's figures.
pub struct Measured {
    /// Messages completed and checked by their receiver.
    pub iters: u64,
    /// From the first post until the last message was completed and checked.
    pub elapsed: Duration,
    /// The best rate over any 100 ms window (bytes per second), at least the average.
    pub peak: f64,
    /// Send WQEs (fragments) each data QP carried.
    pub per_qp: Vec<u64>,
    /// The bytes those WQEs carried.
    pub bytes_per_qp: Vec<u64>,
    /// Each data QP's weight at the end (see `VirtualQp::weight`).
    pub weights: Vec<u64>,
    /// What the virtual QP survived, with `--failover`.
    pub failover: Option<vqp_core::Failover>,
    /// WQEs the SPRAY notify QP carried, when there is one.
    pub notify: Option<u64>,
    /// Stopped early by Ctrl-C (here or at the server).
    pub interrupted: bool,
    /// The rate (bytes per second) in each `SLICE` of the run, from its start.
    pub timeline: Vec<f64>,
}

/// The timeline's resolution: fine enough to see a striping policy adapt.
pub const SLICE: Duration = Duration::from_millis(50);

impl Measured {
    pub fn avg(&self, size: u64) -> f64 {
        self.iters as f64 * size as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn mpps(&self) -> f64 {
        self.iters as f64 / self.elapsed.as_secs_f64().max(1e-9) / 1e6
    }
}

/// Peak-rate windows and the once-a-second progress line on stderr.
pub struct Progress {
    start: Instant,
    size: u64,
    print: bool,
    window: (Instant, u64),
    peak: f64,
    last_line: Instant,
    /// Messages done when each `SLICE` began (the first tick in it).
    marks: Vec<u64>,
}

impl Progress {
    pub fn new(start: Instant, size: u64, print: bool) -> Self {
        Progress {
            start,
            size,
            print,
            window: (start, 0),
            peak: 0.0,
            last_line: start,
            marks: vec![0],
        }
    }

    /// The rate in each whole `SLICE` so far (bytes per second); a slice with no tick
    /// in it shares the next one's messages.
    pub fn timeline(&self) -> Vec<f64> {
        let secs = SLICE.as_secs_f64();
        self.marks
            .windows(2)
            .map(|w| (w[1] - w[0]) as f64 * self.size as f64 / secs)
            .collect()
    }

    pub fn tick(&mut self, now: Instant, done: u64) {
        let slice = (now.duration_since(self.start).as_nanos() / SLICE.as_nanos()) as usize;
        while self.marks.len() <= slice {
            self.marks.push(done);
        }
        let span = now.duration_since(self.window.0);
        if span >= WINDOW {
            let rate = (done - self.window.1) as f64 * self.size as f64 / span.as_secs_f64();
            self.peak = self.peak.max(rate);
            self.window = (now, done);
        }
        if self.print && now.duration_since(self.last_line) >= Duration::from_secs(1) {
            let secs = now.duration_since(self.start).as_secs_f64();
            eprintln!(
                "  ... {done} messages in {secs:.1} s, {:.2} MB/sec so far",
                done as f64 * self.size as f64 / secs / MB
            );
            self.last_line = now;
        }
    }

    pub fn peak(&self, elapsed: Duration, done: u64) -> f64 {
        let avg = done as f64 * self.size as f64 / elapsed.as_secs_f64().max(1e-9);
        self.peak.max(avg)
    }
}

const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// The data check's one line.
pub fn check_line(messages: u64, size: u64, place: &str) -> String {
    format!(" data check: {messages} messages x {size} bytes, every byte verified {place}: passed")
}

/// The device of each data QP (`i mod devices`), for the per-QP lines; nothing to say
/// when there is one device.
fn qp_device(devices: &[String], i: usize) -> String {
    if devices.len() > 1 {
        format!(" ({})", devices[i % devices.len()])
    } else {
        String::new()
    }
}

/// perftest's table, the per-QP WQE counts (with each QP's device when the client uses
/// several) and the data check line.
pub fn print_table(header: &str, size: u64, m: &Measured, check: &str, devices: &[String]) {
    println!("{RULE}");
    println!(" {header}");
    if m.interrupted {
        println!(" interrupted: partial results");
    }
    println!("{RULE}");
    println!(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]");
    println!(
        " {:<10} {:<14} {:<18.2} {:<20.2} {:.6}",
        size,
        m.iters,
        m.peak / MB,
        m.avg(size) / MB,
        m.mpps()
    );
    println!("{RULE}");
    for (i, (n, b)) in m.per_qp.iter().zip(&m.bytes_per_qp).enumerate() {
        println!(" data QP {i}{}: {n} WQEs, {b} bytes", qp_device(devices, i));
    }
    if devices.len() > 1 {
        let per_device = per_device(&m.bytes_per_qp, devices.len());
        let all: u64 = per_device.iter().sum();
        for (d, b) in devices.iter().zip(&per_device) {
            let share = if all == 0 {
                0.0
            } else {
                100.0 * *b as f64 / all as f64
            };
            println!(" device {d}: {b} bytes ({share:.1}%)");
        }
    }
    if let Some(n) = m.notify {
        println!(" notify QP: {n} WQEs");
    }
    if let Some(f) = m.failover {
        println!(
            " failover: {} QP failures survived (data and notify QPs), {} fragments posted again, {} restored; {} of {} data QPs healthy",
            f.failovers,
            f.redispatched,
            f.restored,
            f.healthy,
            m.per_qp.len()
        );
    }
    println!("{check}");
}

/// Per-QP counts summed per device (data QP i is on device i mod `devices`).
fn per_device(per_qp: &[u64], devices: usize) -> Vec<u64> {
    let k = devices.max(1);
    let mut sums = vec![0u64; k];
    for (i, n) in per_qp.iter().enumerate() {
        sums[i % k] += n;
    }
    sums
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A value of the JSON object's leading fields.
pub enum Json<'a> {
    Str(&'a str),
    Num(u64),
}

/// The same as one JSON object on one line (with the client's devices and the WQEs
/// each carried).
pub fn print_json(
    fields: &[(&str, Json<'_>)],
    size: u64,
    m: &Measured,
    verified_on: &str,
    devices: &[String],
) {
    let mut s = String::from("{");
    for (k, v) in fields {
        let v = match v {
            Json::Str(t) => json_str(t),
            Json::Num(n) => n.to_string(),
        };
        s.push_str(&format!("{}:{v},", json_str(k)));
    }
    s.push_str(&format!(
        "\"bytes\":{size},\"iterations\":{},\"seconds\":{:.6},\"bw_peak_mb_s\":{:.2},\"bw_avg_mb_s\":{:.2},\"msg_rate_mpps\":{:.6},\"wqes_per_qp\":{:?},\"notify_wqes\":{},\"interrupted\":{},\"data_check\":\"passed\",\"verified_on\":{}}}",
        m.iters,
        m.elapsed.as_secs_f64(),
        m.peak / MB,
        m.avg(size) / MB,
        m.mpps(),
        m.per_qp,
        m.notify.map_or("null".to_string(), |n| n.to_string()),
        m.interrupted,
        json_str(verified_on),
    ));
    s.pop();
    if let Some(f) = m.failover {
        s.push_str(&format!(
            ",\"failovers\":{},\"redispatched\":{},\"restored\":{},\"healthy_qps\":{}}}",
            f.failovers, f.redispatched, f.restored, f.healthy
        ));
        s.pop();
    }
    let timeline: Vec<String> = m
        .timeline
        .iter()
        .map(|r| format!("{:.1}", r / MB))
        .collect();
    s.push_str(&format!(
        ",\"slice_ms\":{},\"timeline_mb_s\":[{}]}}",
        SLICE.as_millis(),
        timeline.join(",")
    ));
    s.pop();
    let k = devices.len().max(1);
    let names: Vec<String> = devices.iter().map(|d| json_str(d)).collect();
    s.push_str(&format!(
        ",\"bytes_per_qp\":{:?},\"weights_per_qp\":{:?},\"devices\":[{}],\"wqes_per_device\":{:?},\"bytes_per_device\":{:?}}}",
        m.bytes_per_qp,
        m.weights,
        names.join(","),
        per_device(&m.per_qp, k),
        per_device(&m.bytes_per_qp, k),
    ));
    println!("{s}");
}
