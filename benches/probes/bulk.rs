//! Bulk transfer bandwidth: guest memory → device and back, through the data region in chunks
//! (`write` / `read`) and zero-copy from a shared guest memory (`write_from` / `read_into`).
//!
//!     cargo bench -p tasklet-benches --bench bulk [-- [emu|cuda] [MiB] [reps] [path/to/worker]]
//!
//! The worker defaults to `tasklet-bench-worker`, built with this bench.
//!
//! Prints the median of `reps` transfers (after one warm-up, which also attaches and, on cuda,
//! page-locks the guest memory) in GB/s. "lift + write" is what a tasklet's `mem-write` cost
//! before guest memories were shared: wasmtime lifts the list into a Vec, then `write`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tasklet_worker::guest_memory::{locate, SharedMemory};
use tasklet_worker::{BackendKind, Worker, WorkerCommand};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let backend = args.next().map_or(BackendKind::Emu, |s| {
        BackendKind::parse(&s).expect("emu or cuda")
    });
    let mib: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(256);
    let reps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(9);
    let program = args.next().map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_tasklet-bench-worker")),
        PathBuf::from,
    );
    let n = mib << 20;
    let cmd = WorkerCommand {
        program,
        args: vec![],
    };
    let mut w = Worker::spawn(
        &cmd,
        backend,
        (2 * n + (64 << 20)) as u64,
        Duration::from_secs(60),
    )
    .expect("spawn worker");
    let info = w.info().expect("info");
    println!(
        "backend {} ({}), {mib} MiB, median of {reps}",
        info.backend, info.device
    );

    let mem = SharedMemory::create(2 * n, 2 * n, 64 << 10).expect("guest memory");
    // SAFETY: the memory's accessible part, used only by this program.
    let guest = unsafe { std::slice::from_raw_parts_mut(mem.as_ptr(), 2 * n) };
    for (i, b) in guest.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(7) ^ (i >> 16) as u8;
    }
    let src = locate(mem.as_ptr(), n).expect("span");
    // SAFETY: only forms the address.
    let dst = locate(unsafe { mem.as_ptr().add(n) }, n).expect("span");
    let dev = w.alloc(n as u64).expect("alloc");

    let time = |f: &mut dyn FnMut()| {
        f();
        median(
            (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    f();
                    t.elapsed()
                })
                .collect(),
        )
    };
    let row = |name: &str, d: Duration| {
        println!(
            "| {name:<28} | {:>9.2} ms | {:>7.2} GB/s |",
            d.as_secs_f64() * 1e3,
            n as f64 / d.as_secs_f64() / 1e9
        )
    };
    println!("| {:<28} | {:>12} | {:>12} |", "op", "median", "bandwidth");
    println!("|{:-<30}|{:-<14}|{:-<14}|", "", "", "");
    // The first use attaches the memory to the worker and (cuda) page-locks what it touches.
    let t = Instant::now();
    w.write_from(dev, &src).expect("write_from");
    row("first write_from (attach)", t.elapsed());
    let mut lifted = vec![0u8; n];
    row(
        "lift + write (before)",
        time(&mut || {
            lifted.copy_from_slice(&guest[..n]);
            w.write(dev, &lifted).expect("write");
        }),
    );
    row(
        "write (data region)",
        time(&mut || w.write(dev, &guest[..n]).expect("write")),
    );
    row(
        "write_from (zero-copy)",
        time(&mut || w.write_from(dev, &src).expect("write_from")),
    );
    row(
        "read (data region)",
        time(&mut || w.read(dev, &mut lifted).expect("read")),
    );
    row(
        "read_into (zero-copy)",
        time(&mut || w.read_into(dev, &dst).expect("read_into")),
    );
    // SAFETY: as above; formed anew because the worker wrote the bytes behind our back.
    let after = unsafe { std::slice::from_raw_parts(mem.as_ptr(), 2 * n) };
    assert!(
        after[n..] == after[..n],
        "read_into brought back different bytes"
    );
    println!("round trip verified");
}
