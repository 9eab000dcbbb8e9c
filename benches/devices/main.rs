//! The two-device benchmark (issue 21, items 3–5): what one device's tenants see of the other
//! device's, and copies on and between two devices, through the host runtime (`LocalGpu`, what a
//! tasklet's calls reach once the sandbox has let them through) on a host that lends both.
//!
//! 1. **Containment**: launch + sync latency of a small kernel on device B, p50 and p99, at rest,
//!    while a kernel that never ends runs on device A (until its deadline kills it and its
//!    worker), and right after a kernel on A faults (while A's pool starts a new worker); then
//!    each device's memory once everything is dropped (the host's books, and on a GPU what NVML
//!    reports), against what it was before. Target: B within 2× of its rest figures.
//! 2. **Bandwidth**: a `MiB`-sized write and read on each device alone, then on both at once
//!    (two threads, one lease each, started together). Target: each device at once ≥ 0.9× alone.
//! 3. **Between devices**: `mem-copy-from` between the two sessions of one group lease (staged
//!    through the host in pieces), beside native cudarc in this process on the same two devices:
//!    `cuMemcpyPeer` with peer access on where the hardware allows, and a copy staged through
//!    pinned host memory (one piece). CUDA only; on the emulator the native side is skipped.
//!
//! ```text
//! cargo bench -p tasklet-benches --bench devices [-- OPTIONS]
//!
//!   --backend emu|cuda  (default: cuda where there is a CUDA device, else emu)
//!   --devices A,B       the two GPUs to lend (default 0,1 where there are two, else 0,0: two
//!                       slots of one GPU); ignored on the emulator (two emulated devices)
//!   --mib N             size of each copy (GPU 256, emu 16)
//!   --reps N            timed copies of each kind (GPU 9, emu 3)
//!   --iters N           launches timed in each latency phase (GPU 2000, emu 50)
//! ```
//!
//! Environment: `TASKLET_TEST_WORKER` (a worker binary; default this package's
//! `tasklet-bench-worker`). Exit status 1: a phase failed (its error is printed).

mod bandwidth;
mod isolation;
mod peer;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::result;
use tasklet_runtime::config::{DeviceSelector, Grant};
use tasklet_runtime::gpu::{GpuService, LeaseId, LeaseRequest, LocalGpu, SessionId};
use tasklet_runtime::{BackendKind, Host, HostConfig, Policy, WorkerCommand};
use tasklet_tests::manifest;

pub const MIB: u64 = 1 << 20;

pub struct Options {
    pub backend: BackendKind,
    pub devices: [u32; 2],
    pub mib: u64,
    pub reps: usize,
    pub iters: usize,
}

const USAGE: &str =
    "usage: devices [--backend emu|cuda] [--devices A,B] [--mib N] [--reps N] [--iters N]";

fn positive(text: &str, name: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(format!("{name}: {text:?} is not a positive number")),
    }
}

fn parse_options(gpus: u32) -> Result<Options, String> {
    let (mut backend, mut devices, mut mib, mut reps, mut iters) = (None, None, None, None, None);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--backend" => {
                let v = value("--backend")?;
                backend = Some(
                    BackendKind::parse(&v)
                        .ok_or_else(|| format!("--backend: {v:?} is not emu or cuda"))?,
                );
            }
            "--devices" => {
                let v = value("--devices")?;
                let list: Vec<u32> = v
                    .split(',')
                    .map(|i| i.trim().parse::<u32>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| format!("--devices: {v:?} is not two GPU indices, A,B"))?;
                devices = Some(
                    <[u32; 2]>::try_from(list)
                        .map_err(|_| format!("--devices: {v:?} is not two GPU indices, A,B"))?,
                );
            }
            "--mib" => mib = Some(positive(&value("--mib")?, "--mib")?),
            "--reps" => reps = Some(positive(&value("--reps")?, "--reps")? as usize),
            "--iters" => iters = Some(positive(&value("--iters")?, "--iters")? as usize),
            // `cargo bench` passes `--bench` to every bench program.
            "--bench" => {}
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let backend = backend.unwrap_or(if gpus > 0 {
        BackendKind::Cuda
    } else {
        BackendKind::Emu
    });
    let gpu = backend == BackendKind::Cuda;
    let devices = devices.unwrap_or(if gpus > 1 { [0, 1] } else { [0, 0] });
    if gpu {
        if let Some(missing) = devices.iter().find(|&&d| d >= gpus) {
            return Err(format!(
                "--devices: GPU {missing} is not here ({gpus} GPU(s))"
            ));
        }
    }
    Ok(Options {
        backend,
        devices,
        mib: mib.unwrap_or(if gpu { 256 } else { 16 }),
        reps: reps.unwrap_or(if gpu { 9 } else { 3 }),
        iters: iters.unwrap_or(if gpu { 2000 } else { 50 }),
    })
}

/// How many CUDA devices this process sees (0 without a driver).
fn cuda_devices() -> u32 {
    if !unsafe { cudarc::driver::sys::is_culib_present() } || result::init().is_err() {
        return 0;
    }
    result::device::get_count().map_or(0, |n| n.max(0) as u32)
}

pub fn worker_command() -> WorkerCommand {
    let program = std::env::var_os("TASKLET_TEST_WORKER").map_or_else(
        || env!("CARGO_BIN_EXE_tasklet-bench-worker").into(),
        Into::into,
    );
    WorkerCommand {
        program,
        args: Vec::new(),
    }
}

/// A host lending two devices, one warm worker each; a kernel's deadline is 2 s, so the
/// runaway of the containment phase is killed after that.
fn start_host(o: &Options) -> Result<Host, String> {
    let mut policy = Policy::default();
    policy.workers.warm = 1;
    policy.workers.max = 4;
    policy.workers.kernel_deadline = Duration::from_secs(2);
    policy.workers.op_timeout = Duration::from_secs(60);
    match o.backend {
        // Room for two copies' buffers and the latency phase's small ones.
        BackendKind::Emu => policy.devices.emu = Some(vec![4 * o.mib * MIB; 2]),
        BackendKind::Cuda => {
            policy.devices.cuda = Some(
                o.devices
                    .iter()
                    .copied()
                    .map(DeviceSelector::Index)
                    .collect(),
            )
        }
    }
    let host = Host::new(HostConfig {
        policy,
        worker: worker_command(),
        backend: o.backend,
    })
    .map_err(|e| e.to_string())?;
    settle(&host);
    Ok(host)
}

/// Waits (20 s at most) until no lease is out and every pool has its warm worker again.
pub fn settle(host: &Host) -> bool {
    let warm = host.policy().workers.warm;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready = host
            .pools()
            .iter()
            .all(|p| p.busy() == 0 && p.idle() >= warm)
            && host.device_usage().iter().all(|u| u.leases == 0);
        if ready {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The probe tasklet's grant, with room for `o`'s copies: two leases of two buffers each, and
/// reads of a whole buffer into the tasklet's memory.
pub fn grant(host: &Host, o: &Options) -> Grant {
    let mut grant = host.policy().grant(&manifest("testing/probe"));
    grant.gpu.max_leases = 4;
    grant.gpu.max_vram = 8 * o.mib * MIB + 64 * MIB;
    grant.limits.memory = 4 * o.mib * MIB + 64 * MIB;
    grant.gpu.max_lease_time = Duration::from_secs(600);
    grant
}

/// A lease of `bytes` on device `index` and a session on it.
pub fn session_on(
    gpu: &mut LocalGpu,
    index: u32,
    bytes: u64,
) -> Result<(LeaseId, SessionId), String> {
    let lease = gpu
        .lease_acquire(LeaseRequest {
            min_vram: bytes,
            secs: 600,
            device: Some(index),
        })
        .map_err(|e| format!("lease on device {index}: {e}"))?;
    let session = gpu
        .session_open(lease)
        .map_err(|e| format!("session on device {index}: {e}"))?;
    Ok((lease, session))
}

pub fn new_gpu(host: &Host, o: &Options) -> LocalGpu {
    LocalGpu::new(grant(host, o), Arc::clone(host.leases()))
}

/// p50 and p99 (nearest rank) of durations, in µs.
pub fn p50_p99(mut v: Vec<Duration>) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    v.sort_unstable();
    let at = |p: f64| {
        let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1].as_secs_f64() * 1e6
    };
    (at(50.0), at(99.0))
}

/// The median of durations.
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

pub fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64().max(1e-12) / 1e9
}

pub fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}

fn cpu() -> String {
    let n = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{}, {n} vCPUs", tasklet_tests::cpu_model())
}

fn main() {
    let gpus = cuda_devices();
    let o = match parse_options(gpus) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("devices: {e}");
            std::process::exit(2);
        }
    };
    println!("# two-device benchmark (issue 21, items 3–5)");
    println!("cpu:      {}", cpu());
    println!(
        "backend:  {}{}",
        o.backend.as_str(),
        match o.backend {
            BackendKind::Emu => ": two emulated devices; the figures are the CPU's, not a GPU's",
            BackendKind::Cuda => "",
        }
    );
    let host = match start_host(&o) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("devices: the host does not start: {e}");
            std::process::exit(1);
        }
    };
    for d in host.devices() {
        println!(
            "device {}: {} {} ({} MiB lent)",
            d.index,
            d.name,
            d.uuid,
            d.total_memory / MIB
        );
    }
    if o.backend == BackendKind::Cuda && o.devices[0] == o.devices[1] {
        println!(
            "note:     both devices are slots of GPU {}: the figures are one GPU's",
            o.devices[0]
        );
    }
    println!(
        "counts:   {} launches a latency phase, {} copies of {} MiB each kind",
        o.iters, o.reps, o.mib
    );
    println!();
    let mut errors = Vec::new();
    for (name, r) in [
        ("containment", isolation::measure(&host, &o)),
        ("bandwidth", bandwidth::measure(&host, &o)),
        ("between devices", peer::measure(&host, &o)),
    ] {
        if let Err(e) = r {
            println!("{name}: error: {e}\n");
            errors.push(format!("{name}: {e}"));
        }
    }
    if !errors.is_empty() {
        println!("errors:");
        for e in &errors {
            println!("  {e}");
        }
        std::process::exit(1);
    }
}
