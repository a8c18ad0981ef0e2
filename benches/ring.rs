//! The SPSC ring against the queues it replaces, in one criterion run.
//!
//! Groups (one function per implementation, per-item throughput everywhere):
//! * `single_thread_u64`: push one `u64`, pop it, on one thread.
//! * `batch32_u64`: push 32 `u64`s, pop 32, on one thread, through each queue's batch API
//!   where it has one (`push_slice`/`pop_slice`, rtrb's entire-slice copies).
//!   Both single-thread groups time a plain loop over handles held in the timing
//!   function's frame (`iter_custom`), see [`timed`].
//! * `two_threads_u64`, `two_threads_64B`: a producer and a consumer pinned to different
//!   cores stream items through a 1024-slot queue; the time is the consumer's, from the
//!   moment both threads leave a barrier to the last item popped.
//!
//! After the criterion groups, a side-by-side run ([`side_by_side`]) streams a fixed
//! number of items through vqp's ring and rtrb's, alternating between the two, many times
//! over, and prints the median time per item of each and of their per-trial ratio. On a
//! small VM the two-thread figures swing by several times from one second to the next
//! (how the host places the two virtual CPUs, other guests, other processes), and
//! criterion times one queue after the other, so a single criterion run compares
//! different machines; interleaved trials see the same ones. It runs unless a filter is
//! given that names neither `two_threads` nor `side_by_side`.
//!
//! `cargo bench --bench ring -- --warm-up-time 1 --measurement-time 3`

use std::hint::{black_box, spin_loop};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkGroup, Criterion, Throughput};
use crossbeam_queue::ArrayQueue;
use vqp::core::ring::Ring;

/// Slots in every queue (heapless keeps one of them empty).
const CAP: usize = 1024;
/// Items per batch in `batch32_u64`.
const BATCH: usize = 32;

/// An item the streaming benches can number and check.
trait Numbered: Copy + Send + 'static {
    fn new(seq: u64) -> Self;
    fn seq(&self) -> u64;
}

impl Numbered for u64 {
    fn new(seq: u64) -> Self {
        seq
    }
    fn seq(&self) -> u64 {
        *self
    }
}

/// A cache-line-sized item, like a work request descriptor.
#[derive(Clone, Copy)]
struct Item64([u64; 8]);

impl Numbered for Item64 {
    fn new(seq: u64) -> Self {
        Self([seq; 8])
    }
    fn seq(&self) -> u64 {
        self.0[7]
    }
}

/// Times `iters` rounds of `round` on one thread. The queue's handles are made by
/// `make` outside the timed part and live in this frame, as they would in a poll loop;
/// captured by reference in a `b.iter` closure instead, every index would round-trip
/// through memory between rounds and the harness, not the queue, would set the pace.
fn timed<H>(iters: u64, make: impl FnOnce() -> H, mut round: impl FnMut(&mut H, u64)) -> Duration {
    let mut handles = make();
    let start = Instant::now();
    for i in 0..iters {
        round(&mut handles, i);
    }
    start.elapsed()
}

fn single_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("single_thread_u64");
    g.throughput(Throughput::Elements(1));

    g.bench_function("vqp", |b| {
        let mut ring = Box::new(Ring::<u64, CAP>::new());
        b.iter_custom(|iters| {
            timed(
                iters,
                || ring.split(),
                |(tx, rx), i| {
                    tx.push(black_box(i)).unwrap();
                    black_box(rx.pop().unwrap());
                },
            )
        });
    });
    g.bench_function("heapless", |b| {
        let mut queue = Box::new(heapless::spsc::Queue::<u64, CAP>::new());
        b.iter_custom(|iters| {
            timed(
                iters,
                || queue.split(),
                |(tx, rx), i| {
                    tx.enqueue(black_box(i)).unwrap();
                    black_box(rx.dequeue().unwrap());
                },
            )
        });
    });
    g.bench_function("rtrb", |b| {
        b.iter_custom(|iters| {
            timed(
                iters,
                || rtrb::RingBuffer::<u64>::new(CAP),
                |(tx, rx), i| {
                    tx.push(black_box(i)).unwrap();
                    black_box(rx.pop().unwrap());
                },
            )
        });
    });
    g.bench_function("crossbeam_ArrayQueue", |b| {
        b.iter_custom(|iters| {
            timed(
                iters,
                || ArrayQueue::<u64>::new(CAP),
                |queue, i| {
                    queue.push(black_box(i)).unwrap();
                    black_box(queue.pop().unwrap());
                },
            )
        });
    });
    g.finish();
}

fn batched(c: &mut Criterion) {
    let mut g = c.benchmark_group("batch32_u64");
    g.throughput(Throughput::Elements(BATCH as u64));
    let src: [u64; BATCH] = core::array::from_fn(|i| i as u64);
    let mut dst = [0u64; BATCH];

    g.bench_function("vqp", |b| {
        let mut ring = Box::new(Ring::<u64, CAP>::new());
        b.iter_custom(|iters| {
            timed(
                iters,
                || ring.split(),
                |(tx, rx), _| {
                    let pushed = tx.push_slice(black_box(&src));
                    let popped = rx.pop_slice(black_box(&mut dst));
                    assert_eq!(pushed, popped);
                },
            )
        });
    });
    g.bench_function("heapless", |b| {
        let mut queue = Box::new(heapless::spsc::Queue::<u64, CAP>::new());
        b.iter_custom(|iters| {
            timed(
                iters,
                || queue.split(),
                |(tx, rx), _| {
                    for &v in black_box(&src) {
                        tx.enqueue(v).unwrap();
                    }
                    for d in black_box(&mut dst).iter_mut() {
                        *d = rx.dequeue().unwrap();
                    }
                },
            )
        });
    });
    g.bench_function("rtrb", |b| {
        b.iter_custom(|iters| {
            timed(
                iters,
                || rtrb::RingBuffer::<u64>::new(CAP),
                |(tx, rx), _| {
                    tx.push_entire_slice(black_box(&src)).unwrap();
                    rx.pop_entire_slice(black_box(&mut dst)).unwrap();
                },
            )
        });
    });
    g.bench_function("crossbeam_ArrayQueue", |b| {
        b.iter_custom(|iters| {
            timed(
                iters,
                || ArrayQueue::<u64>::new(CAP),
                |queue, _| {
                    for &v in black_box(&src) {
                        queue.push(v).unwrap();
                    }
                    for d in black_box(&mut dst).iter_mut() {
                        *d = queue.pop().unwrap();
                    }
                },
            )
        });
    });
    g.finish();
    black_box(dst);
}

/// Streams `iters` items from a producer pinned to the first core to a consumer pinned
/// to the second, and returns the consumer's time from the barrier to the last item.
/// `push` hands a refused item back; `pop` returns `None` when the queue is empty. The
/// consumer checks every item's number, as a real one would read what it pops, and then
/// spends `work` steps of a dependent multiply chain on it (0 for the criterion groups).
fn stream<T, Tx, Rx>(
    iters: u64,
    mut tx: Tx,
    mut rx: Rx,
    push: impl Fn(&mut Tx, T) -> Result<(), T> + Sync,
    pop: impl Fn(&mut Rx) -> Option<T> + Sync,
    work: u32,
) -> Duration
where
    T: Numbered,
    Tx: Send,
    Rx: Send,
{
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let (producer_core, consumer_core) = match cores.as_slice() {
        [a, b, ..] => (Some(*a), Some(*b)),
        _ => (None, None),
    };
    let barrier = Barrier::new(2);
    let (barrier, push, pop) = (&barrier, &push, &pop);
    thread::scope(|s| {
        // `move`: each handle lives on its own thread's stack, as in a real program, not
        // side by side (and sharing a cache line) on this one.
        let producer = s.spawn(move || {
            if let Some(core) = producer_core {
                core_affinity::set_for_current(core);
            }
            barrier.wait();
            for i in 0..iters {
                let mut item = T::new(i);
                while let Err(back) = push(&mut tx, item) {
                    item = back;
                    spin_loop();
                }
            }
        });
        let consumer = s.spawn(move || {
            if let Some(core) = consumer_core {
                core_affinity::set_for_current(core);
            }
            barrier.wait();
            let start = Instant::now();
            for i in 0..iters {
                loop {
                    if let Some(item) = pop(&mut rx) {
                        assert_eq!(item.seq(), i, "items arrived out of order");
                        busy(item.seq(), work);
                        break;
                    }
                    spin_loop();
                }
            }
            start.elapsed()
        });
        producer.join().unwrap();
        consumer.join().unwrap()
    })
}

/// A dependent chain of `steps` multiplies on `seed`, standing for what a consumer does
/// with an item; `black_box` keeps the compiler from folding it. No steps, no code.
#[inline(always)]
fn busy(seed: u64, steps: u32) {
    let mut x = seed;
    for _ in 0..steps {
        x = black_box(x.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
}

/// Streams `iters` items of type `T` through vqp's ring.
fn stream_vqp<T: Numbered>(iters: u64, work: u32) -> Duration {
    let (tx, rx) = Ring::try_split(Arc::new(Ring::<T, CAP>::new())).unwrap();
    stream(
        iters,
        tx,
        rx,
        |tx, v| tx.push(v).map_err(|e| e.into_inner()),
        |rx| rx.pop().ok(),
        work,
    )
}

/// Streams `iters` items of type `T` through rtrb's ring.
fn stream_rtrb<T: Numbered>(iters: u64, work: u32) -> Duration {
    let (tx, rx) = rtrb::RingBuffer::<T>::new(CAP);
    stream(
        iters,
        tx,
        rx,
        |tx, v| {
            tx.push(v).map_err(|e| match e {
                rtrb::PushError::Full(v) => v,
            })
        },
        |rx| rx.pop().ok(),
        work,
    )
}

fn two_threads_of<T>(g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>)
where
    T: Numbered,
{
    g.throughput(Throughput::Elements(1));
    g.bench_function("vqp", |b| b.iter_custom(|iters| stream_vqp::<T>(iters, 0)));
    g.bench_function("heapless", |b| {
        b.iter_custom(|iters| {
            let mut queue = Box::new(heapless::spsc::Queue::<T, CAP>::new());
            let (tx, rx) = queue.split();
            stream(iters, tx, rx, |tx, v| tx.enqueue(v), |rx| rx.dequeue(), 0)
        });
    });
    g.bench_function("rtrb", |b| {
        b.iter_custom(|iters| stream_rtrb::<T>(iters, 0))
    });
    g.bench_function("crossbeam_ArrayQueue", |b| {
        b.iter_custom(|iters| {
            let queue = ArrayQueue::<T>::new(CAP);
            stream(iters, &queue, &queue, |q, v| q.push(v), |q| q.pop(), 0)
        });
    });
}

fn two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("two_threads_u64");
    two_threads_of::<u64>(&mut g);
    g.finish();
    let mut g = c.benchmark_group("two_threads_64B");
    two_threads_of::<Item64>(&mut g);
    g.finish();
}

/// Trials of each queue per case in [`side_by_side`].
const TRIALS: usize = 61;

/// One case of [`side_by_side`]: a name, the items streamed per trial, the consumer's
/// work per item ([`busy`] steps), and how to run one trial of each queue.
struct Case {
    name: &'static str,
    items: u64,
    work: u32,
    vqp: fn(u64, u32) -> Duration,
    rtrb: fn(u64, u32) -> Duration,
}

/// vqp's ring and rtrb's, interleaved: each trial streams the same number of items
/// through one and then the other, the order swapping every trial, and the medians are
/// printed. `quick` (when the binary runs as a test) makes one tiny trial per case.
///
/// Besides the two criterion cases, one where the consumer spends a while on every item
/// (a poll thread posting a request, say), so that the ring runs full and the producer
/// waits for slots: the regime that handing slots back in batches is for.
fn side_by_side(quick: bool) {
    let cases = [
        Case {
            name: "two_threads_u64",
            items: 2_000_000,
            work: 0,
            vqp: stream_vqp::<u64>,
            rtrb: stream_rtrb::<u64>,
        },
        Case {
            name: "two_threads_64B",
            items: 1_000_000,
            work: 0,
            vqp: stream_vqp::<Item64>,
            rtrb: stream_rtrb::<Item64>,
        },
        Case {
            name: "two_threads_u64, busy consumer",
            items: 500_000,
            work: 16,
            vqp: stream_vqp::<u64>,
            rtrb: stream_rtrb::<u64>,
        },
    ];
    let trials = if quick { 1 } else { TRIALS };
    println!(
        "side_by_side: vqp and rtrb in interleaved trials, {trials} of each; ns per item, \
         median [quartiles]"
    );
    for case in &cases {
        let items = if quick { 1000 } else { case.items };
        let per_item = |d: Duration| d.as_secs_f64() * 1e9 / items as f64;
        let mut vqp = Vec::with_capacity(trials);
        let mut rtrb = Vec::with_capacity(trials);
        for trial in 0..trials {
            if trial % 2 == 0 {
                vqp.push(per_item((case.vqp)(items, case.work)));
                rtrb.push(per_item((case.rtrb)(items, case.work)));
            } else {
                rtrb.push(per_item((case.rtrb)(items, case.work)));
                vqp.push(per_item((case.vqp)(items, case.work)));
            }
        }
        let mut ratio: Vec<f64> = vqp.iter().zip(&rtrb).map(|(v, r)| v / r).collect();
        let wins = ratio.iter().filter(|&&r| r < 1.0).count();
        let [v, r, q] = [&mut vqp, &mut rtrb, &mut ratio].map(|x| quartiles(x));
        println!(
            "  {:31} ({} items): vqp {:.2} [{:.2} {:.2}]  rtrb {:.2} [{:.2} {:.2}]  \
             vqp/rtrb {:.3} [{:.3} {:.3}], vqp faster in {wins}/{trials}",
            case.name, items, v[1], v[0], v[2], r[1], r[0], r[2], q[1], q[0], q[2]
        );
    }
}

/// The lower quartile, median and upper quartile of `values` (sorted in place).
fn quartiles(values: &mut [f64]) -> [f64; 3] {
    values.sort_by(f64::total_cmp);
    let at = |q: usize| values[(values.len() - 1) * q / 4];
    [at(1), at(2), at(3)]
}

/// Whether to run [`side_by_side`] (`Some(quick)`), from the arguments criterion gets:
/// not when listing benchmarks, quickly without `--bench` (run as a test), and not when a
/// filter is given that names neither `two_threads` nor `side_by_side`.
fn side_by_side_mode() -> Option<bool> {
    /// Criterion's options that take a value, so that the value is not read as a filter.
    const VALUED: &[&str] = &[
        "--warm-up-time",
        "--measurement-time",
        "--sample-size",
        "--nresamples",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--save-baseline",
        "-s",
        "--baseline",
        "-b",
        "--baseline-lenient",
        "--load-baseline",
        "--profile-time",
        "--output-format",
        "--plotting-backend",
        "--color",
        "-c",
        "--format",
    ];
    let mut bench = false;
    let mut filter = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--list" => return None,
            "--bench" => bench = true,
            a if VALUED.contains(&a) => {
                args.next();
            }
            a if a.starts_with('-') => {}
            _ => filter = Some(arg),
        }
    }
    match filter {
        Some(f) if !f.contains("two_threads") && !f.contains("side_by_side") => None,
        _ => Some(!bench),
    }
}

criterion_group!(benches, single_thread, batched, two_threads);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if let Some(quick) = side_by_side_mode() {
        side_by_side(quick);
    }
}
