//! What the sandbox costs per GPU call: a tasklet making N host-only calls (`lease.info`), N calls
//! that reach its worker process (`sync` on an idle session), and N 4 KiB write+read pairs; beside
//! them, the same worker round trip made directly from the host without wasm.
//!
//! Run: `cargo bench -p tasklet-benches --bench mediation [-- N]`. Prints medians in µs.

use std::time::Instant;
use tasklet_tests::{host_with, load, manifest, run_ok, test_policy};
use tasklet_worker::Pool;

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    let host = host_with(test_policy(), env!("CARGO_BIN_EXE_tasklet-bench-worker"));
    let probe = load(&host, manifest("testing/probe"));
    run_ok(&host, &probe, "bench 1000"); // warm-up: page in code, settle the worker
    let out = run_ok(&host, &probe, &format!("bench {n}"));
    let field = |name: &str| -> f64 {
        out.lines()
            .find_map(|l| {
                l.strip_prefix(name)
                    .map(|v| v.trim().parse::<f64>().unwrap_or(f64::NAN))
            })
            .unwrap_or(f64::NAN)
            / 1000.0
    };
    let (info, sync, rw) = (field("info_ns"), field("sync_ns"), field("rw4k_ns"));
    let direct = direct_round_trip(host.pool(), n);

    println!("tasklet mediation, {n} calls each, medians of 100-call batches");
    println!("{:<44} {:>10}", "operation", "µs/call");
    println!("{:<44} {:>10.3}", "lease.info (host only)", info);
    println!("{:<44} {:>10.3}", "session.sync (reaches the worker)", sync);
    println!(
        "{:<44} {:>10.3}",
        "worker ping from the host, no wasm", direct
    );
    println!("{:<44} {:>10.3}", "mem-write 4 KiB + mem-read 4 KiB", rw);
    println!(
        "sandbox cost of a worker round trip: {:.3} µs ({:.2}x direct)",
        sync - direct,
        sync / direct
    );
}

fn direct_round_trip(pool: &std::sync::Arc<Pool>, n: usize) -> f64 {
    let mut worker = pool.acquire().expect("a worker");
    let mut batches = Vec::with_capacity(n / 100 + 1);
    for _ in 0..(n / 100).max(1) {
        let t = Instant::now();
        for _ in 0..100 {
            worker.ping().expect("ping");
        }
        batches.push(t.elapsed().as_secs_f64() * 1e6 / 100.0);
    }
    pool.release(worker);
    batches.sort_by(|a, b| a.total_cmp(b));
    batches[batches.len() / 2]
}
