//! The actor benchmark (issue 20): a persistent kernel's message round trip and batched
//! throughput, beside a launch + sync of the same handler as a normal kernel, on three paths in
//! one run:
//!
//! - guest: a wasm tasklet (gpubench's `actor-rtt`, `actor-batch`, `handler-launch`), timed
//!   inside the guest, its rings behind the sandbox's `ring.send` / `ring.recv`;
//! - host runtime: the same operations on a `LocalGpu` in this process, no wasm (the guest's
//!   figure minus this one is the sandbox's share);
//! - native: cudarc, the same PTX (`kernels/actor.ptx`, `actor_scale`) and the same ring layout
//!   in pinned host memory mapped for the device, polled by this thread (CUDA only).
//!
//! Each path runs the round trips and batches twice: over plain rings (`actor_scale`: the kernel
//! reads the inbox's head, then the slots) and over sequenced rings (`actor_scale_seq`: each
//! word beside its message's number, so the kernel reads the slots alone), and prints the
//! targets for both.
//!
//! Every path: a round trip is one 256-byte message (64 floats) sent and its answer received,
//! one at a time; a batch is `B` messages sent at once and all `B` answers received; the normal
//! kernel is `actor_scale` launched over one message in device memory (its control block asking
//! it to return once the message is handled), timed as launch + sync with the message put
//! before, and as write + launch + read. Prints the machine, a table of medians and p99s, and
//! the ratios issue 20's targets name: round trip ≤ 1.2× the native persistent kernel's and
//! ≤ 0.4× a launch + sync of the handler; ≥ 5 M messages/s batched.
//!
//! With no CUDA device the guest and host-runtime paths run on the emulator (their figures are
//! the emulator's, not a GPU's) and the native path prints `skipped: no CUDA device`.
//!
//! ```text
//! cargo bench -p tasklet-benches --bench actors [-- OPTIONS]
//!
//!   --iters N        round trips, and launches of each normal-kernel loop (GPU 10000, emu 20)
//!   --batch B        messages a batch, 1 to 256 (GPU 256, emu 64)
//!   --batches R      batches timed (GPU 1000, emu 5)
//!   --backend emu|cuda
//!                    the guest and host-runtime paths' backend (default: cuda where there is a
//!                    CUDA device, else emu)
//!   --settle-ms MS   untimed pause in each tasklet command before its timing (GPU 500, emu 0)
//!   --think-ns N     the host-runtime and native paths spin N ns between an answer and the next
//!                    round trip's message, untimed (a client's own work; default 0); the guest
//!                    path's own work between them is its loop's
//! ```
//!
//! The counts may also come from `TASKLET_ACTORS_ITERS`, `TASKLET_ACTORS_BATCH` and
//! `TASKLET_ACTORS_BATCHES` (a flag wins). Each loop runs its count plus 10 untimed; every wait
//! for an answer gives up after 2 s, and every stop after 2 s. Environment as gpu_speed's:
//! `TASKLET_TEST_WORKER`, `TASKLET_REPO`. Exit status 1: a path failed (its error is printed; the
//! table shows what was measured).

mod direct;
mod guest;
mod messages;
mod native;
mod stats;

use std::collections::BTreeMap;

use cudarc::driver::{result, sys};
use tasklet_runtime::BackendKind;

use messages::SLOTS;
use stats::Lines;

#[derive(Debug, Clone)]
pub struct Params {
    pub iters: u32,
    pub batch: u32,
    pub batches: u32,
    pub settle_ms: u64,
    /// How long the host-runtime and native paths spin between one round trip's answer and the
    /// next message (a client's own work between messages; the guest path has none of its own).
    pub think_ns: u64,
}

/// Spins for `ns` nanoseconds (a client's work between two round trips, untimed).
pub fn think(ns: u64) {
    if ns == 0 {
        return;
    }
    let until = std::time::Instant::now() + std::time::Duration::from_nanos(ns);
    while std::time::Instant::now() < until {
        std::hint::spin_loop();
    }
}

struct Options {
    params: Params,
    backend: BackendKind,
}

const USAGE: &str = "usage: actors [--iters N] [--batch B] [--batches R] [--backend emu|cuda] [--settle-ms MS] [--think-ns N]";

/// A count above zero from a flag's value or an environment variable's.
fn count(text: &str, name: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(format!("{name}: {text:?} is not a positive number")),
    }
}

fn parse_options(cuda: bool) -> Result<Options, String> {
    let (mut iters, mut batch, mut batches, mut settle_ms, mut backend) =
        (None, None, None, None, None);
    let mut think_ns = 0;
    for (var, slot) in [
        ("TASKLET_ACTORS_ITERS", &mut iters),
        ("TASKLET_ACTORS_BATCH", &mut batch),
        ("TASKLET_ACTORS_BATCHES", &mut batches),
    ] {
        if let Ok(v) = std::env::var(var) {
            *slot = Some(count(&v, var)?);
        }
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--iters" => iters = Some(count(&value("--iters")?, "--iters")?),
            "--batch" => batch = Some(count(&value("--batch")?, "--batch")?),
            "--batches" => batches = Some(count(&value("--batches")?, "--batches")?),
            "--settle-ms" => {
                let v = value("--settle-ms")?;
                settle_ms = Some(
                    v.parse::<u64>()
                        .map_err(|_| format!("--settle-ms: {v:?} is not a number"))?,
                );
            }
            "--think-ns" => {
                let v = value("--think-ns")?;
                think_ns = v
                    .parse::<u64>()
                    .map_err(|_| format!("--think-ns: {v:?} is not a number"))?;
            }
            "--backend" => {
                let v = value("--backend")?;
                backend = Some(
                    BackendKind::parse(&v)
                        .ok_or_else(|| format!("--backend: {v:?} is not emu or cuda"))?,
                );
            }
            // `cargo bench` passes `--bench` to every bench program.
            "--bench" => {}
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let backend = backend.unwrap_or(if cuda {
        BackendKind::Cuda
    } else {
        BackendKind::Emu
    });
    // The emulator runs a kernel on the CPU: counts a GPU finishes in a second take it minutes.
    let gpu = backend == BackendKind::Cuda;
    let batch = batch.unwrap_or(if gpu { 256 } else { 64 });
    if batch > SLOTS {
        return Err(format!(
            "--batch: a batch is at most the rings' {SLOTS} slots; {batch} asked"
        ));
    }
    Ok(Options {
        params: Params {
            iters: iters.unwrap_or(if gpu { 10_000 } else { 20 }),
            batch,
            batches: batches.unwrap_or(if gpu { 1000 } else { 5 }),
            settle_ms: settle_ms.unwrap_or(if gpu { 500 } else { 0 }),
            think_ns,
        },
        backend,
    })
}

/// The first CUDA device's name and compute capability, or why there is none.
fn probe_cuda() -> Result<String, String> {
    if !unsafe { sys::is_culib_present() } {
        return Err("libcuda is not installed".into());
    }
    result::init().map_err(|e| format!("cuInit: {e}"))?;
    let count = result::device::get_count().map_err(|e| format!("cuDeviceGetCount: {e}"))?;
    if count < 1 {
        return Err("no device".into());
    }
    let dev = result::device::get(0).map_err(|e| e.to_string())?;
    let name = result::device::get_name(dev).map_err(|e| e.to_string())?;
    let attr = |a| unsafe { result::device::get_attribute(dev, a) }.unwrap_or(-1);
    let (major, minor) = (
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    );
    Ok(format!("{name} (compute {major}.{minor})"))
}

fn cpu() -> String {
    let n = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{}, {n} vCPUs", tasklet_tests::cpu_model())
}

/// The figures of the three paths.
#[derive(Default)]
struct Figures {
    paths: BTreeMap<&'static str, BTreeMap<String, f64>>,
    errors: Vec<String>,
}

const GUEST: &str = "guest";
const DIRECT: &str = "direct";
const NATIVE: &str = "native";

impl Figures {
    fn record(&mut self, path: &'static str, r: Result<Lines, String>) {
        match r {
            Ok(lines) => {
                for (name, v) in &lines {
                    println!("  {path:<7} {name} {v}");
                }
                self.paths.entry(path).or_default().extend(lines);
            }
            Err(e) => {
                println!("  {path:<7} error: {e}");
                self.errors.push(format!("{path}: {e}"));
            }
        }
    }

    fn get(&self, path: &str, name: &str) -> Option<f64> {
        self.paths
            .get(path)?
            .get(name)
            .copied()
            .filter(|v| v.is_finite())
    }
}

fn main() {
    let cuda = probe_cuda();
    let opts = match parse_options(cuda.is_ok()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("actors: {e}");
            std::process::exit(2);
        }
    };
    let p = &opts.params;
    println!("# actor benchmark (issue 20)");
    match &cuda {
        Ok(gpu) => println!("gpu:      {gpu}"),
        Err(why) => println!("gpu:      none ({why})"),
    }
    println!("cpu:      {}", cpu());
    println!(
        "backend:  {} (guest and host runtime){}",
        opts.backend.as_str(),
        if opts.backend == BackendKind::Emu {
            ": the PTX emulator on the CPU; its figures are not a GPU's"
        } else {
            ""
        }
    );
    println!(
        "counts:   {} round trips, {} batches of {} messages, {} launches of each normal-kernel loop (+10 untimed each)",
        p.iters, p.batches, p.batch, p.iters
    );
    if p.think_ns > 0 {
        println!(
            "think:    the host-runtime and native paths spin {} ns before each round trip's message",
            p.think_ns
        );
    }
    println!();

    let mut f = Figures::default();
    match guest::start_host(opts.backend) {
        Ok(host) => {
            f.record(DIRECT, direct::measure(&host, p));
            guest::settle(&host);
            f.record(GUEST, guest::measure(&host, p));
        }
        Err(e) => f.errors.push(format!("host: cannot start: {e}")),
    }
    match &cuda {
        Ok(_) => f.record(NATIVE, native::measure(p)),
        Err(why) => println!("  native  skipped: no CUDA device ({why})"),
    }
    println!();
    print!("{}", table(&f, p));
    println!();
    print!("{}", targets(&f, p, cuda.is_ok()));
    if !f.errors.is_empty() {
        println!();
        println!("errors:");
        for e in &f.errors {
            println!("  {e}");
        }
        std::process::exit(1);
    }
}

fn micros(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), |v| format!("{:.2} µs", v / 1e3))
}

fn rate(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), |v| format!("{:.3} M/s", v / 1e6))
}

/// How a row's figure is shown.
type Show = fn(Option<f64>) -> String;

fn table(f: &Figures, p: &Params) -> String {
    let batch = format!("batch of {} sent, all answered", p.batch);
    let rows: [(String, &str, Show); 13] = [
        (
            "round trip (send 1, receive 1), p50".into(),
            "actor_rtt_ns",
            micros,
        ),
        ("round trip, p99".into(), "actor_rtt_p99_ns", micros),
        (format!("{batch}, p50"), "actor_batch_ns", micros),
        (format!("{batch}, p99"), "actor_batch_p99_ns", micros),
        ("messages/s batched".into(), "actor_msgs_per_s", rate),
        (
            "sequenced rings: round trip, p50".into(),
            "seq_actor_rtt_ns",
            micros,
        ),
        (
            "sequenced rings: round trip, p99".into(),
            "seq_actor_rtt_p99_ns",
            micros,
        ),
        (
            format!("sequenced rings: {batch}, p50"),
            "seq_actor_batch_ns",
            micros,
        ),
        (
            format!("sequenced rings: {batch}, p99"),
            "seq_actor_batch_p99_ns",
            micros,
        ),
        (
            "sequenced rings: messages/s batched".into(),
            "seq_actor_msgs_per_s",
            rate,
        ),
        (
            "handler as a normal kernel: launch + sync, p50".into(),
            "handler_launch_sync_ns",
            micros,
        ),
        (
            "handler as a normal kernel: launch + sync, p99".into(),
            "handler_launch_sync_p99_ns",
            micros,
        ),
        (
            "handler as a normal kernel: write + launch + read, p50".into(),
            "handler_rtt_ns",
            micros,
        ),
    ];
    let mut s = String::from(
        "| operation | guest (wasm tasklet) | host runtime (LocalGpu, no wasm) | native cudarc | guest ÷ native |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    for (label, key, show) in rows {
        let (g, d, n) = (f.get(GUEST, key), f.get(DIRECT, key), f.get(NATIVE, key));
        let ratio = match (g, n) {
            (Some(g), Some(n)) if n > 0.0 => format!("{:.2}×", g / n),
            _ => "—".into(),
        };
        s += &format!(
            "| {label} | {} | {} | {} | {ratio} |\n",
            show(g),
            show(d),
            show(n)
        );
    }
    s
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "n/a",
    }
}

fn targets(f: &Figures, p: &Params, cuda: bool) -> String {
    let mut s = String::new();
    for (rings, prefix) in [
        ("plain rings (actor_scale)", ""),
        ("sequenced rings (actor_scale_seq)", "seq_"),
    ] {
        s += &ring_targets(f, p, cuda, rings, prefix);
    }
    if !cuda {
        s += "  (emulator figures: the targets are for a GPU)\n";
    }
    s
}

/// The targets for one kind of ring, from its figures (names after `prefix`).
fn ring_targets(f: &Figures, p: &Params, cuda: bool, rings: &str, prefix: &str) -> String {
    let key = |name: &str| format!("{prefix}{name}");
    let rtt = f.get(GUEST, &key("actor_rtt_ns"));
    let mut s = format!("targets (issue 20), guest figures, {rings}:\n");
    let native = f.get(NATIVE, &key("actor_rtt_ns"));
    let vs_native = rtt.zip(native).map(|(g, n)| g / n);
    s += &format!(
        "  round trip ÷ native persistent kernel's: {} (target ≤ 1.2×): {}{}\n",
        vs_native.map_or_else(|| "—".into(), |x| format!("{x:.2}×")),
        verdict(vs_native.map(|x| x <= 1.2)),
        if cuda {
            ""
        } else {
            " (native skipped: no CUDA device)"
        }
    );
    let launch = f.get(GUEST, "handler_launch_sync_ns");
    let vs_launch = rtt.zip(launch).map(|(r, l)| r / l);
    s += &format!(
        "  round trip ÷ launch + sync of the same handler: {} (target ≤ 0.4×): {}\n",
        vs_launch.map_or_else(|| "—".into(), |x| format!("{x:.2}×")),
        verdict(vs_launch.map(|x| x <= 0.4)),
    );
    let msgs = f.get(GUEST, &key("actor_msgs_per_s"));
    s += &format!(
        "  messages/s, batches of {}: {} (target ≥ 5 M/s): {}\n",
        p.batch,
        rate(msgs),
        verdict(msgs.map(|m| m >= 5e6)),
    );
    if let (Some(g), Some(d)) = (rtt, f.get(DIRECT, &key("actor_rtt_ns"))) {
        s += &format!(
            "  the sandbox's share of a round trip (guest − host runtime): {:.2} µs of {:.2} µs\n",
            (g - d) / 1e3,
            g / 1e3
        );
    }
    s
}
