//! What a host → worker hand-off costs by the size of the ring record: the host posts a frame,
//! a worker thread takes it from the ring and bumps an acknowledgement word on a line of its own,
//! the host spins until it sees that; the round trip is timed. Records are whole cache lines, so
//! frames of 48, 112 and 240 bytes make records of one, two and four lines.
//!
//!     cargo bench -p tasklet-benches --bench ring_lines -- HOST_CPU WORKER_CPU [FRAME_BYTES…]
//!
//! Prints the p10/p50/p90 round trip per frame size, three rounds alternating the sizes. On the
//! H100 machine (Intel Xeon vCPUs, 2026-11-24) one line against two saved ~0.1 µs a round trip
//! on every CPU pair tried (docs/performance.md).

use std::sync::atomic::{AtomicU32, Ordering::*};
use std::sync::Arc;
use std::time::Instant;

use tasklet_worker::contract::channel::{record_size, HostEnd, Incoming, SharedRegion, WorkerEnd};

#[repr(align(128))]
struct Ack(AtomicU32);

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; the calls only read it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut cpu = || args.next().and_then(|a| a.parse::<usize>().ok());
    let (Some(host_cpu), Some(worker_cpu)) = (cpu(), cpu()) else {
        eprintln!("usage: ring_lines HOST_CPU WORKER_CPU [FRAME_BYTES…]");
        std::process::exit(2);
    };
    let mut lens: Vec<usize> = std::iter::from_fn(cpu).collect();
    if lens.is_empty() {
        lens = vec![48, 112, 240];
    }
    const N: u32 = 100_000;
    for round in 0..3 {
        for &len in &lens {
            let host = SharedRegion::create(1 << 20).expect("shared region");
            // SAFETY: dup of an fd we own, mapped again as the worker would.
            let worker =
                SharedRegion::from_fd(unsafe { libc::dup(host.fd()) }).expect("mapping it again");
            let ack = Arc::new(Ack(AtomicU32::new(0)));
            let seen = Arc::clone(&ack);
            let t = std::thread::spawn(move || {
                pin(worker_cpu);
                let mut w = WorkerEnd::new(worker);
                let mut buf = Vec::new();
                let mut k = 0;
                while k < N
                    && w.wait_request(&mut buf, &mut || true, &mut || {}) == Incoming::Posted
                {
                    k += 1;
                    seen.0.store(k, Release);
                }
            });
            pin(host_cpu);
            let mut h = HostEnd::new(host);
            let frame = vec![7u8; len];
            let mut v = Vec::with_capacity(N as usize);
            for i in 1..=N {
                let t0 = Instant::now();
                assert!(
                    h.try_post(&frame).expect("post"),
                    "the ring is never full here"
                );
                while ack.0.load(Acquire) != i {
                    std::hint::spin_loop();
                }
                v.push(t0.elapsed().as_nanos() as u64);
            }
            t.join().expect("worker thread");
            v.sort_unstable();
            let q = |p: f64| v[(v.len() as f64 * p) as usize];
            println!(
                "cpus {host_cpu}->{worker_cpu} round {round}: frame {len:>4} B, record {:>4} B: p10 {:>5} ns  p50 {:>5} ns  p90 {:>5} ns",
                record_size(len),
                q(0.1),
                q(0.5),
                q(0.9)
            );
        }
    }
}
