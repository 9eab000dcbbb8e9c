//! The speed benchmark: the same kernels and transfers, in one process run, natively through
//! cudarc and through a tasklet (`tasklets/testing/gpubench`) on the `cuda` backend, and, where
//! `python3 -c 'import cupy'` works, through CuPy (`benches/cupy_peer.py`) as the peer a Python
//! user would pick. Prints the machine, then a Markdown table of medians, ratios and targets
//! (docs/performance.md says how to read it and where the numbers go).
//!
//! Operations: empty-kernel launch + sync; async launches (N, then one sync; per launch); a burst
//! of N launches in one call (native: N launches), then one sync; replay of a K-kernel graph +
//! sync (native: the same graph instantiated once), beside K launches + sync; 4 KiB
//! write + read + sync; 256 MiB write and read (native and CuPy: pinned and pageable host memory;
//! tasklet: from a guest `Vec` and into a guest buffer in place, and a read returning a new list); lease acquire from the warm pool (tasklet only: p50, p99);
//! loading a PTX module that is already loaded.
//!
//! Native and tasklet measurements take turns per operation (A/B, B/A in the next round), CuPy
//! runs once per round, and the table shows the median over rounds of each round's figure. They
//! never overlap: the bench process (native) and the worker processes (tasklet) each hold a CUDA
//! context on the same GPU, and only one of them works at a time; after each tasklet command the
//! bench waits for the worker pool to settle.
//!
//! ```text
//! cargo bench -p tasklet-benches --bench gpu_speed [-- OPTIONS]
//! target/release/deps/gpu_speed-<hash> [OPTIONS]      (prebuilt; see docs/performance.md)
//!
//!   --rounds R        rounds of A/B measurements (default 5)
//!   --quick           a short run: 2 rounds, small counts, 64 MiB transfers
//!   --bulk-bytes B    bytes of the bulk transfers (default 268435456)
//!   --settle-ms MS    untimed pause inside each tasklet command between its lease and its timing,
//!                     for the replacement worker the lease starts (default 500)
//!   --no-cupy         leave out the CuPy column
//!   --only OPS        measure only these operations (comma-separated gpubench command names:
//!                     launch-sync, launch-async, burst, graph, rw4k, bulk, lease, module-load, clock)
//!   --python PATH     the Python that runs benches/cupy_peer.py (default python3)
//!   --emu-smoke       run every gpubench command with tiny counts on the emu backend and print
//!                     its lines (no GPU needed; checks the tasklet side's logic)
//!   --tasklet-backend emu|cuda
//!                     the tasklet path's backend (default cuda; emu only tests this program)
//!   --pin G,H         run every GPU-facing thread on CPU G — the native path's (this thread while
//!                     it measures native), CuPy's, and the tasklet worker's serving thread (through
//!                     TASKLET_WORKER_CPUS) — and the tasklet's host thread (this thread while it
//!                     runs the tasklet) on CPU H. On VMs whose vCPUs sit at different distances
//!                     from the GPU, unpinned figures move by ~1 µs with where the scheduler puts
//!                     each path; pinned, native and tasklet make their driver calls from the same CPU
//! ```
//!
//! Environment: `TASKLET_TEST_WORKER` (the worker binary; default: `tasklet-bench-worker`, built
//! with this bench), `TASKLET_REPO` (the checkout holding `tasklets/`, `kernels/` and `benches/`;
//! default: where this was built). With no usable CUDA device it prints `skipped: no CUDA device`
//! and exits 0. Exit status 1: a path failed (its error is printed; the table shows what was
//! measured).

use std::collections::BTreeMap;
use std::ffi::{c_void, CString};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cudarc::driver::{result, sys, CudaContext, DriverError};
use tasklet_runtime::{BackendKind, Host, HostConfig, Policy, Tasklet, WorkerCommand};
use tasklet_tests::{manifest, repo};

const FAULTS_PTX: &str = include_str!("../../kernels/faults.ptx");
const WARMUP: u32 = 10;
const ASYNC_BATCHES: u32 = 10;
const MIB: usize = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Options

#[derive(Debug, Clone)]
struct Params {
    rounds: usize,
    launch_sync: u32,
    launch_async: u32,
    rw4k: u32,
    bulk_bytes: usize,
    bulk_reps: u32,
    lease: u32,
    module_load: u32,
    /// Launches in one burst (`burst`).
    burst: u32,
    /// Kernels in the replayed graph, and replays timed (`graph`).
    graph_kernels: u32,
    graph_replays: u32,
    /// Untimed pause inside each tasklet command before its timing (see gpubench's `settle=`).
    settle_ms: u64,
}

impl Params {
    fn full() -> Params {
        Params {
            rounds: 5,
            launch_sync: 2000,
            launch_async: 1000,
            rw4k: 2000,
            bulk_bytes: 256 * MIB,
            bulk_reps: 5,
            lease: 200,
            module_load: 200,
            burst: 1000,
            graph_kernels: 100,
            graph_replays: 500,
            settle_ms: 500,
        }
    }

    fn quick() -> Params {
        Params {
            rounds: 2,
            launch_sync: 200,
            launch_async: 200,
            rw4k: 200,
            bulk_bytes: 64 * MIB,
            bulk_reps: 3,
            lease: 50,
            module_load: 20,
            burst: 1000,
            graph_kernels: 100,
            graph_replays: 100,
            settle_ms: 500,
        }
    }

    fn smoke() -> Params {
        Params {
            rounds: 1,
            launch_sync: 3,
            launch_async: 3,
            rw4k: 3,
            bulk_bytes: 64 << 10,
            bulk_reps: 2,
            lease: 3,
            module_load: 3,
            burst: 3,
            graph_kernels: 3,
            graph_replays: 3,
            settle_ms: 0,
        }
    }
}

struct Options {
    params: Params,
    backend: BackendKind,
    cupy: bool,
    python: String,
    emu_smoke: bool,
    /// `--pin G,H`: the GPU-facing CPU and the tasklet host thread's CPU.
    pin: Option<(usize, usize)>,
    /// `--only OPS`: the operations measured (all of them when empty).
    only: Vec<Op>,
}

fn parse_options() -> Result<Options, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut quick = false;
    let mut emu_smoke = false;
    let (mut rounds, mut bulk_bytes, mut settle_ms) = (None, None, None);
    let mut cupy = true;
    let mut python = "python3".to_string();
    let mut backend = BackendKind::Cuda;
    let mut pin = None;
    let mut only = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--quick" => quick = true,
            "--emu-smoke" => emu_smoke = true,
            "--no-cupy" => cupy = false,
            "--rounds" => rounds = Some(positive(&value("--rounds")?, "--rounds")?),
            "--bulk-bytes" => bulk_bytes = Some(positive(&value("--bulk-bytes")?, "--bulk-bytes")?),
            "--settle-ms" => settle_ms = Some(positive(&value("--settle-ms")?, "--settle-ms")?),
            "--python" => python = value("--python")?,
            "--only" => {
                for name in value("--only")?.split(',') {
                    let op = OPS
                        .into_iter()
                        .find(|op| op.name() == name)
                        .ok_or_else(|| format!("--only: no operation {name:?}"))?;
                    only.push(op);
                }
            }
            "--pin" => {
                let v = value("--pin")?;
                let cpu = |s: &str| {
                    s.trim()
                        .parse::<usize>()
                        .map_err(|_| format!("--pin: {v:?} is not two CPU numbers G,H"))
                };
                let (g, h) = v
                    .split_once(',')
                    .ok_or_else(|| format!("--pin: {v:?} is not two CPU numbers G,H"))?;
                let (g, h) = (cpu(g)?, cpu(h)?);
                if g == h {
                    return Err(format!(
                        "--pin: {v:?}: the two threads spin while they wait, so they need two CPUs"
                    ));
                }
                pin = Some((g, h));
            }
            "--tasklet-backend" => {
                let v = value("--tasklet-backend")?;
                backend = BackendKind::parse(&v)
                    .ok_or_else(|| format!("--tasklet-backend: {v:?} is not emu or cuda"))?;
            }
            // `cargo bench` passes `--bench` to every bench program.
            "--bench" => {}
            "-h" | "--help" => {
                println!("{}", usage());
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    let mut params = match (emu_smoke, quick) {
        (true, _) => Params::smoke(),
        (false, true) => Params::quick(),
        (false, false) => Params::full(),
    };
    if let Some(r) = rounds {
        params.rounds = r;
    }
    if let Some(b) = bulk_bytes {
        params.bulk_bytes = b;
    }
    if let Some(ms) = settle_ms {
        params.settle_ms = ms as u64;
    }
    Ok(Options {
        params,
        backend,
        cupy,
        python,
        emu_smoke,
        pin,
        only,
    })
}

fn positive(text: &str, name: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(format!("{name}: {text:?} is not a positive number")),
    }
}

fn usage() -> &'static str {
    "usage: gpu_speed [--rounds R] [--quick] [--bulk-bytes B] [--settle-ms MS] [--no-cupy] [--only OPS] [--python PATH] [--emu-smoke] [--tasklet-backend emu|cuda] [--pin G,H]"
}

// ---------------------------------------------------------------------------------------------
// Figures

/// Where a figure was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Path3 {
    Native,
    Tasklet,
    Cupy,
}

impl Path3 {
    fn name(self) -> &'static str {
        match self {
            Path3::Native => "native",
            Path3::Tasklet => "tasklet",
            Path3::Cupy => "cupy",
        }
    }
}

/// `name value` lines of one measurement.
type Lines = Vec<(String, f64)>;

/// Every figure of every round, by path and name.
#[derive(Default)]
struct Figures {
    values: BTreeMap<(Path3, String), Vec<f64>>,
    errors: Vec<String>,
}

impl Figures {
    fn add(&mut self, path: Path3, lines: Lines) {
        for (name, value) in lines {
            self.values.entry((path, name)).or_default().push(value);
        }
    }

    fn record(&mut self, path: Path3, what: &str, r: Result<Lines, String>) {
        match r {
            Ok(lines) => self.add(path, lines),
            Err(e) => {
                let msg = format!("{} {what}: {e}", path.name());
                eprintln!("error: {msg}");
                self.errors.push(msg);
            }
        }
    }

    fn median(&self, path: Path3, name: &str) -> Option<f64> {
        let v = self.values.get(&(path, name.to_string()))?;
        Some(median_f64(v.clone()))
    }
}

/// Parses `name value` lines; `error …` lines (and unparsable ones) make it an `Err`.
fn parse_lines(text: &str) -> Result<Lines, String> {
    let mut lines = Vec::new();
    let mut errors = Vec::new();
    for l in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut parts = l.splitn(2, ' ');
        let (name, value) = (
            parts.next().unwrap_or(""),
            parts.next().unwrap_or("").trim(),
        );
        if name == "error" {
            errors.push(l.to_string());
            continue;
        }
        match value.parse::<f64>() {
            Ok(v) => lines.push((name.to_string(), v)),
            // Informational lines (e.g. `cupy_version 13.6.0`) are kept out of the figures.
            Err(_) if name.ends_with("_version") => {}
            Err(_) => errors.push(format!("unparsable line {l:?}")),
        }
    }
    if errors.is_empty() {
        Ok(lines)
    } else {
        Err(errors.join("; "))
    }
}

fn median_f64(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn median_u64(sorted: &[u64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => sorted[n / 2] as f64,
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) as f64 / 2.0,
    }
}

/// The nearest-rank percentile, as the tasklet and the CuPy script compute it.
fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64
}

/// Runs `f` `warmup` times untimed, then `n` times timed one by one; the sorted times in ns.
fn time_each<E>(warmup: u32, n: u32, mut f: impl FnMut() -> Result<(), E>) -> Result<Vec<u64>, E> {
    for _ in 0..warmup {
        f()?;
    }
    let mut times = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed().as_nanos() as u64);
    }
    times.sort_unstable();
    Ok(times)
}

// ---------------------------------------------------------------------------------------------
// The operations

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    LaunchSync,
    LaunchAsync,
    Rw4k,
    Bulk,
    Lease,
    ModuleLoad,
    Clock,
    Burst,
    Graph,
}

const OPS: [Op; 9] = [
    Op::LaunchSync,
    Op::LaunchAsync,
    Op::Burst,
    Op::Graph,
    Op::Rw4k,
    Op::Bulk,
    Op::Lease,
    Op::ModuleLoad,
    Op::Clock,
];

/// Launch + sync pairs timed together per batch (gpubench's `PAIRS_PER_BATCH`, cupy_peer's too):
/// one clock read pair per batch, so the cost of reading the clock (inside the guest a host call,
/// ~0.1–0.2 µs; the `clock` row) is spread over the pairs rather than charged to each.
const PAIRS_PER_BATCH: u32 = 10;
/// Clock reads per timed batch of the `clock` row.
const CLOCK_READS_PER_BATCH: u32 = 100;
const CLOCK_BATCHES: u32 = 200;

impl Op {
    /// The gpubench command for it.
    fn command(self, p: &Params) -> String {
        let settle = format!("settle={}", p.settle_ms);
        match self {
            Op::LaunchSync => format!("launch-sync {} {settle}", p.launch_sync),
            Op::LaunchAsync => format!("launch-async {} {settle}", p.launch_async),
            Op::Rw4k => format!("rw4k {} {settle}", p.rw4k),
            Op::Bulk => format!("bulk {} {} {settle}", p.bulk_bytes, p.bulk_reps),
            Op::Lease => format!("lease {} {settle}", p.lease),
            Op::ModuleLoad => format!("module-load {} {settle}", p.module_load),
            Op::Clock => format!("clock {CLOCK_BATCHES}"),
            Op::Burst => format!("burst {} {settle}", p.burst),
            Op::Graph => format!("graph {} {} {settle}", p.graph_kernels, p.graph_replays),
        }
    }

    /// Its name on the command line (`--only`): its gpubench command's.
    fn name(self) -> &'static str {
        match self {
            Op::LaunchSync => "launch-sync",
            Op::LaunchAsync => "launch-async",
            Op::Rw4k => "rw4k",
            Op::Bulk => "bulk",
            Op::Lease => "lease",
            Op::ModuleLoad => "module-load",
            Op::Clock => "clock",
            Op::Burst => "burst",
            Op::Graph => "graph",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Native: cudarc's driver API, one stream, in this process

/// Page-locked host memory (`cuMemHostAlloc`, no flags: what `cudaMallocHost` gives).
struct Pinned {
    ptr: *mut u8,
    len: usize,
}

impl Pinned {
    fn new(len: usize, fill: impl Fn(usize) -> u8) -> Result<Pinned, DriverError> {
        let ptr = unsafe { result::malloc_host(len, 0)? } as *mut u8;
        let mut p = Pinned { ptr, len };
        for (i, b) in p.as_mut_slice().iter_mut().enumerate() {
            *b = fill(i);
        }
        Ok(p)
    }

    fn as_slice(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        unsafe {
            let _ = result::free_host(self.ptr as *mut c_void);
        }
    }
}

struct Native {
    stream: sys::CUstream,
    module: sys::CUmodule,
    empty: sys::CUfunction,
    ptx: CString,
    d4k: sys::CUdeviceptr,
    pin4k: (Pinned, Pinned),
    page4k: (Vec<u8>, Vec<u8>),
    /// The worker's way of a small write, natively: its page-locked staging memory and the
    /// event it records after the staged copy.
    stage4k: Pinned,
    staged: sys::CUevent,
    bulk: sys::CUdeviceptr,
    bulk_len: usize,
    bulk_pinned: Pinned,
    bulk_pageable: Vec<u8>,
    /// `empty()` as an instantiated one-node CUDA graph: the reference rows for what native code
    /// gains by launching through a graph, as the tasklet's worker does (docs/performance.md).
    graph: sys::CUgraphExec,
    /// `empty()` as an instantiated chain of `Params::graph_kernels` kernel nodes: the native
    /// replay the tasklet's recorded graph is compared with.
    chain: sys::CUgraphExec,
    /// Last, so that it is released after everything above is freed.
    _ctx: Arc<CudaContext>,
}

/// `f` (no parameters) on 1×1, `k` times, as an instantiated graph of a chain of `k` kernel
/// nodes (each after the one before, as the tasklet's recorded graph is built).
fn chain_graph(f: sys::CUfunction, k: u32) -> Result<sys::CUgraphExec, DriverError> {
    let params = sys::CUDA_KERNEL_NODE_PARAMS {
        func: f,
        gridDimX: 1,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: 1,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        kernelParams: std::ptr::null_mut(),
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    };
    let mut g = std::ptr::null_mut();
    let mut nodes: Vec<sys::CUgraphNode> = Vec::with_capacity(k as usize);
    unsafe {
        sys::cuGraphCreate(&mut g, 0).result()?;
        for i in 0..k as usize {
            let mut n = std::ptr::null_mut();
            let (deps, ndeps) = match i {
                0 => (std::ptr::null(), 0),
                _ => (&nodes[i - 1] as *const sys::CUgraphNode, 1),
            };
            sys::cuGraphAddKernelNode_v2(&mut n, g, deps, ndeps, &params).result()?;
            nodes.push(n);
        }
        let mut exec = std::ptr::null_mut();
        sys::cuGraphInstantiateWithFlags(&mut exec, g, 0).result()?;
        sys::cuGraphDestroy(g).result()?;
        Ok(exec)
    }
}

/// `f` (no parameters) on 1×1 as an instantiated graph of one kernel node.
fn one_node_graph(f: sys::CUfunction) -> Result<sys::CUgraphExec, DriverError> {
    let params = sys::CUDA_KERNEL_NODE_PARAMS {
        func: f,
        gridDimX: 1,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: 1,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        kernelParams: std::ptr::null_mut(),
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    };
    let (mut graph, mut node, mut exec) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    unsafe {
        sys::cuGraphCreate(&mut graph, 0).result()?;
        sys::cuGraphAddKernelNode_v2(&mut node, graph, std::ptr::null(), 0, &params).result()?;
        sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0).result()?;
    }
    Ok(exec)
}

fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

impl Native {
    fn new(p: &Params) -> Result<Native, DriverError> {
        let ctx = CudaContext::new(0)?; // the primary context, bound to this thread
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)?;
        let ptx = CString::new(FAULTS_PTX).expect("PTX has no NUL");
        let module = unsafe { result::module::load_data(ptx.as_ptr() as *const c_void)? };
        let name = CString::new("empty").unwrap();
        let empty = unsafe { result::module::get_function(module, name)? };
        let d4k = unsafe { result::malloc_sync(4096)? };
        let bulk = unsafe { result::malloc_sync(p.bulk_bytes)? };
        let graph = one_node_graph(empty)?;
        let chain = chain_graph(empty, p.graph_kernels)?;
        Ok(Native {
            graph,
            chain,
            _ctx: ctx,
            stream,
            module,
            empty,
            ptx,
            d4k,
            pin4k: (Pinned::new(4096, |_| 0x5a)?, Pinned::new(4096, |_| 0)?),
            page4k: (vec![0x5a; 4096], vec![0xff; 4096]),
            stage4k: Pinned::new(4096, |_| 0)?,
            staged: result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?,
            bulk,
            bulk_len: p.bulk_bytes,
            bulk_pinned: Pinned::new(p.bulk_bytes, pattern)?,
            // Non-zero, so every page is touched now rather than inside the timing.
            bulk_pageable: vec![0xff; p.bulk_bytes],
        })
    }

    fn launch(&self) -> Result<(), DriverError> {
        unsafe {
            sys::cuLaunchKernel(
                self.empty,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                self.stream,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
            .result()
        }
    }

    fn sync(&self) -> Result<(), DriverError> {
        unsafe { result::stream::synchronize(self.stream) }
    }

    fn launch_graph(&self) -> Result<(), DriverError> {
        unsafe { sys::cuGraphLaunch(self.graph, self.stream).result() }
    }

    fn run(&mut self, op: Op, p: &Params) -> Result<Lines, String> {
        self.run_op(op, p).map_err(|e| e.to_string())
    }

    fn run_op(&mut self, op: Op, p: &Params) -> Result<Lines, Failure> {
        let mut out = Lines::new();
        match op {
            Op::LaunchSync => {
                let pair = || {
                    self.launch()?;
                    self.sync()
                };
                let each = time_each(WARMUP, p.launch_sync, pair)?;
                let batches = time_each(1, p.launch_sync.div_ceil(PAIRS_PER_BATCH), || {
                    for _ in 0..PAIRS_PER_BATCH {
                        pair()?;
                    }
                    Ok::<(), DriverError>(())
                })?;
                out.push((
                    "launch_sync_ns".into(),
                    median_u64(&batches) / f64::from(PAIRS_PER_BATCH),
                ));
                out.push(("launch_sync_each_ns".into(), median_u64(&each)));
                out.push(("launch_sync_p99_ns".into(), percentile(&each, 99.0)));
                let graph = time_each(1, p.launch_sync.div_ceil(PAIRS_PER_BATCH), || {
                    for _ in 0..PAIRS_PER_BATCH {
                        self.launch_graph()?;
                        self.sync()?;
                    }
                    Ok::<(), DriverError>(())
                })?;
                out.push((
                    "launch_sync_graph_ns".into(),
                    median_u64(&graph) / f64::from(PAIRS_PER_BATCH),
                ));
            }
            Op::Burst => {
                // What a burst stands for natively: the same launches, one call each.
                let n = p.burst;
                let t = time_each(1, ASYNC_BATCHES, || {
                    for _ in 0..n {
                        self.launch()?;
                    }
                    self.sync()
                })?;
                out.push(("burst_ns".into(), median_u64(&t) / f64::from(n)));
            }
            Op::Graph => {
                let replay = time_each(WARMUP, p.graph_replays, || {
                    unsafe { sys::cuGraphLaunch(self.chain, self.stream).result()? };
                    self.sync()
                })?;
                out.push(("graph_replay_ns".into(), median_u64(&replay)));
                let launches = time_each(1, p.graph_replays.div_ceil(10).max(1), || {
                    for _ in 0..p.graph_kernels {
                        self.launch()?;
                    }
                    self.sync()
                })?;
                out.push(("graph_launches_ns".into(), median_u64(&launches)));
            }
            Op::LaunchAsync => {
                let n = p.launch_async;
                let t = time_each(1, ASYNC_BATCHES, || {
                    for _ in 0..n {
                        self.launch()?;
                    }
                    self.sync()
                })?;
                out.push(("launch_async_ns".into(), median_u64(&t) / f64::from(n)));
                let t = time_each(1, ASYNC_BATCHES, || {
                    for _ in 0..n {
                        self.launch_graph()?;
                    }
                    self.sync()
                })?;
                out.push((
                    "launch_async_graph_ns".into(),
                    median_u64(&t) / f64::from(n),
                ));
            }
            Op::Rw4k => {
                let (d, s) = (self.d4k, self.stream);
                let (src, dst) = (&self.pin4k.0, &mut self.pin4k.1);
                dst.as_mut_slice().fill(0);
                let t = time_each(WARMUP, p.rw4k, || unsafe {
                    result::memcpy_htod_async(d, src.as_slice(), s)?;
                    result::memcpy_dtoh_async(dst.as_mut_slice(), d, s)?;
                    result::stream::synchronize(s)
                })?;
                if src.as_slice() != dst.as_slice() {
                    return Err(Failure::Mismatch("rw4k (pinned)"));
                }
                out.push(("rw4k_pinned_ns".into(), median_u64(&t)));

                let (src, dst) = (&self.page4k.0, &mut self.page4k.1);
                dst.fill(0);
                let t = time_each(WARMUP, p.rw4k, || unsafe {
                    result::memcpy_htod_async(d, src, s)?;
                    result::memcpy_dtoh_async(dst, d, s)?;
                    result::stream::synchronize(s)
                })?;
                if src != dst {
                    return Err(Failure::Mismatch("rw4k (pageable)"));
                }
                out.push(("rw4k_pageable_ns".into(), median_u64(&t)));

                // What the tasklet's worker does for the same three calls, with no sandbox, no
                // process hop and no guest: the write's bytes copied into page-locked staging
                // memory, their copy queued and an event recorded after it; the read's copy
                // queued, and the stream waited for.
                let (page, stage, ev) = (&self.page4k.0, &mut self.stage4k, self.staged);
                let dst = &mut self.pin4k.1;
                dst.as_mut_slice().fill(0);
                let t = time_each(WARMUP, p.rw4k, || unsafe {
                    stage.as_mut_slice().copy_from_slice(page);
                    result::memcpy_htod_async(d, stage.as_slice(), s)?;
                    result::event::record(ev, s)?;
                    result::memcpy_dtoh_async(dst.as_mut_slice(), d, s)?;
                    result::stream::synchronize(s)
                })?;
                if page.as_slice() != dst.as_slice() {
                    return Err(Failure::Mismatch("rw4k (the worker's way)"));
                }
                out.push(("rw4k_worker_way_ns".into(), median_u64(&t)));
            }
            Op::Bulk => {
                let (d, s, len) = (self.bulk, self.stream, self.bulk_len);
                // Warm-up and correctness check: pinned pattern → device → pageable buffer.
                unsafe {
                    result::memcpy_htod_async(d, self.bulk_pinned.as_slice(), s)?;
                    result::memcpy_dtoh_async(&mut self.bulk_pageable, d, s)?;
                    result::stream::synchronize(s)?;
                }
                if self.bulk_pageable != self.bulk_pinned.as_slice() {
                    return Err(Failure::Mismatch("bulk"));
                }
                out.push(("bulk_bytes".into(), len as f64));
                for kind in ["pinned", "pageable"] {
                    let (mut write, mut read) = (Vec::new(), Vec::new());
                    for _ in 0..p.bulk_reps {
                        let host: &mut [u8] = match kind {
                            "pinned" => self.bulk_pinned.as_mut_slice(),
                            _ => &mut self.bulk_pageable,
                        };
                        let start = Instant::now();
                        unsafe {
                            result::memcpy_htod_async(d, &*host, s)?;
                            result::stream::synchronize(s)?;
                        }
                        write.push(len as f64 / start.elapsed().as_secs_f64());
                        let start = Instant::now();
                        unsafe {
                            result::memcpy_dtoh_async(host, d, s)?;
                            result::stream::synchronize(s)?;
                        }
                        read.push(len as f64 / start.elapsed().as_secs_f64());
                    }
                    out.push((format!("bulk_write_{kind}_bps"), median_f64(write)));
                    out.push((format!("bulk_read_{kind}_bps"), median_f64(read)));
                }
            }
            Op::Lease => {} // no native counterpart
            Op::ModuleLoad => {
                // `self.module` holds the same PTX loaded throughout.
                let ptx = self.ptx.as_ptr() as *const c_void;
                let load = || -> Result<u64, DriverError> {
                    let start = Instant::now();
                    let m = unsafe { result::module::load_data(ptx)? };
                    let t = start.elapsed().as_nanos() as u64;
                    unsafe { result::module::unload(m)? }; // untimed
                    Ok(t)
                };
                for _ in 0..WARMUP.min(p.module_load) {
                    load()?;
                }
                let mut t = (0..p.module_load)
                    .map(|_| load())
                    .collect::<Result<Vec<u64>, _>>()?;
                t.sort_unstable();
                out.push(("module_load_ns".into(), median_u64(&t)));
                out.push(("module_load_p99_ns".into(), percentile(&t, 99.0)));
            }
            Op::Clock => {
                let mut t: Vec<u64> = (0..CLOCK_BATCHES)
                    .map(|_| {
                        let start = Instant::now();
                        let mut last = start;
                        for _ in 0..CLOCK_READS_PER_BATCH {
                            last = std::hint::black_box(Instant::now());
                        }
                        (last - start).as_nanos() as u64
                    })
                    .collect();
                t.sort_unstable();
                out.push((
                    "clock_read_ns".into(),
                    median_u64(&t) / f64::from(CLOCK_READS_PER_BATCH),
                ));
            }
        }
        Ok(out)
    }
}

/// Why a native measurement failed.
enum Failure {
    Cuda(DriverError),
    /// Data read back differ from what was written.
    Mismatch(&'static str),
}

impl From<DriverError> for Failure {
    fn from(e: DriverError) -> Failure {
        Failure::Cuda(e)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Cuda(e) => write!(f, "{e}"),
            Failure::Mismatch(what) => {
                write!(f, "{what}: the data read back differ from what was written")
            }
        }
    }
}

impl Drop for Native {
    fn drop(&mut self) {
        unsafe {
            let _ = result::stream::synchronize(self.stream);
            let _ = result::free_sync(self.d4k);
            let _ = result::free_sync(self.bulk);
            let _ = sys::cuGraphExecDestroy(self.graph);
            let _ = sys::cuGraphExecDestroy(self.chain);
            let _ = result::module::unload(self.module);
            let _ = result::event::destroy(self.staged);
            let _ = result::stream::destroy(self.stream);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tasklet: gpubench through a Host, its worker processes and a backend

struct TaskletPath {
    host: Host,
    tasklet: Tasklet,
    /// How long the pool took to start its first warm workers (process, CUDA context, handshake),
    /// started together: what a replacement worker takes, to judge `--settle-ms` by.
    warm_start: Option<Duration>,
}

impl TaskletPath {
    fn start(backend: BackendKind, emu_memory: u64) -> Result<TaskletPath, String> {
        let mut policy = Policy::default();
        policy.workers.warm = 2;
        policy.workers.max = 4;
        policy.workers.kernel_deadline = Duration::from_secs(10);
        policy.workers.op_timeout = Duration::from_secs(60);
        policy.workers.emu_memory = emu_memory;
        let program = worker_program();
        if !program.exists() {
            return Err(format!(
                "no worker binary at {}; set TASKLET_TEST_WORKER to a worker binary (tasklet-bench-worker)",
                program.display()
            ));
        }
        let worker = WorkerCommand {
            program,
            args: Vec::new(),
        };
        let started = Instant::now();
        let host = Host::new(HostConfig {
            policy,
            worker,
            backend,
        })
        .map_err(|e| e.to_string())?;
        let pool = host.pool();
        let warm = host.policy().workers.warm;
        while pool.idle() < warm && started.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let warm_start = (pool.idle() >= warm).then(|| started.elapsed());
        let m = manifest("testing/gpubench");
        if !m.component.exists() {
            return Err(format!(
                "no gpubench component at {}; build the tasklets (cargo build --release --target wasm32-wasip2 in tasklets/) or set TASKLET_REPO",
                m.component.display()
            ));
        }
        let tasklet = host.load(m).map_err(|e| e.to_string())?;
        Ok(TaskletPath {
            host,
            tasklet,
            warm_start,
        })
    }

    fn run_command(&self, command: &str) -> Result<String, String> {
        let out = self
            .host
            .run(&self.tasklet, command.as_bytes())
            .map_err(|e| e.to_string())?;
        String::from_utf8(out).map_err(|_| "output is not UTF-8".into())
    }

    fn run(&self, op: Op, p: &Params) -> Result<Lines, String> {
        let command = op.command(p);
        let r = self
            .run_command(&command)
            .and_then(|text| parse_lines(&text));
        self.settle();
        r.map_err(|e| format!("`{command}`: {e}"))
    }

    /// Waits until no lease is out and the warm workers are back, then a little longer for
    /// surplus workers to be killed and reaped, so that nothing runs in the background while the
    /// next measurement does.
    fn settle(&self) {
        let pool = self.host.pool();
        let warm = self.host.policy().workers.warm;
        // The policy's warm count; a host that cuts it (too little device memory for the
        // contexts) only makes this wait out the deadline.
        let deadline = Instant::now() + Duration::from_secs(3);
        while (pool.busy() > 0 || pool.idle() < warm) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A path for people: canonical where it exists.
fn tidy(path: &std::path::Path) -> String {
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// `TASKLET_TEST_WORKER`, else the worker built with this bench, else one beside this program
/// (a prebuilt `target/release/deps/gpu_speed-*` has it one folder up).
fn worker_program() -> PathBuf {
    if let Some(p) = std::env::var_os("TASKLET_TEST_WORKER") {
        return PathBuf::from(p);
    }
    let built = PathBuf::from(env!("CARGO_BIN_EXE_tasklet-bench-worker"));
    if built.exists() {
        return built;
    }
    let exe = std::env::current_exe().unwrap_or_default();
    for dir in exe.ancestors().skip(1).take(2) {
        let candidate = dir.join("tasklet-bench-worker");
        if candidate.exists() {
            return candidate;
        }
    }
    built
}

// ---------------------------------------------------------------------------------------------
// CuPy: benches/cupy_peer.py in a subprocess

struct Cupy {
    python: String,
    script: PathBuf,
    version: String,
}

impl Cupy {
    fn detect(python: &str) -> Result<Cupy, String> {
        let script = repo().join("benches/cupy_peer.py");
        if !script.exists() {
            return Err(format!("no {}", script.display()));
        }
        let out = Command::new(python)
            .args(["-c", "import cupy; print(cupy.__version__)"])
            .output()
            .map_err(|e| format!("cannot run {python}: {e}"))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!(
                "`{python} -c 'import cupy'` failed: {}",
                err.lines().last().unwrap_or("")
            ));
        }
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(Cupy {
            python: python.to_string(),
            script,
            version,
        })
    }

    /// Runs the peer script, on CPU `cpu` if given.
    fn run(&self, p: &Params, cpu: Option<usize>) -> Result<Lines, String> {
        let ptx = repo().join("kernels/faults.ptx");
        let mut cmd = Command::new(&self.python);
        if let Some(cpu) = cpu {
            use std::os::unix::process::CommandExt;
            // SAFETY: only a syscall between fork and exec.
            unsafe { cmd.pre_exec(move || tasklet_worker::cpus::pin_current_thread(cpu)) };
        }
        let out = cmd
            .arg(&self.script)
            .arg("--ptx")
            .arg(&ptx)
            .args(["--launch-sync", &p.launch_sync.to_string()])
            .args(["--launch-async", &p.launch_async.to_string()])
            .args(["--rw4k", &p.rw4k.to_string()])
            .args(["--bulk-bytes", &p.bulk_bytes.to_string()])
            .args(["--bulk-reps", &p.bulk_reps.to_string()])
            .args(["--module-load", &p.module_load.to_string()])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.python))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(3).collect();
            return Err(format!(
                "{} exited with {}: {}",
                self.script.display(),
                out.status,
                tail.join(" / ")
            ));
        }
        parse_lines(&String::from_utf8_lossy(&out.stdout))
    }
}

// ---------------------------------------------------------------------------------------------
// Machine

struct Machine {
    gpu: String,
    compute_capability: (i32, i32),
    memory: usize,
    cuda_api: String,
    driver: String,
}

/// The first CUDA device, or why there is none.
fn probe_cuda() -> Result<Machine, String> {
    if !unsafe { sys::is_culib_present() } {
        return Err("libcuda is not installed".into());
    }
    result::init().map_err(|e| format!("cuInit: {e}"))?;
    let count = result::device::get_count().map_err(|e| format!("cuDeviceGetCount: {e}"))?;
    if count < 1 {
        return Err("no device".into());
    }
    let dev = result::device::get(0).map_err(|e| e.to_string())?;
    let gpu = result::device::get_name(dev).map_err(|e| e.to_string())?;
    let attr = |a| unsafe { result::device::get_attribute(dev, a) }.unwrap_or(-1);
    let compute_capability = (
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    );
    let memory = unsafe { result::device::total_mem(dev) }.unwrap_or(0);
    let mut v = 0i32;
    let cuda_api = match unsafe { sys::cuDriverGetVersion(&mut v) }.result() {
        Ok(()) => format!("{}.{}", v / 1000, (v % 1000) / 10),
        Err(e) => format!("unknown ({e})"),
    };
    Ok(Machine {
        gpu,
        compute_capability,
        memory,
        cuda_api,
        driver: driver_version(),
    })
}

/// The kernel driver's version: /proc/driver/nvidia/version, else nvidia-smi.
fn driver_version() -> String {
    if let Ok(text) = std::fs::read_to_string("/proc/driver/nvidia/version") {
        let first = text.lines().next().unwrap_or("");
        // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build …"
        let version = first
            .split_whitespace()
            .find(|w| w.contains('.') && w.starts_with(|c: char| c.is_ascii_digit()));
        if let Some(v) = version {
            return v.to_string();
        }
    }
    Command::new("nvidia-smi")
        .args(["--query-gpu=driver_version", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn cpu_model() -> String {
    tasklet_tests::cpu_model()
}

/// Now, UTC, as `YYYY-MM-DD HH:MM:SSZ`.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

// ---------------------------------------------------------------------------------------------
// The table

enum Unit {
    Micros,
    GBps,
}

enum Target {
    /// Reported, no target.
    Report,
    /// tasklet ÷ native at most this.
    RatioAtMost(f64),
    /// The tasklet's figure at most this many µs.
    MicrosAtMost(f64),
    /// The tasklet's figure at least this many GB/s.
    GBpsAtLeast(f64),
}

struct Row {
    label: &'static str,
    native: Option<&'static str>,
    tasklet: &'static str,
    cupy: Option<&'static str>,
    unit: Unit,
    target: Target,
}

#[rustfmt::skip]
fn rows() -> Vec<Row> {
    use Target::*;
    use Unit::*;
    let row = |label, native, tasklet, cupy, unit, target| Row { label, native, tasklet, cupy, unit, target };
    vec![
        row("empty kernel launch + sync", Some("launch_sync_ns"), "launch_sync_ns", Some("launch_sync_ns"), Micros, RatioAtMost(1.10)),
        row("empty kernel launch + sync, each pair timed alone", Some("launch_sync_each_ns"), "launch_sync_each_ns", Some("launch_sync_each_ns"), Micros, Report),
        row("empty kernel launch + sync, p99 (each pair timed alone)", Some("launch_sync_p99_ns"), "launch_sync_p99_ns", Some("launch_sync_p99_ns"), Micros, RatioAtMost(1.20)),
        row("async launch (N, then one sync), per launch", Some("launch_async_ns"), "launch_async_ns", Some("launch_async_ns"), Micros, RatioAtMost(1.20)),
        row("async launch: the tasklet's N launches alone returning, per launch", None, "launch_async_posted_ns", None, Micros, Report),
        row("burst of N launches in one call, then one sync, per launch (native: N launches)", Some("burst_ns"), "burst_ns", None, Micros, RatioAtMost(1.20)),
        row("replay of a K-kernel graph + sync (native: the same chain, instantiated once)", Some("graph_replay_ns"), "graph_replay_ns", None, Micros, RatioAtMost(1.10)),
        row("K launches + sync (the graph's kernels one by one; tasklet: through a kernel handle)", Some("graph_launches_ns"), "graph_launches_ns", None, Micros, Report),
        row("empty kernel launch + sync against native through a one-node CUDA graph", Some("launch_sync_graph_ns"), "launch_sync_ns", None, Micros, RatioAtMost(1.10)),
        row("reference: async launch, native through a one-node CUDA graph, per launch", Some("launch_async_graph_ns"), "launch_async_ns", None, Micros, Report),
        row("4 KiB write + read + sync (native: pinned)", Some("rw4k_pinned_ns"), "rw4k_ns", Some("rw4k_pinned_ns"), Micros, RatioAtMost(1.30)),
        row("4 KiB write + read + sync (native: pageable)", Some("rw4k_pageable_ns"), "rw4k_ns", Some("rw4k_pageable_ns"), Micros, Report),
        row("reference: 4 KiB write + read + sync, native the worker's way (staged, an event after the write)", Some("rw4k_worker_way_ns"), "rw4k_ns", None, Micros, Report),
        row("bulk write host→device (native: pinned)", Some("bulk_write_pinned_bps"), "bulk_write_bps", Some("bulk_write_pinned_bps"), GBps, GBpsAtLeast(44.0)),
        row("bulk write host→device (native: pageable)", Some("bulk_write_pageable_bps"), "bulk_write_bps", Some("bulk_write_pageable_bps"), GBps, Report),
        row("bulk read device→host (native: pinned)", Some("bulk_read_pinned_bps"), "bulk_read_bps", Some("bulk_read_pinned_bps"), GBps, GBpsAtLeast(44.0)),
        row("bulk read device→host (native: pageable)", Some("bulk_read_pageable_bps"), "bulk_read_bps", Some("bulk_read_pageable_bps"), GBps, Report),
        row("bulk read device→host, tasklet: returned list (native: pinned)", Some("bulk_read_pinned_bps"), "bulk_read_list_bps", Some("bulk_read_pinned_bps"), GBps, Report),
        row("lease acquire, warm pool, p50", None, "lease_acquire_p50_ns", None, Micros, MicrosAtMost(100.0)),
        row("lease acquire, warm pool, p99", None, "lease_acquire_p99_ns", None, Micros, Report),
        row("lease acquire + drop, p50", None, "lease_cycle_p50_ns", None, Micros, Report),
        row("module load of PTX already loaded", Some("module_load_ns"), "module_load_ns", Some("module_load_ns"), Micros, MicrosAtMost(50.0)),
        row("module load of PTX already loaded, p99", Some("module_load_p99_ns"), "module_load_p99_ns", Some("module_load_p99_ns"), Micros, Report),
        row("one clock read where the timing runs (tasklet: a WASI call)", Some("clock_read_ns"), "clock_read_ns", Some("clock_read_ns"), Micros, Report),
    ]
}

fn show(v: Option<f64>, unit: &Unit) -> String {
    match v {
        None => "n/a".into(),
        Some(v) if !v.is_finite() => "n/a".into(),
        Some(v) => match unit {
            Unit::Micros => format!("{:.2} µs", v / 1e3),
            Unit::GBps if v >= 1e9 => format!("{:.1} GB/s", v / 1e9),
            Unit::GBps => format!("{:.4} GB/s", v / 1e9),
        },
    }
}

fn table(f: &Figures, with_cupy: bool, bulk_bytes: usize) -> String {
    let mut s = String::new();
    let cupy_head = if with_cupy { " CuPy RawKernel |" } else { "" };
    let cupy_rule = if with_cupy { " --- |" } else { "" };
    writeln!(
        s,
        "| operation | native (cudarc) | tasklet | tasklet ÷ native |{cupy_head} target | met |"
    )
    .unwrap();
    writeln!(s, "| --- | --- | --- | --- |{cupy_rule} --- | --- |").unwrap();
    let bulk = match bulk_bytes {
        b if b % MIB == 0 => format!("{} MiB", b / MIB),
        b if b % 1024 == 0 => format!("{} KiB", b / 1024),
        b => format!("{b} B"),
    };
    for r in rows() {
        let native = r.native.and_then(|k| f.median(Path3::Native, k));
        let tasklet = f.median(Path3::Tasklet, r.tasklet);
        let cupy = r.cupy.and_then(|k| f.median(Path3::Cupy, k));
        let ratio = match (native, tasklet) {
            (Some(n), Some(t)) if n > 0.0 && n.is_finite() && t.is_finite() => Some(t / n),
            _ => None,
        };
        let (target, met) = match r.target {
            Target::Report => ("—".to_string(), None),
            Target::RatioAtMost(x) => (format!("≤ {x:.2}× native"), ratio.map(|q| q <= x)),
            Target::MicrosAtMost(x) => (
                format!("≤ {x} µs"),
                tasklet.filter(|t| t.is_finite()).map(|t| t / 1e3 <= x),
            ),
            Target::GBpsAtLeast(x) => (
                format!("≥ {x} GB/s"),
                tasklet.filter(|t| t.is_finite()).map(|t| t / 1e9 >= x),
            ),
        };
        let met = match (&r.target, met) {
            (Target::Report, _) => "—",
            (_, None) => "n/a",
            (_, Some(true)) => "yes",
            (_, Some(false)) => "**no**",
        };
        let label = r.label.replace("bulk", &bulk);
        let native_s = if r.native.is_some() {
            show(native, &r.unit)
        } else {
            "—".into()
        };
        let ratio_s = ratio.map_or_else(|| "—".to_string(), |q| format!("{q:.2}×"));
        let cupy_s = if with_cupy {
            format!(
                " {} |",
                if r.cupy.is_some() {
                    show(cupy, &r.unit)
                } else {
                    "—".into()
                }
            )
        } else {
            String::new()
        };
        writeln!(
            s,
            "| {label} | {native_s} | {} | {ratio_s} |{cupy_s} {target} | {met} |",
            show(tasklet, &r.unit)
        )
        .unwrap();
    }
    // The graph's own target: its replay against the same kernels launched one by one by the
    // tasklet.
    if let (Some(replay), Some(launches)) = (
        f.median(Path3::Tasklet, "graph_replay_ns"),
        f.median(Path3::Tasklet, "graph_launches_ns"),
    ) {
        let x = launches / replay;
        let met = if x >= 3.0 { "yes" } else { "no" };
        writeln!(
            s,
            "\ntasklet: graph replay + sync is {x:.2}x faster than its K kernels launched one by one + sync (target >= 3x: {met})"
        )
        .unwrap();
    }
    s
}

fn print_rounds(f: &Figures) {
    println!("per-round figures (ns or bytes/s), for judging the spread:");
    for ((path, name), values) in &f.values {
        let v: Vec<String> = values.iter().map(|v| format!("{v:.0}")).collect();
        println!("  {:<8} {:<26} {}", path.name(), name, v.join(" "));
    }
}

// ---------------------------------------------------------------------------------------------
// Main

fn main() {
    let opts = match parse_options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("gpu_speed: {e}");
            std::process::exit(2);
        }
    };
    if opts.emu_smoke {
        std::process::exit(emu_smoke(&opts));
    }
    if let Some((gpu_cpu, _)) = opts.pin {
        // Before any thread exists: the pool's workers inherit it.
        std::env::set_var(tasklet_worker::cpus::ENV, gpu_cpu.to_string());
    }
    let machine = match probe_cuda() {
        Ok(m) => m,
        Err(why) => {
            println!("skipped: no CUDA device");
            eprintln!("gpu_speed: {why}");
            return;
        }
    };
    std::process::exit(gpu(&opts, &machine));
}

fn gpu(opts: &Options, m: &Machine) -> i32 {
    let p = &opts.params;
    println!("# tasklet speed benchmark");
    println!("date:     {}", utc_now());
    println!(
        "gpu:      {} (compute {}.{}, {} MiB)",
        m.gpu,
        m.compute_capability.0,
        m.compute_capability.1,
        m.memory / MIB
    );
    println!("driver:   {} (CUDA driver API {})", m.driver, m.cuda_api);
    println!("cpu:      {}", cpu_model());
    match opts.pin {
        Some((g, h)) => println!("pinning:  native, CuPy and the tasklet worker's serving thread on CPU {g}; the tasklet's host thread on CPU {h}"),
        None => println!("pinning:  none (where the scheduler puts each thread)"),
    }
    println!(
        "counts:   {} rounds; launch-sync {}, launch-async {} x {} batches, rw4k {}, bulk {} B x {}, lease {}, module-load {}, burst {} x {} batches, graph of {} kernels x {} replays",
        p.rounds, p.launch_sync, p.launch_async, ASYNC_BATCHES, p.rw4k, p.bulk_bytes, p.bulk_reps, p.lease, p.module_load,
        p.burst, ASYNC_BATCHES, p.graph_kernels, p.graph_replays
    );

    let mut figures = Figures::default();
    let mut native = match Native::new(p) {
        Ok(n) => Some(n),
        Err(e) => {
            println!("native:   unavailable: {e}");
            figures.errors.push(format!("native: cannot set up: {e}"));
            None
        }
    };
    let tasklet = match TaskletPath::start(opts.backend, 4 << 30) {
        Ok(t) => {
            let (c, w) = (tidy(&t.tasklet.manifest.component), tidy(&worker_program()));
            println!(
                "tasklet:  {c} on worker {w}, backend {}",
                opts.backend.as_str()
            );
            match t.warm_start {
                Some(d) => println!(
                    "pool:     {} warm workers ready {:.0} ms after the host started (settle {} ms)",
                    t.host.policy().workers.warm,
                    d.as_secs_f64() * 1e3,
                    p.settle_ms
                ),
                None => println!("pool:     the warm workers were not ready within 30 s"),
            }
            Some(t)
        }
        Err(e) => {
            println!("tasklet:  unavailable: {e}");
            figures.errors.push(format!("tasklet: cannot start: {e}"));
            None
        }
    };
    let cupy = if opts.cupy {
        match Cupy::detect(&opts.python) {
            Ok(c) => {
                println!("cupy:     {} ({})", c.version, tidy(&c.script));
                Some(c)
            }
            Err(e) => {
                println!("cupy:     left out: {e}");
                None
            }
        }
    } else {
        println!("cupy:     left out (--no-cupy)");
        None
    };
    println!();

    // Warm-up, unrecorded: page in code, JIT caches, the workers' first contexts.
    let warm = Params {
        rounds: 1,
        bulk_reps: 1,
        ..Params::quick()
    };
    let warm = Params {
        bulk_bytes: p.bulk_bytes,
        settle_ms: p.settle_ms,
        ..warm
    };
    let on = |which: Path3| {
        if let Some((g, h)) = opts.pin {
            let cpu = if which == Path3::Tasklet { h } else { g };
            if let Err(e) = tasklet_worker::cpus::pin_current_thread(cpu) {
                eprintln!("gpu_speed: --pin: cannot move to CPU {cpu}: {e}");
                std::process::exit(2);
            }
        }
    };
    let ops: Vec<Op> = OPS
        .into_iter()
        .filter(|op| opts.only.is_empty() || opts.only.contains(op))
        .collect();
    for &op in &ops {
        if let Some(n) = native.as_mut() {
            on(Path3::Native);
            let _ = n.run(op, &warm);
        }
        if let Some(t) = &tasklet {
            on(Path3::Tasklet);
            let _ = t.run(op, &warm);
        }
    }

    for round in 0..p.rounds {
        eprintln!("round {}/{}", round + 1, p.rounds);
        for &op in &ops {
            let mut native_first = round % 2 == 0;
            for _ in 0..2 {
                if native_first {
                    if let Some(n) = native.as_mut().filter(|_| op != Op::Lease) {
                        on(Path3::Native);
                        figures.record(Path3::Native, &format!("{op:?}"), n.run(op, p));
                    }
                } else if let Some(t) = &tasklet {
                    on(Path3::Tasklet);
                    figures.record(Path3::Tasklet, &format!("{op:?}"), t.run(op, p));
                }
                native_first = !native_first;
            }
        }
        if let Some(c) = &cupy {
            figures.record(
                Path3::Cupy,
                "cupy_peer.py",
                c.run(p, opts.pin.map(|(g, _)| g)),
            );
        }
    }
    drop(native);
    drop(tasklet);

    println!("{}", table(&figures, cupy.is_some(), p.bulk_bytes));
    println!("medians over {} rounds; tasklet ÷ native compares the tasklet with the native row's figure", p.rounds);
    println!("(for GB/s rows it is the fraction of native bandwidth the tasklet reaches).");
    println!();
    print_rounds(&figures);
    if figures.errors.is_empty() {
        return 0;
    }
    println!();
    println!("errors:");
    for e in &figures.errors {
        println!("  {e}");
    }
    1
}

/// Every gpubench command with tiny counts on the emu backend: checks the tasklet side's logic
/// and the table without a GPU.
fn emu_smoke(opts: &Options) -> i32 {
    let p = &opts.params;
    let t = match TaskletPath::start(BackendKind::Emu, 256 << 20) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("emu smoke: cannot start: {e}");
            return 1;
        }
    };
    let expect: [(Op, &[&str]); 9] = [
        (Op::Burst, &["burst_ns"]),
        (Op::Graph, &["graph_replay_ns", "graph_launches_ns"]),
        (
            Op::LaunchSync,
            &[
                "launch_sync_ns",
                "launch_sync_each_ns",
                "launch_sync_p99_ns",
            ],
        ),
        (
            Op::LaunchAsync,
            &["launch_async_ns", "launch_async_posted_ns"],
        ),
        (Op::Rw4k, &["rw4k_ns", "rw4k_p99_ns"]),
        (
            Op::Bulk,
            &[
                "bulk_bytes",
                "bulk_write_bps",
                "bulk_read_bps",
                "bulk_read_list_bps",
            ],
        ),
        (
            Op::Lease,
            &[
                "lease_acquire_p50_ns",
                "lease_acquire_p99_ns",
                "lease_cycle_p50_ns",
                "lease_cycle_p99_ns",
            ],
        ),
        (Op::ModuleLoad, &["module_load_ns", "module_load_p99_ns"]),
        (Op::Clock, &["clock_read_ns"]),
    ];
    let mut figures = Figures::default();
    let mut failures = 0;
    for (op, keys) in expect {
        let command = op.command(p);
        println!("$ gpubench {command}");
        match t.run_command(&command) {
            Ok(text) => {
                print!("{text}");
                match parse_lines(&text) {
                    Ok(lines) => {
                        for k in keys {
                            if !lines
                                .iter()
                                .any(|(n, v)| n == k && v.is_finite() && *v > 0.0)
                            {
                                println!("  MISSING: {k}");
                                failures += 1;
                            }
                        }
                        figures.add(Path3::Tasklet, lines);
                    }
                    Err(e) => {
                        println!("  FAILED: {e}");
                        failures += 1;
                    }
                }
            }
            Err(e) => {
                println!("  FAILED: {e}");
                failures += 1;
            }
        }
        t.settle();
    }
    // The CuPy peer where it can run (on a machine without a GPU only with a stand-in for CuPy):
    // checks the subprocess and its lines, not CuPy.
    let cupy = if opts.cupy {
        Cupy::detect(&opts.python).ok()
    } else {
        None
    };
    if let Some(c) = &cupy {
        println!("$ {} {} (cupy {})", c.python, tidy(&c.script), c.version);
        match c.run(p, None) {
            Ok(lines) => {
                for (n, v) in &lines {
                    println!("{n} {v}");
                }
                figures.add(Path3::Cupy, lines);
            }
            Err(e) => {
                println!("  FAILED: {e}");
                failures += 1;
            }
        }
    }
    println!();
    println!("{}", table(&figures, cupy.is_some(), p.bulk_bytes));
    if failures == 0 {
        println!("emu smoke: ok (figures are from the CPU emulator, not a GPU)");
        0
    } else {
        println!("emu smoke: {failures} problem(s)");
        1
    }
}
