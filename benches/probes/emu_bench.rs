//! Emulator throughput: `cargo bench -p tasklet-benches --bench emu_bench [-- threads]`.
//! Prints lane-instructions per second and wall time (median of 5) for a 256x256x256 tiled
//! matmul, a 1M-element shared-memory reduction, a 1M-element warp-shuffle reduction and the
//! empty kernel's launch overhead.

use std::time::{Duration, Instant};
use tasklet_ptx::{DeviceMemory, KernelInfo, LaunchParams, LaunchStats, Module};

const MATMUL: &str = include_str!("../../kernels/matmul.ptx");
const REDUCE: &str = include_str!("../../kernels/reduce.ptx");
const FAULTS: &str = include_str!("../../kernels/faults.ptx");

fn args(k: &KernelInfo, vals: &[u64], sizes: &[usize]) -> Vec<u8> {
    let (offs, size) = k.param_layout();
    let mut b = vec![0u8; size as usize];
    for ((o, v), s) in offs.iter().zip(vals).zip(sizes) {
        b[*o as usize..*o as usize + s].copy_from_slice(&v.to_le_bytes()[..*s]);
    }
    b
}

fn kernel<'a>(m: &'a Module, name: &str) -> &'a KernelInfo {
    m.kernels().iter().find(|k| k.name == name).expect("kernel")
}

fn bench(name: &str, reps: usize, mut f: impl FnMut() -> LaunchStats) {
    let mut times = Vec::new();
    let mut stats = LaunchStats::default();
    for _ in 0..reps {
        let t = Instant::now();
        stats = f();
        times.push(t.elapsed());
    }
    times.sort();
    let med: Duration = times[times.len() / 2];
    let rate = stats.lane_instructions as f64 / med.as_secs_f64();
    println!(
        "{name:<34} {:>12} lane-instr  {:>10.3} ms  {:>8.1} M lane-instr/s",
        stats.lane_instructions,
        med.as_secs_f64() * 1e3,
        rate / 1e6
    );
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mem = DeviceMemory::new();
    println!(
        "threads: {} (0 = one per core; this machine has {})",
        threads,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    let m = Module::parse(MATMUL).expect("matmul.ptx");
    let n = 256usize;
    let a: Vec<u8> = (0..n * n)
        .flat_map(|i| ((i % 17) as f32 * 0.25).to_le_bytes())
        .collect();
    let pa = mem.alloc((n * n * 4) as u64).unwrap();
    let pb = mem.alloc((n * n * 4) as u64).unwrap();
    let pc = mem.alloc((n * n * 4) as u64).unwrap();
    mem.write(pa, &a).unwrap();
    mem.write(pb, &a).unwrap();
    let k = kernel(&m, "matmul_tiled");
    let ab = args(
        k,
        &[pa, pb, pc, n as u64, n as u64, n as u64],
        &[8, 8, 8, 4, 4, 4],
    );
    bench("matmul_tiled 256x256x256", 5, || {
        m.launch(
            "matmul_tiled",
            &mem,
            &LaunchParams {
                grid: [16, 16, 1],
                block: [16, 16, 1],
                shared_mem_bytes: 0,
                args: &ab,
                step_limit: u64::MAX,
                threads,
            },
        )
        .unwrap()
    });

    let r = Module::parse(REDUCE).expect("reduce.ptx");
    let len = 1usize << 20;
    let data: Vec<u8> = (0..len)
        .flat_map(|i| ((i % 13) as u32).to_le_bytes())
        .collect();
    let pin = mem.alloc((len * 4) as u64).unwrap();
    mem.write(pin, &data).unwrap();
    let blocks = 256u32;
    let pp = mem.alloc(blocks as u64 * 4).unwrap();
    let ab = args(kernel(&r, "block_sum"), &[pin, pp, len as u64], &[8, 8, 4]);
    bench("block_sum 1M u32 (shared tree)", 5, || {
        r.launch(
            "block_sum",
            &mem,
            &LaunchParams {
                grid: [blocks, 1, 1],
                block: [256, 1, 1],
                shared_mem_bytes: 1024,
                args: &ab,
                step_limit: u64::MAX,
                threads,
            },
        )
        .unwrap()
    });
    let pout = mem.alloc(4).unwrap();
    let ab = args(kernel(&r, "shfl_sum"), &[pin, pout, len as u64], &[8, 8, 4]);
    bench("shfl_sum 1M f32 (warp shuffles)", 5, || {
        r.launch(
            "shfl_sum",
            &mem,
            &LaunchParams {
                grid: [blocks, 1, 1],
                block: [256, 1, 1],
                shared_mem_bytes: 0,
                args: &ab,
                step_limit: u64::MAX,
                threads,
            },
        )
        .unwrap()
    });

    let f = Module::parse(FAULTS).expect("faults.ptx");
    let t = Instant::now();
    let reps = 2000;
    for _ in 0..reps {
        f.launch(
            "empty",
            &mem,
            &LaunchParams {
                grid: [1, 1, 1],
                block: [1, 1, 1],
                shared_mem_bytes: 0,
                args: &[],
                step_limit: 100,
                threads,
            },
        )
        .unwrap();
    }
    println!(
        "{:<34} {:>10.2} us per launch",
        "empty <<<1,1>>>",
        t.elapsed().as_secs_f64() * 1e6 / reps as f64
    );
}
