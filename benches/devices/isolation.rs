//! Containment between devices: device B's launch + sync latency at rest, while device A runs a
//! kernel that never ends (killed at its deadline with its worker), and right after a kernel on
//! A faults; then both devices' memory against what it was before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tasklet_runtime::gpu::{
    BufferId, GpuService, KernelArg, LaunchConfig, LocalGpu, ModuleId, SessionId,
};
use tasklet_runtime::{BackendKind, Host};

use crate::{new_gpu, p50_p99, session_on, settle, verdict, worker_command, Options, MIB};

const IOTA_PTX: &str = include_str!("../../kernels/iota.ptx");
const FAULTS_PTX: &str = include_str!("../../kernels/faults.ptx");
const ONE_BLOCK: LaunchConfig = LaunchConfig {
    grid: [1, 1, 1],
    block: [64, 1, 1],
    shared_mem_bytes: 0,
};
/// How far above its first reading a device's memory may settle (a killed worker's context is
/// freed by the driver a little after the process is gone; allocator rounding).
const MEMORY_SLACK: u64 = 64 * MIB;

/// Device B's healthy tenant: iota over 64 words, launched and synced.
struct Probe {
    gpu: LocalGpu,
    session: SessionId,
    module: ModuleId,
    out: BufferId,
}

impl Probe {
    fn launch_sync(&mut self) -> Result<Duration, String> {
        let args = [
            KernelArg::Buffer {
                buffer: self.out,
                offset: 0,
            },
            KernelArg::U32(64),
        ];
        let t = Instant::now();
        self.gpu
            .launch(self.session, self.module, "iota", &ONE_BLOCK, &args)
            .and_then(|()| self.gpu.sync(self.session))
            .map_err(|e| format!("launch + sync on device B: {e}"))?;
        Ok(t.elapsed())
    }

    /// `n` launch + sync times.
    fn times(&mut self, n: usize) -> Result<Vec<Duration>, String> {
        (0..n).map(|_| self.launch_sync()).collect()
    }

    /// Launch + sync times while `busy` holds (at most `n`, and at least one).
    fn times_while(&mut self, busy: &AtomicBool, n: usize) -> Result<Vec<Duration>, String> {
        let mut v = Vec::with_capacity(n);
        while v.is_empty() || (busy.load(Ordering::Acquire) && v.len() < n) {
            v.push(self.launch_sync()?);
        }
        Ok(v)
    }
}

/// Each device's memory in use as NVML reports it (read by a worker, as the host reads it), or
/// the host's books on the emulator.
pub fn memory_in_use(host: &Host) -> Result<Vec<u64>, String> {
    if host
        .devices()
        .iter()
        .all(|d| d.backend == BackendKind::Emu.as_str())
    {
        return Ok(host.device_usage().iter().map(|u| u.used_bytes).collect());
    }
    let inventory =
        tasklet_worker::nvml::inventory_via_worker(&worker_command(), Duration::from_secs(30))?;
    host.devices()
        .iter()
        .map(|d| {
            inventory
                .gpus
                .iter()
                .find(|g| tasklet_worker::nvml::same_uuid(&g.uuid, &d.uuid))
                .map(|g| g.memory_used)
                .ok_or_else(|| format!("NVML lists no GPU {}", d.uuid))
        })
        .collect()
}

/// Runs `f` (device A's trouble) on a thread of its own while device B's probe times launches;
/// returns B's times and what `f` said.
fn beside<F>(probe: &mut Probe, n: usize, f: F) -> Result<(Vec<Duration>, String), String>
where
    F: FnOnce() -> String + Send,
{
    let busy = AtomicBool::new(true);
    std::thread::scope(|s| {
        let trouble = s.spawn(|| {
            let said = f();
            busy.store(false, Ordering::Release);
            said
        });
        let times = probe.times_while(&busy, n);
        let said = trouble.join().unwrap_or_else(|_| "panicked".into());
        times.map(|t| (t, said))
    })
}

pub fn measure(host: &Host, o: &Options) -> Result<(), String> {
    let (a, b) = (0u32, 1u32);
    println!("## containment: device B's launch + sync while device A misbehaves");
    let before = memory_in_use(host)?;
    let mut gpu = new_gpu(host, o);
    let (_, session) = session_on(&mut gpu, b, 4 * MIB)?;
    let module = gpu
        .module_load(session, IOTA_PTX)
        .map_err(|e| format!("loading iota.ptx: {e}"))?;
    let out = gpu
        .mem_alloc(session, 256)
        .map_err(|e| format!("alloc: {e}"))?;
    let mut probe = Probe {
        gpu,
        session,
        module,
        out,
    };
    probe.times(o.iters / 10 + 10)?;
    let rest = probe.times(o.iters)?;

    // A kernel that spins until its deadline: the launch returns, the sync waits for the kill.
    let runaway = || {
        let mut g = new_gpu(host, o);
        let r = (|| {
            let (_, s) = session_on(&mut g, a, 4 * MIB)?;
            let m = g.module_load(s, FAULTS_PTX).map_err(|e| e.to_string())?;
            let flag = g.mem_alloc(s, 4).map_err(|e| e.to_string())?;
            let args = [KernelArg::Buffer {
                buffer: flag,
                offset: 0,
            }];
            let t = Instant::now();
            let e = g
                .launch(s, m, "spin_forever", &ONE_BLOCK, &args)
                .and_then(|()| g.sync(s))
                .err()
                .map_or("no error".into(), |e| e.name().to_string());
            Ok::<_, String>(format!("{e} after {:.2} s", t.elapsed().as_secs_f64()))
        })();
        r.unwrap_or_else(|e| format!("error: {e}"))
    };
    let (spinning, spin_said) = beside(&mut probe, o.iters, runaway)?;

    // A kernel that writes 1 TiB past its buffer: it faults, its worker is replaced.
    let fault = || {
        let mut g = new_gpu(host, o);
        let r = (|| {
            let (_, s) = session_on(&mut g, a, 4 * MIB)?;
            let m = g.module_load(s, FAULTS_PTX).map_err(|e| e.to_string())?;
            let flag = g.mem_alloc(s, 4).map_err(|e| e.to_string())?;
            let args = [
                KernelArg::Buffer {
                    buffer: flag,
                    offset: 0,
                },
                KernelArg::U64(1 << 40),
            ];
            let e = g
                .launch(s, m, "write_out_of_bounds", &ONE_BLOCK, &args)
                .and_then(|()| g.sync(s))
                .err()
                .map_or("no error".into(), |e| e.name().to_string());
            Ok::<_, String>(e)
        })();
        r.unwrap_or_else(|e| format!("error: {e}"))
    };
    let (_, fault_said) = beside(&mut probe, o.iters, fault)?;
    // Right after: device A's pool starts a worker in place of the faulted one.
    let after_fault = probe.times(o.iters)?;
    drop(probe);

    let settled = settle(host);
    let mut after = memory_in_use(host)?;
    // A killed worker's context is freed a little after its process is gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    while after
        .iter()
        .zip(&before)
        .any(|(n, b)| *n > b + MEMORY_SLACK)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(200));
        after = memory_in_use(host)?;
    }

    let (r50, r99) = p50_p99(rest);
    println!("device A's runaway kernel: {spin_said}; device A's faulting kernel: {fault_said}");
    println!("| device B, launch + sync | p50 | p99 | p50 ÷ rest | p99 ÷ rest | samples |");
    println!("| --- | --- | --- | --- | --- | --- |");
    println!(
        "| at rest | {r50:.2} µs | {r99:.2} µs | 1.00× | 1.00× | {} |",
        o.iters
    );
    let mut worst: f64 = 1.0;
    for (label, v) in [
        ("A runs a kernel that never ends", spinning),
        (
            "right after a fault on A (A's worker replaced)",
            after_fault,
        ),
    ] {
        let n = v.len();
        let (p50, p99) = p50_p99(v);
        worst = worst.max(p50 / r50).max(p99 / r99);
        println!(
            "| {label} | {p50:.2} µs | {p99:.2} µs | {:.2}× | {:.2}× | {n} |",
            p50 / r50,
            p99 / r99
        );
    }
    let mut within = settled;
    println!("| memory in use | before | after |");
    println!("| --- | --- | --- |");
    for (i, (b, n)) in before.iter().zip(&after).enumerate() {
        within &= *n <= b + MEMORY_SLACK;
        println!("| device {i} | {} MiB | {} MiB |", b / MIB, n / MIB);
    }
    let accounted = host
        .device_usage()
        .iter()
        .all(|u| u.leases == 0 && u.granted_bytes == 0);
    println!(
        "target: device B within 2× of rest (p50 and p99): worst {worst:.2}×: {}",
        verdict(worst <= 2.0)
    );
    println!(
        "target: memory back to baseline (each device within {} MiB, books at zero, pools warm): {}",
        MEMORY_SLACK / MIB,
        verdict(within && accounted)
    );
    println!();
    Ok(())
}
