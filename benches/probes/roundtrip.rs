//! Host→worker→host round-trip latency through the real spawn path and shared-memory channel.
//!
//!     cargo bench -p tasklet-benches --bench roundtrip [-- [path/to/worker] [iterations]]
//!
//! The worker defaults to `tasklet-bench-worker`, built with this bench.
//!
//! Prints medians (and p90/p99) of: a ping on the device-less null backend (pure IPC), a ping on
//! the emu backend, alloc + write 4 KiB + read 4 KiB + free on the emu backend, and a launch of
//! the `empty` kernel on the emu backend: launch + sync each time, and posted launches back to
//! back (appended to the request ring while the worker runs earlier ones; one sync at the end,
//! and 1000 posted launches + one sync, per launch: the throughput of a burst). Where a CUDA
//! device is present, the ping and launch rows again on the cuda backend.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tasklet_worker::{BackendKind, LoadedModule, Worker, WorkerCommand};

/// Compiled in, so the program runs from any directory (e.g. copied to a GPU machine).
const FAULTS_PTX: &str = include_str!("../../kernels/faults.ptx");

fn stats(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    (at(0.5), at(0.9), at(0.99))
}

fn row(name: &str, v: Vec<Duration>) {
    let n = v.len();
    let (p50, p90, p99) = stats(v);
    println!("| {name:<44} | {n:>7} | {p50:>9.2} | {p90:>9.2} | {p99:>9.2} |");
}

fn time(iters: usize, mut f: impl FnMut()) -> Vec<Duration> {
    for _ in 0..iters / 10 {
        f();
    }
    (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let program = args.next().map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_tasklet-bench-worker")),
        PathBuf::from,
    );
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let cmd = |null: bool| WorkerCommand {
        program: program.clone(),
        args: if null {
            vec!["--null-backend".into()]
        } else {
            vec![]
        },
    };
    let timeout = Duration::from_secs(10);

    println!(
        "| {:<44} | {:>7} | {:>9} | {:>9} | {:>9} |",
        "op", "n", "p50 µs", "p90 µs", "p99 µs"
    );
    println!(
        "|{:-<46}|{:-<9}|{:-<11}|{:-<11}|{:-<11}|",
        "", "", "", "", ""
    );

    let mut w =
        Worker::spawn(&cmd(true), BackendKind::Emu, 1 << 30, timeout).expect("spawn null worker");
    row(
        "ping (null backend: IPC only)",
        time(iters, || w.ping().expect("ping")),
    );
    drop(w);

    let mut w = match Worker::spawn(&cmd(false), BackendKind::Emu, 1 << 30, timeout) {
        Ok(w) => w,
        Err(e) => {
            println!("emu backend unavailable: {e}");
            return;
        }
    };
    row(
        "ping (emu backend)",
        time(iters, || w.ping().expect("ping")),
    );
    let data = vec![0xa5u8; 4096];
    let mut back = vec![0u8; 4096];
    let r = time(iters / 4, || {
        let a = w.alloc(4096).expect("alloc");
        w.write(a, &data).expect("write");
        w.read(a, &mut back).expect("read");
        w.free(a).expect("free");
    });
    assert_eq!(back, data);
    row("alloc + write 4 KiB + read 4 KiB + free (emu)", r);
    let a = w.alloc(4096).expect("alloc");
    row(
        "write 4 KiB (emu)",
        time(iters / 4, || w.write(a, &data).expect("write")),
    );
    row(
        "read 4 KiB (emu)",
        time(iters / 4, || w.read(a, &mut back).expect("read")),
    );
    launch_rows(&mut w, iters / 4, "emu");
    drop(w);

    // The same on the cuda backend, where there is a device: the hand-off's share of a launch.
    match Worker::spawn(&cmd(false), BackendKind::Cuda, 1 << 30, timeout) {
        Ok(mut w) => {
            row(
                "ping (cuda backend)",
                time(iters, || w.ping().expect("ping")),
            );
            launch_rows(&mut w, iters / 4, "cuda");
        }
        Err(e) => println!("skipped: no CUDA device ({e})"),
    }

    if std::env::var_os("ROUNDTRIP_EMU_RATE").is_some() {
        for cfg in [(1u32, 1u32), (1, 32), (8, 256)] {
            let mut w =
                Worker::spawn(&cmd(false), BackendKind::Emu, 1 << 30, timeout).expect("spawn");
            emu_rate(&mut w, cfg);
        }
    }
}

/// How fast the emulator runs a spinning kernel, to check `EMU_LANE_INSTRUCTIONS_PER_SECOND`
/// (which turns launch deadlines into step limits).
fn emu_rate(w: &mut Worker, (grid, block): (u32, u32)) {
    let m = w.load_module(FAULTS_PTX).expect("load faults.ptx");
    let flag = w.alloc(4).expect("alloc");
    {
        let deadline = Duration::from_millis(500);
        let t = Instant::now();
        let r = w.launch(&tasklet_worker::Launch {
            module: m.id,
            kernel: kernel_index(&m, "spin_forever"),
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            shared_mem_bytes: 0,
            args: &flag.to_le_bytes(),
            deadline,
        });
        let took = t.elapsed();
        let how = if w.is_lost() {
            "host timer killed it"
        } else {
            "step limit"
        };
        // The step limit the worker made of the deadline (its cores are this machine's).
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let steps = tasklet_worker::worker::backend::emu_step_limit(deadline, cores) as f64;
        let rate = steps / took.as_secs_f64() / 1e6;
        let bound = if w.is_lost() { "<" } else { "≈" };
        println!("spin_forever grid {grid} block {block}, deadline {deadline:?}: {:?} after {took:?} ({how}); {bound} {rate:.0} M lane-instructions/s",
            r.err().and_then(|e| e.kind()));
    }
}

/// The index launches name kernel `name` of `m` by.
fn kernel_index(m: &LoadedModule, name: &str) -> u32 {
    let i = m.kernels.iter().position(|k| k.name == name);
    i.unwrap_or_else(|| panic!("no kernel `{name}`")) as u32
}

/// Launch of `empty` (1 thread) on `backend`: synchronous (launch + sync) and posted.
fn launch_rows(w: &mut Worker, iters: usize, backend: &str) {
    let m = w.load_module(FAULTS_PTX).expect("load faults.ptx");
    let l = tasklet_worker::Launch {
        module: m.id,
        kernel: kernel_index(&m, "empty"),
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
        args: &[],
        deadline: Duration::from_secs(10),
    };
    row(
        &format!("launch empty + sync ({backend})"),
        time(iters, || {
            w.launch(&l).expect("launch");
            w.sync().expect("sync");
        }),
    );
    let posted = time(iters, || w.launch(&l).expect("launch"));
    w.sync().expect("sync");
    row(
        &format!("launch empty back to back, per launch ({backend})"),
        posted,
    );
    // With host work between launches (what a tasklet does between them): a posted launch
    // overlaps the kernel with it, a synchronous one adds the two.
    let busy = |d: Duration| {
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    };
    let work = Duration::from_micros(5);
    row(
        &format!("launch empty + 5 µs host work ({backend})"),
        time(iters, || {
            w.launch(&l).expect("launch");
            busy(work);
        }),
    );
    w.sync().expect("sync");
    // Throughput: `n` posted launches then one sync, per launch.
    let n = 1000u32;
    let samples = (0..(iters / n as usize).max(5))
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                w.launch(&l).expect("launch");
            }
            w.sync().expect("sync");
            t.elapsed() / n
        })
        .collect();
    row(
        &format!("1000 posted launches + sync, per launch ({backend})"),
        samples,
    );
}
