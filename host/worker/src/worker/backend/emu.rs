//! The emulator backend: device memory and kernels run on the CPU by `tasklet_ptx`.
//!
//! It stands for one device, and checks what it is asked as that device would: a compute
//! capability 8.0 GPU (A100) with [`LaunchLimits::SM_80`] as its launch limits, whose driver
//! compiles PTX up to [`module_check::EMU_ISA`].
//!
//! Persistent kernels ([`Backend::launch_persistent`]) run on threads of their own, one per CTA
//! (so every CTA is resident at once, as a persistent kernel's blocks must be), beside the serving
//! thread, which goes on executing everything else; `persistent.rs` keeps them. Memory they share
//! with the host ([`Backend::map_device`]) is an allocation over the worker's mapping of it.

mod persistent;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tasklet_ptx::{DeviceMemory, ExecError, LaunchParams, MemError, Module};

use std::time::{Duration, Instant};

use super::module_check::{self, Loader};
use super::recorded::{self, Recorded};
use super::{source, Backend, BackendError};
use crate::contract::actor::ControlBlock;
use crate::contract::messages::GraphOp;
use crate::contract::modules::MAX_MODULES;
use crate::contract::{quote, Compiled, ErrorKind, Launch, LaunchLimits, LoadedModule, WorkerInfo};
use persistent::Persistent;
pub use persistent::EMU_MAX_RESIDENT_CTAS;

/// The device the emulator is: what modules are checked against.
const EMULATED: Loader = Loader {
    compute_capability: (8, 0),
    isa: Some(module_check::EMU_ISA),
};

/// Emulator speed per core, in lane-instructions per second, that turns a launch deadline into the
/// emulator's step limit: `deadline × this × cores` (the emulator runs CTAs on every core).
///
/// Deliberately at or above the speed the emulator reaches on a spinning kernel (a release build;
/// `ROUNDTRIP_EMU_RATE=1 cargo bench -p tasklet-benches --bench roundtrip` measures it): a
/// legitimate kernel then always gets at least its deadline, and a runaway is stopped by whichever
/// comes first, the step limit (about the deadline) or the host's timer at deadline + slack, which
/// kills the worker.
/// The lease sees `DeadlineExceeded` either way and the worker is never reused.
pub const EMU_LANE_INSTRUCTIONS_PER_SECOND: u64 = 250_000_000;

/// The step limit that stands in for `deadline` on a machine with `cores` cores (see
/// [`EMU_LANE_INSTRUCTIONS_PER_SECOND`]): at least one step, and never `u64::MAX`, which means "no
/// limit" to the emulator.
pub fn emu_step_limit(deadline: Duration, cores: u64) -> u64 {
    let steps = deadline.as_secs_f64()
        * EMU_LANE_INSTRUCTIONS_PER_SECOND.saturating_mul(cores.max(1)) as f64;
    // `as` saturates.
    (steps as u64).clamp(1, u64::MAX - 1)
}

/// Host memory mappings ([`Backend::map_device`]) a worker may hold at once: each is an entry in
/// every launch's allocation table, which the device cap does not count.
pub const EMU_MAX_DEVICE_MAPPINGS: usize = 4096;

pub struct EmuBackend {
    /// Shared with the threads of persistent kernels, which outlive the call that started them.
    mem: Arc<DeviceMemory>,
    /// Shared with persistent kernels too: unloading a module a persistent kernel runs leaves it
    /// running.
    modules: HashMap<u32, Arc<Module>>,
    next_module: u32,
    /// Start address → (accounted, requested) bytes, for the cap and for `free` of a
    /// non-allocation.
    allocs: HashMap<u64, (u64, u64)>,
    used: u64,
    /// Sum of the requested sizes of live allocations.
    requested: u64,
    cap: u64,
    threads: usize,
    /// The cores the step limit counts (see [`emu_step_limit`]), read once at start: before the
    /// serving thread is pinned to one of them.
    cores: u64,
    /// Time spent executing launches so far ([`Backend::gpu_time`]).
    executing: Duration,
    /// Graphs, replayed op by op.
    graphs: Recorded,
    /// Device addresses of the host memory mappings.
    mapped: HashSet<u64>,
    /// Persistent kernels started and not yet seen to end.
    persistent: Persistent,
    /// The most `gpu_time` said so far: it never goes back.
    gpu_time_said: Duration,
    /// Each mark's latest record: the launches' executing time then (every launch before it has
    /// run by the time the record is served). Grown to the highest mark recorded.
    marks: Vec<Option<Duration>>,
}

impl EmuBackend {
    /// An emulated device with `device_memory` bytes, running CTAs on `threads` threads (0: one
    /// per core).
    pub fn new(device_memory: u64, threads: usize) -> EmuBackend {
        EmuBackend {
            mem: Arc::new(DeviceMemory::new()),
            modules: HashMap::new(),
            next_module: 1,
            allocs: HashMap::new(),
            used: 0,
            requested: 0,
            cap: device_memory,
            threads,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
            executing: Duration::ZERO,
            graphs: Recorded::default(),
            mapped: HashSet::new(),
            persistent: Persistent::default(),
            gpu_time_said: Duration::ZERO,
            marks: Vec::new(),
        }
    }

    fn mark(&self, mark: u32) -> Result<Duration, BackendError> {
        self.marks
            .get(mark as usize)
            .copied()
            .flatten()
            .ok_or_else(|| super::never_recorded(mark))
    }

    /// The module and kernel index of `l`, once it is checked against the device's limits.
    fn checked(&self, l: &Launch<'_>) -> Result<(&Arc<Module>, usize), BackendError> {
        let module = self.module(l.module)?;
        // Refused here rather than by the emulator: the error names the module, and an unknown
        // kernel is the caller's mistake (`InvalidArgument`), not a launch the emulator refused.
        let kernel = l.kernel as usize;
        if kernel >= module.kernels().len() {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                format!(
                    "module {} has {} kernels: no kernel {}",
                    l.module,
                    module.kernels().len(),
                    l.kernel
                ),
            ));
        }
        // The device's limits, as the GPU it stands for has them (the emulator's own checks below
        // are looser: they guard its arithmetic and memory).
        LaunchLimits::SM_80
            .check(l.grid, l.block, l.shared_mem_bytes, l.args.len())
            .map_err(|e| {
                BackendError::new(
                    ErrorKind::LaunchFailed,
                    format!(
                        "cannot launch kernel {}: {e}",
                        quote::name(&module.kernels()[kernel].name)
                    ),
                )
            })?;
        Ok((module, kernel))
    }

    fn module(&self, id: u32) -> Result<&Arc<Module>, BackendError> {
        self.modules.get(&id).ok_or_else(|| {
            BackendError::new(
                ErrorKind::InvalidArgument,
                format!("no module with id {id}"),
            )
        })
    }
}

/// How a launch the emulator ran (or refused) failed, as the worker reports it.
fn exec_error(e: ExecError) -> BackendError {
    match e {
        ExecError::InvalidLaunch(m) => {
            BackendError::new(ErrorKind::LaunchFailed, quote::text(&m).to_string())
        }
        // A fault's message may carry the kernel's own text (a device assertion's message,
        // file and function): only its start.
        e @ ExecError::Fault { .. } => BackendError::new(
            ErrorKind::KernelFault,
            quote::text(&e.to_string()).to_string(),
        ),
        e @ ExecError::StepLimit { .. } => BackendError::new(
            ErrorKind::DeadlineExceeded,
            format!("kernel deadline exceeded: {e}"),
        ),
    }
}

fn mem_error(e: MemError) -> BackendError {
    let kind = match e {
        MemError::OutOfBounds { .. } => ErrorKind::OutOfBounds,
        MemError::NotAllocated { .. } => ErrorKind::InvalidArgument,
        MemError::AllocFailed { .. } => ErrorKind::OutOfMemory,
    };
    BackendError::new(kind, e.to_string())
}

impl Backend for EmuBackend {
    fn info(&self) -> WorkerInfo {
        WorkerInfo {
            backend: "emu".into(),
            device: "tasklet PTX emulator".into(),
            memory_total: self.cap,
            memory_used: self.used,
            allocations: self.allocs.len() as u32,
            modules: self.modules.len() as u32,
            memory_requested: self.requested,
            device_memory: self.cap,
            compute_capability: EMULATED.compute_capability,
            uuid: String::new(),
            driver_version: 0,
            pinned_data: false,
            launch_limits: LaunchLimits::SM_80,
        }
    }

    fn alloc(&mut self, bytes: u64) -> Result<u64, BackendError> {
        if bytes == 0 {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                "cannot allocate 0 bytes",
            ));
        }
        let accounted = crate::contract::charged_bytes(bytes);
        if accounted > self.cap - self.used {
            return Err(BackendError::new(
                ErrorKind::OutOfMemory,
                format!(
                    "cannot allocate {bytes} bytes: {} of {} bytes in use",
                    self.used, self.cap
                ),
            ));
        }
        let addr = self.mem.alloc(bytes).map_err(mem_error)?;
        self.allocs.insert(addr, (accounted, bytes));
        self.used += accounted;
        self.requested += bytes;
        Ok(addr)
    }

    fn free(&mut self, addr: u64) -> Result<(), BackendError> {
        let Some(&(accounted, requested)) = self.allocs.get(&addr) else {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                format!("{addr:#x} is not the start of an allocation"),
            ));
        };
        self.mem.free(addr).map_err(mem_error)?;
        self.allocs.remove(&addr);
        self.used -= accounted;
        self.requested -= requested;
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), BackendError> {
        self.mem.write(addr, data).map_err(mem_error)
    }

    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.mem.read(addr, out).map_err(mem_error)
    }

    fn copy(&mut self, dst: u64, src: u64, len: u64) -> Result<(), BackendError> {
        self.mem.copy(dst, src, len).map_err(mem_error)
    }

    fn load_module(&mut self, ptx: &str) -> Result<LoadedModule, BackendError> {
        if self.modules.len() >= MAX_MODULES {
            return Err(BackendError::new(
                ErrorKind::OutOfMemory,
                format!("a worker holds at most {MAX_MODULES} modules"),
            ));
        }
        module_check::check(ptx, &EMULATED)?;
        let module = Module::parse(ptx).map_err(|e| {
            BackendError::new(
                ErrorKind::LoadFailed,
                format!("PTX line {}: {}", e.line, quote::text(&e.message)),
            )
        })?;
        let id = self.next_module;
        self.next_module = self
            .next_module
            .checked_add(1)
            .ok_or_else(|| BackendError::new(ErrorKind::OutOfMemory, "module ids exhausted"))?;
        let kernels = module.kernels().into();
        let variable_bytes = module.variable_bytes();
        self.modules.insert(id, Arc::new(module));
        Ok(LoadedModule {
            id,
            kernels,
            variable_bytes,
            text_bytes: ptx.len() as u64,
        })
    }

    /// Compiles with NVRTC for `compute_80` unless the options name an architecture, and loads
    /// the PTX like `load_module`.
    fn load_source(
        &mut self,
        source: &str,
        options: &[&str],
    ) -> Result<LoadedModule, BackendError> {
        let ptx = source::compile(source, options, None)?;
        self.load_module(&ptx).map_err(source::in_compiled_ptx)
    }

    /// The emulator compiles no PTX, so a PTX load keeps nothing; a CUDA C load keeps the PTX
    /// NVRTC produced, which a later load of the same source on any worker loads instead.
    fn load_source_cached(
        &mut self,
        source: &str,
        options: &[&str],
    ) -> Result<(LoadedModule, Compiled), BackendError> {
        let ptx = source::compile(source, options, None)?;
        let loaded = self.load_module(&ptx).map_err(source::in_compiled_ptx)?;
        let compiled = Compiled {
            ptx,
            ..Compiled::default()
        };
        Ok((loaded, compiled))
    }

    fn unload_module(&mut self, id: u32) -> Result<(), BackendError> {
        self.modules.remove(&id).map(drop).ok_or_else(|| {
            BackendError::new(
                ErrorKind::InvalidArgument,
                format!("no module with id {id}"),
            )
        })
    }

    fn kernel_name(&self, module: u32, kernel: u32) -> Option<&str> {
        let k = self.modules.get(&module)?.kernels().get(kernel as usize)?;
        Some(&k.name)
    }

    fn launch(&mut self, l: &Launch<'_>) -> Result<(), BackendError> {
        let (module, kernel) = self.checked(l)?;
        let params = LaunchParams {
            grid: l.grid,
            block: l.block,
            shared_mem_bytes: l.shared_mem_bytes,
            args: l.args,
            step_limit: emu_step_limit(l.deadline, self.cores),
            threads: self.threads,
        };
        // The emulator checks the launch's shape itself (dimensions, argument block, shared
        // memory), as it must before it runs anything: those checks guard its own arithmetic and
        // memory.
        // The emulator's device time is the time it spends executing (on every core it uses),
        // whatever the outcome: a kernel stopped at its step limit used it too.
        let began = Instant::now();
        let ran = module.launch_by_index(kernel, &self.mem, &params);
        self.executing = self.executing.saturating_add(began.elapsed());
        match ran {
            Ok(_) => Ok(()),
            Err(e) => Err(exec_error(e)),
        }
    }

    /// Runs the kernel on `grid` threads of its own (one per CTA: all resident at once, as its
    /// blocks may wait for each other or for the host) with no step limit, as a cooperative
    /// launch (a grid workspace for `grid.sync()`, see `Module::launch_cooperative_by_index`), and
    /// returns once they are started. What the kernel may use: the allocations and mappings
    /// that exist now (a launch sees those it started with), any module's kernels. Refused at
    /// once (`LaunchFailed`) past [`EMU_MAX_RESIDENT_CTAS`] blocks of persistent kernels running
    /// at once, and for whatever a normal launch is refused for.
    fn launch_persistent(
        &mut self,
        l: &Launch<'_>,
        control: ControlBlock,
    ) -> Result<(), BackendError> {
        let (module, kernel) = self.checked(l)?;
        let module = Arc::clone(module);
        let name = module.kernels()[kernel].name.clone();
        let ctas = l.grid.iter().map(|&d| u64::from(d)).product::<u64>();
        self.persistent.check_room(&name, ctas)?;
        let params = LaunchParams {
            grid: l.grid,
            block: l.block,
            shared_mem_bytes: l.shared_mem_bytes,
            args: l.args,
            step_limit: u64::MAX,
            // At most EMU_MAX_RESIDENT_CTAS (checked above).
            threads: ctas as usize,
        };
        module.check_launch(kernel, &params).map_err(exec_error)?;
        self.persistent.start(
            persistent::Start {
                module,
                kernel,
                name,
                ctas,
                grid: l.grid,
                block: l.block,
                shared_mem_bytes: l.shared_mem_bytes,
                args: l.args.to_vec(),
                memory: Arc::clone(&self.mem),
            },
            control,
        )
    }

    fn persistent_running(&self) -> bool {
        self.persistent.running()
    }

    fn persistent_fault(&self) -> Option<BackendError> {
        self.persistent.fault()
    }

    /// An allocation over the worker's own mapping of the bytes: kernels' stores land in the
    /// memfd the host maps too, and the host's in what kernels read.
    // The trait's contract, not the signature, makes `base` safe to use: the worker keeps the
    // memory mapped until it has unmapped it for kernels (see the SAFETY note below).
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    fn map_device(&mut self, base: *mut u8, len: usize) -> Result<u64, BackendError> {
        if self.mapped.len() >= EMU_MAX_DEVICE_MAPPINGS {
            return Err(BackendError::new(
                ErrorKind::OutOfMemory,
                format!(
                    "a worker holds at most {EMU_MAX_DEVICE_MAPPINGS} memory mappings for kernels: \
                     unmap one first, or map one larger area"
                ),
            ));
        }
        // SAFETY: the caller (the serving loop) keeps `base..base+len` mapped until it has called
        // `unmap_device` for it (before it detaches the memory, at reset too), which removes the
        // allocation and is refused while a persistent kernel (the only launch that outlives a
        // call) runs; the host accesses the memory only through atomics.
        let addr = unsafe { self.mem.map_external(base, len as u64) }.map_err(|e| match e {
            MemError::AllocFailed { reason, .. } => BackendError::new(
                ErrorKind::InvalidArgument,
                format!("cannot map {len} bytes for kernels: {reason}"),
            ),
            other => mem_error(other),
        })?;
        self.mapped.insert(addr);
        Ok(addr)
    }

    fn unmap_device(&mut self, addr: u64) -> Result<(), BackendError> {
        if !self.mapped.contains(&addr) {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                format!("{addr:#x} is not mapped for kernels"),
            ));
        }
        if self.persistent.running() {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                format!(
                    "{addr:#x} stays mapped while a persistent kernel runs: it may be using it \
                     (ask the kernel to terminate and wait for it first)"
                ),
            ));
        }
        self.mem.free(addr).map_err(mem_error)?;
        self.mapped.remove(&addr);
        Ok(())
    }

    fn graph_create(&mut self, ops: &[GraphOp<'_>]) -> Result<u32, BackendError> {
        for (i, op) in ops.iter().enumerate() {
            if let GraphOp::Launch(l) = op {
                if self.kernel_name(l.module, l.kernel).is_none() {
                    return Err(BackendError::new(
                        ErrorKind::InvalidArgument,
                        format!(
                            "graph node {i}: no kernel {} in module {}",
                            l.kernel, l.module
                        ),
                    ));
                }
            }
        }
        self.graphs.create(ops)
    }

    fn graph_set_args(&mut self, graph: u32, node: u32, args: &[u8]) -> Result<(), BackendError> {
        self.graphs.set_args(graph, node, args)
    }

    fn graph_replay(&mut self, graph: u32, times: u32, writes: &[u8]) -> Result<(), BackendError> {
        for (addr, value) in recorded::writes(writes)? {
            self.write(addr, value)?;
        }
        let ops = self.graphs.take(graph)?;
        let r = recorded::replay(self, graph, &ops, times);
        self.graphs.put_back(graph, ops);
        r
    }

    fn graph_destroy(&mut self, graph: u32) -> Result<(), BackendError> {
        self.graphs.destroy(graph)
    }

    fn sync(&mut self) -> Result<(), BackendError> {
        // Every op already ran to completion; persistent kernels are not waited for.
        Ok(())
    }

    /// The launches' executing time, and each persistent kernel's wall time from its start: as it
    /// runs (so a kernel that never ends is accounted too), then, once it has ended, to its end.
    fn gpu_time(&mut self) -> Duration {
        self.executing = self.executing.saturating_add(self.persistent.reap());
        let now = self.executing.saturating_add(self.persistent.running_for());
        // A kernel seen running a moment ago may have ended before that moment: never go back.
        self.gpu_time_said = self.gpu_time_said.max(now);
        self.gpu_time_said
    }

    fn record_mark(&mut self, mark: u32) -> Result<(), BackendError> {
        let i = mark as usize;
        if self.marks.len() <= i {
            self.marks.resize(i + 1, None);
        }
        self.marks[i] = Some(self.executing);
        Ok(())
    }

    /// The launches' executing time between the records: the emulator's device time (a
    /// persistent kernel beside them does not count).
    fn mark_elapsed(&mut self, start: u32, end: u32) -> Result<Duration, BackendError> {
        Ok(self.mark(end)?.saturating_sub(self.mark(start)?))
    }

    /// Every launch before a record has run when the record is served.
    fn mark_done(&mut self, _mark: u32) -> Result<bool, BackendError> {
        Ok(true)
    }

    fn wait_mark(&mut self, _mark: u32) -> Result<(), BackendError> {
        Ok(())
    }

    fn reset(&mut self) -> Result<(), BackendError> {
        // Freeing memory a persistent kernel may be using would leave it reading freed memory,
        // or the host's memory once unmapped: the worker cannot be reused (the serving loop
        // refuses reset before it gets here; this holds for any other caller).
        if self.persistent.running() {
            return Err(BackendError::new(
                ErrorKind::KernelFault,
                "reset while a persistent kernel still runs: the worker cannot be reused",
            ));
        }
        self.executing = self.executing.saturating_add(self.persistent.reap());
        self.marks.clear();
        self.mapped.clear();
        self.mem.clear();
        self.modules.clear();
        self.graphs.clear();
        self.allocs.clear();
        self.used = 0;
        self.requested = 0;
        Ok(())
    }
}
