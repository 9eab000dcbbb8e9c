//! What a worker process executes requests against.
//!
//! One trait, [`Backend`], with one implementation per device kind: [`EmuBackend`] (the PTX
//! emulator, for CI and machines without a GPU) and [`CudaBackend`] (an NVIDIA GPU through the
//! CUDA driver API, loaded at run time). Both sit behind the same contract, client and pool,
//! so the whole path is tested everywhere.
//!
//! What every backend honours (the emulator gets most for free; see `cuda/mod.rs` for how the
//! GPU does):
//! - new allocations read as zeros, whatever an earlier tenant of the device left there;
//! - `reset` frees everything and unloads every module with state, returning to the state at
//!   start but for stateless modules kept loaded for a lookup by content (cuda: `Modules::end_ids`);
//! - module loads report each kernel's parameter layout (`KernelInfo::param_layout`), from which
//!   the host builds argument blocks;
//! - a module is checked before it is loaded, alike on every backend (`module_check`): an
//!   empty one, one of a PTX ISA newer than the loader compiles, or one whose target the device
//!   cannot run is `LoadFailed`, with the same words and fix everywhere;
//! - a launch names its kernel by index in its module; an index outside the module is
//!   `InvalidArgument`;
//! - a launch past the device's limits (`WorkerInfo::launch_limits`) is `LaunchFailed` before
//!   anything runs (emu: [`LaunchLimits::check`](crate::contract::LaunchLimits::check), naming
//!   the limit and the value; cuda: the driver's refusal, listing the limits; the host checks
//!   them all with `LaunchLimits::check` before a launch leaves it);
//! - a kernel that runs past its deadline fails with `DeadlineExceeded` (emu: a step limit made
//!   from `Launch::deadline`; cuda: the deadline itself, enforced when the worker waits for the
//!   kernel and by a watchdog), a fault with `KernelFault`; both poison the worker. An error
//!   reported after the launch returned names the launch by its ordinal in the lease
//!   ([`Backend::number_launches_from`]), so a later op is never blamed for it;
//! - the device time the launches took is measured ([`Backend::gpu_time`]) and reported to the
//!   host with every response.

pub mod cuda;
mod emu;
mod module_check;
mod null;
pub mod recorded;
mod source;

pub use cuda::CudaBackend;
pub use emu::{
    emu_step_limit, EmuBackend, EMU_LANE_INSTRUCTIONS_PER_SECOND, EMU_MAX_DEVICE_MAPPINGS,
    EMU_MAX_RESIDENT_CTAS,
};
pub use null::NullBackend;

use std::time::Duration;

use crate::contract::actor::ControlBlock;
use crate::contract::messages::GraphOp;
use crate::contract::{BackendKind, Compiled, ErrorKind, Launch, LoadedModule, WorkerInfo};

/// A refused or failed backend operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct BackendError {
    pub kind: ErrorKind,
    pub message: String,
}

impl BackendError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> BackendError {
        BackendError {
            kind,
            message: message.into(),
        }
    }
}

/// A device as one worker process sees it. Calls are synchronous: when one returns, its effect is
/// complete — except `launch` on an asynchronous backend (cuda), which queues the kernel and
/// reports its errors at `sync` (or at the next op that waits for it).
pub trait Backend {
    fn info(&self) -> WorkerInfo;
    /// Allocates `bytes` (> 0) of zeroed device memory; returns its device address.
    fn alloc(&mut self, bytes: u64) -> Result<u64, BackendError>;
    /// Frees an allocation made by `alloc` (or `alloc_shareable`), by its start address.
    fn free(&mut self, addr: u64) -> Result<(), BackendError>;
    /// As [`Backend::alloc`], memory that [`Backend::export`] can hand to another worker of the
    /// machine. By default plain `alloc`, whose memory then cannot be exported.
    fn alloc_shareable(&mut self, bytes: u64) -> Result<u64, BackendError> {
        self.alloc(bytes)
    }
    /// Waits for the queued work, then returns the handle through which another worker
    /// ([`Backend::copy_from_peer`]) copies out of the allocation starting at `addr`.
    fn export(&mut self, addr: u64) -> Result<Vec<u8>, BackendError> {
        let _ = addr;
        Err(BackendError::new(
            ErrorKind::Unsupported,
            "this backend shares no memory with other workers",
        ))
    }
    /// Copies `len` bytes from `offset` of the allocation another worker exported as `handle`
    /// to `dst`, and waits for the copy. `Unsupported` when this worker cannot reach that memory
    /// (the caller then copies another way).
    fn copy_from_peer(
        &mut self,
        dst: u64,
        handle: &[u8],
        offset: u64,
        len: u64,
    ) -> Result<(), BackendError> {
        let _ = (dst, handle, offset, len);
        Err(BackendError::new(
            ErrorKind::Unsupported,
            "this backend reaches no other worker's memory",
        ))
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), BackendError>;
    /// [`Backend::write`] of bytes in the channel's data region, which the host reuses once the
    /// write is answered: a backend may copy them aside and answer before the device has them,
    /// ordering the copy before everything that follows (cuda: small writes, `staging`).
    fn write_staged(&mut self, addr: u64, data: &[u8]) -> Result<(), BackendError> {
        self.write(addr, data)
    }
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), BackendError>;
    /// The next `write` or `read` (one copy between host and device memory) needs only the
    /// launches numbered through `last` (0: none) finished, not every queued one, and may run
    /// beside the later ones (the copies' `after`, [`crate::contract::messages::Request::Write`]).
    /// A backend that runs its copies in order with everything else (the default) ignores it:
    /// waiting for more than was asked is always allowed.
    fn copy_after(&mut self, last: u64) {
        let _ = last;
    }
    fn copy(&mut self, dst: u64, src: u64, len: u64) -> Result<(), BackendError>;
    fn load_module(&mut self, ptx: &str) -> Result<LoadedModule, BackendError>;
    /// Compiles CUDA C and loads it.
    fn load_source(&mut self, source: &str, options: &[&str])
        -> Result<LoadedModule, BackendError>;
    /// [`Backend::load_module`] through the host's module cache (`Request::LoadModuleCached`):
    /// `image`, unless empty, is what an earlier load of exactly `ptx` compiled on a device like
    /// this one, loaded without compiling where the device takes it; the answer carries what this
    /// load compiled. By default a plain load that compiles nothing to keep.
    fn load_module_cached(
        &mut self,
        ptx: &str,
        image: &[u8],
    ) -> Result<(LoadedModule, Compiled), BackendError> {
        let _ = image;
        Ok((self.load_module(ptx)?, Compiled::default()))
    }
    /// [`Backend::load_source`] through the host's module cache: the answer carries the PTX
    /// NVRTC produced, and what was compiled from it. By default a plain load.
    fn load_source_cached(
        &mut self,
        source: &str,
        options: &[&str],
    ) -> Result<(LoadedModule, Compiled), BackendError> {
        Ok((self.load_source(source, options)?, Compiled::default()))
    }
    fn unload_module(&mut self, id: u32) -> Result<(), BackendError>;
    /// The name of kernel `kernel` (an index into its module's kernel list) of module `module`,
    /// if both exist: for messages about a launch, which names its kernel by index.
    fn kernel_name(&self, module: u32, kernel: u32) -> Option<&str>;
    /// Runs (emu) or queues (cuda) one kernel. An unknown module or a kernel index outside its
    /// module's list is `InvalidArgument`; the backend checks the rest against the kernel and the
    /// device.
    fn launch(&mut self, launch: &Launch<'_>) -> Result<(), BackendError>;
    /// Launches `launches` in order, as [`Backend::launch`] each would, stopping at the first that
    /// fails: its index and error (those before it were launched, those after it were not). The
    /// worker hands a burst of posted launches over together, so a backend can check them all
    /// before it makes its driver calls back to back.
    fn launch_batch(&mut self, launches: &[Launch<'_>]) -> Result<(), (usize, BackendError)> {
        for (i, l) in launches.iter().enumerate() {
            self.launch(l).map_err(|e| (i, e))?;
        }
        Ok(())
    }
    /// The launches handed over next (by [`Backend::launch`] or [`Backend::launch_batch`]) are
    /// the lease's launches number `first`, `first + 1`, … (from 1; the serving loop counts them,
    /// those it drops after a failed one included, and starts again at `reset`). A backend whose
    /// errors can surface after `launch` returned (cuda: at the next wait) names the launch by
    /// it; the default ignores it.
    fn number_launches_from(&mut self, first: u64) {
        let _ = first;
    }
    /// Sets `len` bytes at `addr` (both multiples of 4, within one allocation) to `value`
    /// repeated, little-endian, in order with the rest. By default, a write of the pattern.
    fn fill(&mut self, addr: u64, len: u64, value: u32) -> Result<(), BackendError> {
        let n = usize::try_from(len)
            .map_err(|_| BackendError::new(ErrorKind::OutOfBounds, "fill too large"))?;
        let pattern: Vec<u8> = value
            .to_le_bytes()
            .iter()
            .copied()
            .cycle()
            .take(n)
            .collect();
        self.write(addr, &pattern)
    }
    /// Records `ops` as a graph to replay; its id (from 1, never reused). Every launch names a
    /// loaded module's kernel; the rest is checked as the ops are (at each replay, or, on cuda,
    /// once here).
    fn graph_create(&mut self, ops: &[GraphOp<'_>]) -> Result<u32, BackendError> {
        let _ = ops;
        Err(BackendError::new(
            ErrorKind::Unsupported,
            "this backend records no graphs",
        ))
    }
    /// Replaces the argument block of launch `node` of `graph` for the next replays.
    fn graph_set_args(&mut self, graph: u32, node: u32, args: &[u8]) -> Result<(), BackendError> {
        let _ = (node, args);
        Err(recorded::no_graph(graph))
    }
    /// Writes `writes` (16-byte records: a device address, then the 8 bytes to store there),
    /// then replays `graph` `times` times, all in order with everything else.
    fn graph_replay(&mut self, graph: u32, times: u32, writes: &[u8]) -> Result<(), BackendError> {
        let _ = (times, writes);
        Err(recorded::no_graph(graph))
    }
    fn graph_destroy(&mut self, graph: u32) -> Result<(), BackendError> {
        Err(recorded::no_graph(graph))
    }
    /// Waits for everything queued and reports the first deferred error.
    fn sync(&mut self) -> Result<(), BackendError>;
    /// [`Backend::sync`] for the call numbered `seq`, where the device can first be asked to store
    /// `seq` into the channel's completion word ([`BackendOptions::completion_word`]) once
    /// everything queued before it has finished, so the host sees the success before this
    /// process answers (cuda: `cuStreamWriteValue32`). A device that cannot just syncs.
    fn sync_signalling(&mut self, seq: u32) -> Result<(), BackendError> {
        let _ = seq;
        self.sync()
    }
    /// Frees every allocation and unloads every module.
    fn reset(&mut self) -> Result<(), BackendError>;
    /// Host memory `base..base+len` of this process (an attached guest memory) is mapped and
    /// backed; later `write`s and `read`s may use slices inside it. Called again with the same
    /// `base` and a larger `len` when the memory grew. Backends that can make copies from it
    /// faster (cuda: page-locking) do so here or lazily; the default does nothing.
    fn map_host(&mut self, base: *mut u8, len: usize) -> Result<(), BackendError> {
        let _ = (base, len);
        Ok(())
    }
    /// The mapping at `base` (as last given to `map_host`) is about to go away: drop whatever
    /// `map_host` set up for it. No later copy uses it.
    fn unmap_host(&mut self, base: *mut u8, len: usize) {
        let _ = (base, len);
    }
    /// Makes host memory `base..base+len` of this process (part of an attached memory, mapped
    /// shared with the host) visible to kernels: the device address kernels reach `base` at.
    /// Kernels and the host then share those bytes while kernels run (cuda: page-locked with
    /// `CU_MEMHOSTREGISTER_DEVICEMAP`; the emulator: an allocation over the same bytes). The
    /// mapping counts against no device memory. `unmap_device` undoes it (the worker calls it
    /// for every such mapping before the memory is detached, at `reset` too); the caller keeps
    /// the memory mapped until then.
    fn map_device(&mut self, base: *mut u8, len: usize) -> Result<u64, BackendError> {
        let _ = (base, len);
        Err(BackendError::new(
            ErrorKind::Unsupported,
            "this backend maps no host memory for kernels",
        ))
    }
    /// Undoes the [`Backend::map_device`] that answered `addr`. Refused (`InvalidArgument`) while
    /// a persistent kernel runs: it may be using the memory.
    fn unmap_device(&mut self, addr: u64) -> Result<(), BackendError> {
        Err(BackendError::new(
            ErrorKind::InvalidArgument,
            format!("{addr:#x} is not mapped for kernels"),
        ))
    }
    /// Starts `launch` as a persistent kernel: beside everything else (cuda: on a stream of its
    /// own; the emulator: on threads of its own, every CTA at once), exempt from its deadline,
    /// not waited for by `sync`, not counted among the lease's numbered launches. It is a
    /// cooperative launch, so its blocks may synchronise grid-wide (cooperative groups'
    /// `this_grid().sync()`): its whole grid is checked to fit on the device at once, and refused
    /// (`LaunchFailed`, naming the limit) where it does not, or where the device cannot launch
    /// cooperative kernels. Before
    /// returning, marks `control` started ([`ControlBlock::start`]); once the kernel has ended,
    /// marks it ended, saying how ([`ControlBlock::finish`]), from whatever thread sees the end.
    /// A launch refused at once is an error here and leaves `control` alone. `reset` while one
    /// runs fails with `KernelFault` (the host stops persistent kernels first, or ends the
    /// worker).
    fn launch_persistent(
        &mut self,
        launch: &Launch<'_>,
        control: ControlBlock,
    ) -> Result<(), BackendError> {
        let _ = (launch, control);
        Err(BackendError::new(
            ErrorKind::Unsupported,
            "this backend runs no persistent kernels",
        ))
    }
    /// Whether a persistent kernel started here has not yet been seen to end.
    fn persistent_running(&self) -> bool {
        false
    }
    /// A fault of a persistent kernel started here, once one has faulted: every later op but
    /// `ping` and `info` fails with it (`KernelFault`, poisoning the worker), as on a GPU, whose
    /// context a fault leaves unusable. A backend that reports it from its own ops (cuda) leaves
    /// this `None`.
    fn persistent_fault(&self) -> Option<BackendError> {
        None
    }
    /// The time the device has spent on this worker's launches since the worker started, as far
    /// as it is known finished: never goes back, and is published with every response. The
    /// emulator times each launch it executes; cuda charges each run of launches made without
    /// an idle or a wait in between (cut every millisecond or so while the worker stays busy)
    /// from its first launch to its last kernel's end, read on the host's clock where a sync
    /// sees it, else stamped by the device (so the gaps between launches made back to back,
    /// microseconds, count too; the device's idle time between runs does not). A backend that
    /// measures nothing reports zero.
    fn gpu_time(&mut self) -> Duration {
        Duration::ZERO
    }
    /// Records mark `mark` (checked below `MAX_MARKS` by the caller) behind everything handed
    /// over so far, without waiting for it: every launch, copy and replay before it counts as its
    /// work. Recording it again moves it.
    fn record_mark(&mut self, mark: u32) -> Result<(), BackendError> {
        let _ = mark;
        Err(no_marks())
    }
    /// The device time between the latest records of `start` and `end` (`end` the later), once
    /// `end`'s work has finished: the wait is for that work only, with its faults and deadlines.
    /// `InvalidArgument` for a mark never recorded.
    fn mark_elapsed(&mut self, start: u32, end: u32) -> Result<Duration, BackendError> {
        let _ = (start, end);
        Err(no_marks())
    }
    /// Whether the work before the latest record of `mark` has finished, without waiting (a mark
    /// never recorded has).
    fn mark_done(&mut self, mark: u32) -> Result<bool, BackendError> {
        let _ = mark;
        Err(no_marks())
    }
    /// Waits for the work before the latest record of `mark` only (a mark never recorded: none),
    /// reporting a fault or missed deadline in it.
    fn wait_mark(&mut self, mark: u32) -> Result<(), BackendError> {
        let _ = mark;
        Err(no_marks())
    }
    /// The worker has nothing more to do for now and is about to wait for the host: finish
    /// anything batched (cuda: record the completion event of the open launch group, so the
    /// watchdog can see it).
    fn flush(&mut self) {}
}

fn no_marks() -> BackendError {
    BackendError::new(
        ErrorKind::Unsupported,
        "this backend records no marks (stream events)",
    )
}

/// A mark asked about that was never recorded: nothing to measure from or to.
pub(crate) fn never_recorded(mark: u32) -> BackendError {
    BackendError::new(
        ErrorKind::InvalidArgument,
        format!("mark {mark} was never recorded; record it before asking for the time since it"),
    )
}

/// Options for opening a backend in a worker process.
#[derive(Debug, Clone)]
pub struct BackendOptions {
    /// Most bytes of device memory the worker may hold at once.
    pub device_memory: u64,
    /// Emulator threads for CTAs (0: one per core).
    pub emu_threads: usize,
    /// Serve with [`NullBackend`] whatever the kind says (tests and IPC benchmarks).
    pub null: bool,
    /// The host/worker data region (address, bytes) in this process, for the cuda backend to
    /// page-lock (`cuMemHostRegister`) so writes and reads are DMA.
    pub data_region: Option<(usize, usize)>,
    /// The channel's completion word (its address in this process, in a page of its own use),
    /// for [`Backend::sync_signalling`].
    pub completion_word: Option<usize>,
}

/// Opens the backend a worker was asked for. Errors are for people: the worker reports them to
/// the host, which fails the spawn with them.
pub fn open(kind: BackendKind, opts: &BackendOptions) -> Result<Box<dyn Backend>, String> {
    if opts.null {
        return Ok(Box::new(NullBackend));
    }
    match kind {
        BackendKind::Emu => Ok(Box::new(EmuBackend::new(
            opts.device_memory,
            opts.emu_threads,
        ))),
        BackendKind::Cuda => Ok(Box::new(CudaBackend::open(opts)?)),
    }
}
