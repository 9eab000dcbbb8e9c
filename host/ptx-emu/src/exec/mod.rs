//! Running a launch: CTAs are handed out to worker threads one at a time; each worker runs all
//! warps of its CTA on its own thread, so shared memory and barriers need no locking. Only global
//! memory (atomic storage) and the step budget are shared between workers.
//!
//! This file schedules the CTAs and their warps and releases CTA barriers. `warp` schedules one
//! warp's lanes and dispatches each instruction to the file of its family: `data` (moves,
//! conversions), `arith`, `compare`, `mem` (address resolution, loads, stores, the parameter
//! area), `atomic`, `control` (calls, `trap`, the `printf` and assert built-ins of `printf`) and
//! `sync` (barriers, warp-synchronous ops). `regs` reads and writes registers lane-wise; `ops`
//! and `fastfma` hold the per-lane semantics as pure functions on register bits.

mod arith;
mod atomic;
mod compare;
mod control;
mod data;
mod fastfma;
mod mem;
mod ops;
mod printf;
mod regs;
mod sync;
mod warp;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::ir::{Program, ReduxOp, ENVREGS};
use crate::memory::{DeviceMemory, GlobalMap, Region};
use crate::{ExecError, LaunchParams, LaunchStats, Site};
use warp::Warp;

/// Largest shared memory per block (static + dynamic), as on sm_90.
const MAX_SHARED: u64 = 227 * 1024;
/// Upper bound on the state of its own one CTA holds in host memory while it runs (its warps'
/// registers and predicates, their threads' local and call-parameter areas), so that a
/// declaration (`.reg .b64 %r<1000000>`, a large `.local` array) cannot make the worker allocate
/// unbounded memory for a lease of any size.
const MAX_CTA_PRIVATE: u64 = 256 << 20;
/// Upper bound on that state over the CTAs a launch runs at once: where each holds much, fewer
/// run in parallel (at least one).
const MAX_LAUNCH_PRIVATE: u64 = 512 << 20;
/// Instructions a warp issues before the CTA scheduler moves to the next warp; lets warps that
/// spin on each other's shared-memory writes make progress.
const SLICE: u32 = 4096;
/// Most step budget taken from the launch-wide pool at a time.
const CHUNK: u64 = 1 << 16;

pub(crate) struct Launch<'a> {
    pub prog: &'a Program,
    pub module_data: &'a Region,
    pub globals: GlobalMap,
    pub args: &'a [u8],
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub nthreads: u32,
    pub nwarps: u32,
    pub dyn_shared: u32,
    pub shared_size: usize,
    pub entry: u32,
    pub limit: u64,
    pub remaining: AtomicU64,
    /// Step budget a thread takes from `remaining` at a time.
    pub chunk: u64,
    pub abort: AtomicBool,
    /// What is left of the launch's `printf` buffer, and what did not fit.
    pub printf: printf::Buffer,
    /// The driver-defined registers `%envreg0`..`%envreg31` (see [`Env`]).
    pub envreg: [u32; ENVREGS],
}

/// What the driver tells a launch through `%envregN`: nothing (every register reads 0) for a
/// normal launch; for a cooperative one, the address of its grid-wide workspace, high 32 bits in
/// `%envreg1` and low in `%envreg2`, where CUDA's cooperative groups find it (`grid.sync()` traps
/// when it reads 0 there: the kernel was not launched cooperatively).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Env {
    /// A cooperative launch's workspace for `grid.sync` (0: a plain launch). A cooperative
    /// launch runs every block at once, each on a thread of its own.
    pub grid_workspace: u64,
}

impl Env {
    fn registers(self) -> [u32; ENVREGS] {
        let mut r = [0u32; ENVREGS];
        r[1] = (self.grid_workspace >> 32) as u32;
        r[2] = self.grid_workspace as u32;
        r
    }
}

impl Launch<'_> {
    pub(crate) fn fault(
        &self,
        line: u32,
        ctaid: [u32; 3],
        tid: [u32; 3],
        message: String,
    ) -> ExecError {
        ExecError::Fault {
            site: Site { line, ctaid, tid },
            message,
        }
    }
}

pub(crate) struct Budget {
    pub local: u64,
    pub used: u64,
}

impl Budget {
    /// Takes more of the launch's step budget; false when it cannot cover `need`.
    pub(crate) fn refill(&mut self, cx: &Launch<'_>, need: u64) -> bool {
        let want = cx.chunk.max(need);
        let prev = cx
            .remaining
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                Some(r - r.min(want))
            })
            .unwrap_or_else(|v| v);
        self.local += prev.min(want);
        self.local >= need
    }

    fn give_back(&mut self, cx: &Launch<'_>) {
        cx.remaining.fetch_add(self.local, Ordering::Relaxed);
        self.local = 0;
    }
}

/// Barrier state of one CTA, per barrier id.
#[derive(Default)]
pub(crate) struct Bars {
    pub arrived: [u32; 16],
    pub count: [Option<u32>; 16],
    pub red: [Option<ReduxOp>; 16],
    pub acc: [u32; 16],
    pub line: [u32; 16],
}

pub(crate) struct CtaCtx<'s> {
    pub shared: &'s mut [u8],
    pub bars: &'s mut Bars,
    pub ctaid: [u32; 3],
}

/// What a worker thread keeps between CTAs so that it allocates once per launch.
struct Worker {
    warps: Vec<Warp>,
    shared: Vec<u8>,
    bars: Bars,
}

/// What a launch's checks found out about its shape.
struct Shape {
    nthreads: u32,
    nwarps: u32,
    shared_size: u64,
    entry_pc: u32,
    /// Bytes of state of its own each CTA holds ([`MAX_CTA_PRIVATE`]).
    private: u64,
}

/// Checks a launch's shape (dimensions, argument block, shared and per-thread memory, kernel)
/// without running anything: what [`launch`] refuses with `InvalidLaunch` before it starts.
pub(crate) fn check(
    prog: &Program,
    kernel: usize,
    p: &LaunchParams<'_>,
    arg_size: u32,
) -> Result<(), ExecError> {
    shape(prog, kernel, p, arg_size).map(drop)
}

/// [`check`], for a launch all of whose `ctas` blocks run at once (a cooperative one): their
/// state together must fit what a launch's blocks may hold at once.
pub(crate) fn check_all_at_once(
    prog: &Program,
    kernel: usize,
    p: &LaunchParams<'_>,
    arg_size: u32,
    ctas: u64,
) -> Result<(), ExecError> {
    let private = shape(prog, kernel, p, arg_size)?.private;
    let all = private.saturating_mul(ctas);
    if all > MAX_LAUNCH_PRIVATE {
        return Err(ExecError::InvalidLaunch(format!(
            "a cooperative launch's {ctas} blocks, all resident at once, need {all} bytes of per-thread state \
             ({private} a block), over the {MAX_LAUNCH_PRIVATE} bytes the emulator gives a launch; launch fewer \
             blocks or fewer threads per block"
        )));
    }
    Ok(())
}

fn shape(
    prog: &Program,
    kernel: usize,
    p: &LaunchParams<'_>,
    arg_size: u32,
) -> Result<Shape, ExecError> {
    let inv = |m: String| Err(ExecError::InvalidLaunch(m));
    let [gx, gy, gz] = p.grid;
    let [bx, by, bz] = p.block;
    if gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 {
        return inv(format!(
            "grid {:?} and block {:?} must have every dimension at least 1",
            p.grid, p.block
        ));
    }
    if gx > i32::MAX as u32 || gy > 65535 || gz > 65535 {
        return inv(format!(
            "grid {:?} exceeds the limits (2^31-1, 65535, 65535)",
            p.grid
        ));
    }
    if bx > 1024 || by > 1024 || bz > 64 || (bx as u64 * by as u64 * bz as u64) > 1024 {
        return inv(format!(
            "block {:?} exceeds the limits (1024 threads; x,y <= 1024, z <= 64)",
            p.block
        ));
    }
    if p.args.len() != arg_size as usize {
        return inv(format!(
            "argument block is {} bytes, the kernel's parameters take {arg_size}",
            p.args.len()
        ));
    }
    let shared_size = prog.shared_dyn_off as u64 + p.shared_mem_bytes as u64;
    let shared_size = shared_size.max(prog.shared_static as u64);
    if shared_size > MAX_SHARED {
        return inv(format!(
            "{shared_size} bytes of shared memory per block exceed the {MAX_SHARED}-byte limit"
        ));
    }
    let nthreads = bx * by * bz;
    let nwarps = nthreads.div_ceil(32);
    let per_thread = prog.local_size as u64 + prog.tparam_size as u64 + prog.num_regs as u64 * 8;
    let per_warp = per_thread * 32 + prog.num_preds as u64 * 4;
    let private = per_warp * nwarps as u64;
    if private > MAX_CTA_PRIVATE {
        return inv(format!(
            "a block of {nthreads} threads needs {private} bytes of per-thread state ({} registers, {} bytes of \
             local memory and {} of call parameters a thread), over the {MAX_CTA_PRIVATE} bytes the emulator gives a \
             block; use fewer threads per block, or fewer registers or less local memory",
            prog.num_regs, prog.local_size, prog.tparam_size
        ));
    }
    let func = prog
        .kernel_funcs
        .get(kernel)
        .and_then(|&f| prog.funcs.get(f));
    let Some(func) = func else {
        return inv("unknown kernel".into());
    };
    Ok(Shape {
        nthreads,
        nwarps,
        shared_size,
        entry_pc: func.entry_pc,
        private,
    })
}

pub(crate) fn launch(
    prog: &Program,
    module_data: &Region,
    kernel: usize,
    memory: &DeviceMemory,
    p: &LaunchParams<'_>,
    arg_size: u32,
    env: Env,
) -> Result<LaunchStats, ExecError> {
    let Shape {
        nthreads,
        nwarps,
        shared_size,
        entry_pc,
        private,
    } = shape(prog, kernel, p, arg_size)?;
    let [gx, gy, gz] = p.grid;
    let n_ctas = gx as u64 * gy as u64 * gz as u64;
    // available_parallelism reads cgroup files on Linux; once per process is enough.
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let threads = if p.threads == 0 { cores } else { p.threads };
    // A plain launch runs fewer blocks at once where each holds much; a cooperative one runs
    // them all (`check_all_at_once` bounded them).
    let at_once = match env.grid_workspace {
        0 => MAX_LAUNCH_PRIVATE / private.max(1),
        _ => u64::MAX,
    };
    let workers = (threads as u64).min(n_ctas).min(at_once).max(1) as usize;
    let cx = Launch {
        prog,
        module_data,
        globals: GlobalMap::new(memory.snapshot()),
        args: p.args,
        grid: p.grid,
        block: p.block,
        nthreads,
        nwarps,
        dyn_shared: p.shared_mem_bytes,
        shared_size: shared_size as usize,
        entry: entry_pc,
        limit: p.step_limit,
        remaining: AtomicU64::new(p.step_limit),
        // Budget a thread holds unspent is invisible to the others: keep all of it together under
        // a sixteenth of the limit, so a launch is never stopped before 15/16 of its steps ran.
        chunk: CHUNK.min(p.step_limit / (16 * workers as u64)).max(1),
        abort: AtomicBool::new(false),
        printf: printf::Buffer::new(crate::PRINTF_BUFFER_BYTES),
        envreg: env.registers(),
    };
    let next = AtomicU64::new(0);
    let first_err: Mutex<Option<(u64, ExecError)>> = Mutex::new(None);
    let total = AtomicU64::new(0);
    let work = || {
        let mut w = Worker {
            warps: (0..nwarps).map(|_| Warp::new(prog)).collect(),
            shared: vec![0u8; cx.shared_size],
            bars: Bars::default(),
        };
        let mut budget = Budget { local: 0, used: 0 };
        loop {
            if cx.abort.load(Ordering::Relaxed) {
                break;
            }
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n_ctas {
                break;
            }
            if let Err(e) = run_cta(&cx, &mut w, i, &mut budget) {
                cx.abort.store(true, Ordering::Relaxed);
                let mut g = first_err.lock().unwrap_or_else(|e| e.into_inner());
                // Keep the error of the lowest-numbered CTA so single-threaded runs are
                // deterministic and parallel ones mostly agree with them.
                if g.as_ref().is_none_or(|(j, _)| i < *j) {
                    *g = Some((i, e));
                }
                break;
            }
        }
        budget.give_back(&cx);
        total.fetch_add(budget.used, Ordering::Relaxed);
    };
    if workers == 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 1..workers {
                s.spawn(work);
            }
            work();
        });
    }
    // Said whether the launch ended well or not: the output that did get out may be what
    // explains a fault.
    let printf_dropped = cx.printf.report_truncation();
    if let Some((_, e)) = first_err.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    Ok(LaunchStats {
        lane_instructions: total.load(Ordering::Relaxed),
        printf_dropped,
    })
}

fn run_cta(cx: &Launch<'_>, w: &mut Worker, i: u64, budget: &mut Budget) -> Result<(), ExecError> {
    let [gx, gy, _] = cx.grid;
    let ctaid = [
        (i % gx as u64) as u32,
        ((i / gx as u64) % gy as u64) as u32,
        (i / (gx as u64 * gy as u64)) as u32,
    ];
    w.shared.iter_mut().for_each(|b| *b = 0);
    w.bars = Bars::default();
    for (k, warp) in w.warps.iter_mut().enumerate() {
        warp.reset(cx, k as u32, ctaid);
    }
    loop {
        let mut progressed = false;
        for k in 0..w.warps.len() {
            if w.warps[k].runnable() != 0 {
                let mut cta = CtaCtx {
                    shared: &mut w.shared,
                    bars: &mut w.bars,
                    ctaid,
                };
                w.warps[k].run(cx, &mut cta, budget, SLICE)?;
                progressed = true;
            }
        }
        if w.warps.iter().all(|x| x.live == 0) {
            return Ok(());
        }
        if cx.abort.load(Ordering::Relaxed) {
            return Ok(());
        }
        let released = release_barriers(w);
        if !progressed && !released {
            return Err(deadlock(cx, w, ctaid));
        }
    }
}

fn release_barriers(w: &mut Worker) -> bool {
    let live: u32 = w.warps.iter().map(|x| x.live.count_ones()).sum();
    let mut any = false;
    for id in 0..16 {
        let arrived = w.bars.arrived[id];
        if arrived == 0 {
            continue;
        }
        let expected = w.bars.count[id].unwrap_or(live).min(live.max(1));
        if arrived < expected {
            continue;
        }
        let acc = w.bars.acc[id];
        for warp in w.warps.iter_mut() {
            warp.release_barrier(id, acc);
        }
        w.bars.arrived[id] = 0;
        any = true;
    }
    any
}

fn deadlock(cx: &Launch<'_>, w: &Worker, ctaid: [u32; 3]) -> ExecError {
    let live: u32 = w.warps.iter().map(|x| x.live.count_ones()).sum();
    for warp in &w.warps {
        if warp.bar_wait != 0 {
            let l = warp.bar_wait.trailing_zeros();
            let id = warp.bar_id[l as usize] as usize;
            let pc = warp.pc_of(l);
            let line = cx
                .prog
                .code
                .get(pc.wrapping_sub(1) as usize)
                .map_or(0, |i| i.line);
            let expected = w.bars.count[id].unwrap_or(live);
            return cx.fault(
                line,
                ctaid,
                warp.tid_of(cx, l),
                format!(
                    "barrier deadlock: barrier {id} has {} of {expected} threads arrived and no other thread of the block can run",
                    w.bars.arrived[id]
                ),
            );
        }
    }
    cx.fault(
        0,
        ctaid,
        [0, 0, 0],
        "deadlock: no thread of the block can make progress".into(),
    )
}
