//! The CUDA backend: one CUDA context per worker process, over the driver API (cudarc's loader,
//! see [`driver`](mod@driver)).
//!
//! - `context`: the device and its primary context;
//! - `memory`: allocation books (cap, bounds of every copy) and the pinned data region;
//! - `host_memory`: attached guest memories, page-locked lazily in chunks;
//! - `device_map`: host memory made visible to kernels (mapped memory: rings, control blocks);
//! - `modules`: PTX through the driver JIT, kernel signatures from `tasklet_ptx`, a module cache;
//! - `launch`: asynchronous launches with deadlines and the watchdog, and their device time;
//! - `graphs`: runs of launches handed to the driver as one launch of a cached CUDA graph;
//! - `signal`: the channel's completion word, stored by the device when a sync's kernels end;
//! - `persistent`: persistent kernels, on a stream of their own, outside the launch queue;
//! - `staging`: small writes answered before their copy has run;
//! - `occupancy`: whether a grid can be resident all at once (persistent kernels need it);
//! - `errors`: driver results → typed kinds with the driver's words.
//!
//! Ordering: everything runs on the worker's one (non-blocking) stream, so an allocation's
//! zeroing, copies and kernels execute in the order the host sent them; reads and large writes
//! wait for their stream before they return (the host may reuse or read its memory then), a small
//! write only for its bytes to be staged (`staging`). Launches are
//! asynchronous (posted: the worker queues the kernel and takes the next request, tracking
//! launches in groups under one event, see `launch`); every other op except `info` first waits
//! for the queued kernels, deadline-aware, so an op never blocks behind a runaway kernel: it fails
//! with `DeadlineExceeded` at the kernel's deadline instead. `sync` is exactly that wait plus a check
//! that the stream finished without error.
//!
//! A persistent kernel is the exception: it runs on a stream of its own, beside all that, and
//! nothing of the above waits for it (see `persistent`).
//!
//! After a fault or a missed deadline the backend is poisoned: every op but `info` fails with that
//! error, without touching the driver (the host kills the process on seeing it).

mod context;
mod device_map;
pub mod driver;
mod errors;
mod graphs;
mod host_memory;
mod launch;
mod marks;
mod memory;
mod modules;
mod occupancy;
mod persistent;
mod signal;
mod staging;
mod start_steps;
mod user_graphs;

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{module_check, source, Backend, BackendError, BackendOptions};
use crate::contract::actor::{ControlBlock, Exit};
use crate::contract::messages::GraphOp;
use crate::contract::{quote, Compiled, ErrorKind, Launch, LoadedModule, WorkerInfo};
use device_map::DeviceMaps;
use driver::*;
use errors::LoadTarget;
use host_memory::HostMemory;
use launch::{ReadyLaunch, Refused, Timeline};
use memory::{Allocations, Pinned};
use modules::Modules;
use persistent::Persistent;
use signal::CompletionWord;
use staging::{Staging, STAGED_WRITE_MAX};
use start_steps::StartSteps;

pub use driver::NO_DRIVER;
pub use launch::{GROUP_MAX, MAX_PENDING, WATCHDOG_GRACE};

/// Opens device 0's primary context and makes it current on this thread, as a worker does (for
/// tools that measure the driver beside the backend, e.g. `benches/probes/sync_paths.rs`).
pub fn open_context(drv: &'static Driver) -> Result<CuContext, String> {
    context::open(drv).map(|d| d.ctx)
}

/// Most host time between two answers that carry this worker's GPU time to the host: a sync the
/// completion word would answer is answered by the worker instead once this has passed since
/// the last such answer and a sync since was answered by the word (see `Backend::gpu_time`
/// below), so a tenant that only launches and syncs is charged as it goes and its `gpu-seconds`
/// quota bites within about this much (or one sync's kernels, where syncs are further apart).
pub const REPORT_EVERY: Duration = Duration::from_millis(1);

/// Dynamic shared memory a kernel may use without opting in.
const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;
const CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: i32 = 0;
const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: i32 = 8;

/// 16-byte aligned scratch for argument blocks (parameters declared `.align 16`).
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Chunk([u8; 16]);

pub struct CudaBackend {
    drv: &'static Driver,
    dev: context::Device,
    mem: Allocations,
    modules: Modules,
    timeline: Arc<Timeline>,
    args: Vec<Chunk>,
    /// The launches of a `launch_batch` between its checks and its driver calls (kept: no
    /// allocation per batch).
    batch: Vec<ReadyLaunch>,
    poisoned: Option<BackendError>,
    pinned: Option<Pinned>,
    /// Where a sync's success is signalled to the host (`Backend::sync_signalling`).
    signal: Option<CompletionWord>,
    /// Attached guest memories (`Backend::map_host`), registered as copies use them.
    host: HostMemory,
    /// Asynchronous work outside the launch queue (zeroing of new memory, device-to-device
    /// copies) issued since the last `sync`: `sync` then also checks the stream itself.
    unchecked_async: bool,
    /// Small writes' staging memory (`None` where it could not be made), and whether a staged
    /// copy may still be queued on the worker's stream.
    staging: Option<Staging>,
    staged: bool,
    /// The ordinal of the next launch handed over (`Backend::number_launches_from`).
    next_ordinal: u64,
    /// The last sync was answered through the completion word, so the host skips its response
    /// and the GPU time that response carries (see `Backend::gpu_time`).
    answered_by_word: bool,
    /// When an answer the host reads (not one the completion word stood in for) last carried
    /// the GPU time ([`REPORT_EVERY`]), and whether a sync the word answered came since.
    reported: Instant,
    unreported: bool,
    /// The last sync was answered by the worker only to carry the GPU time: its answer gives
    /// the time the watchdog has counted, and counts nothing itself (see `Backend::gpu_time`).
    report_only: bool,
    /// The tenant's recorded graphs (`user_graphs`).
    user_graphs: user_graphs::UserGraphs,
    /// Host memory mapped for kernels (`Backend::map_device`).
    device_maps: DeviceMaps,
    /// The persistent kernel, its stream and its watcher (`persistent`).
    persistent: Persistent,
    /// Shareable allocations freed while a persistent kernel ran, given back to the device once
    /// none runs: they are `cuMemAlloc`'s, and `cuMemFree` waits for every running kernel.
    deferred_frees: Vec<CuDevicePtr>,
    /// The launches the next copy waits for, where the host said (`Backend::copy_after`).
    copy_after: Option<u64>,
    /// The stream copies that need not wait for every queued kernel go on (made at the first),
    /// so the copy engine moves their bytes while the kernels run on the worker's stream.
    copy_stream: Option<WorkStream>,
    /// The stream events' CUDA events, by mark slot (`marks`).
    marks: marks::Marks,
}

impl CudaBackend {
    /// Loads the driver, opens device 0 and its context, registers the data region, starts the
    /// watchdog. Errors are for people: the host shows them when the worker cannot start.
    pub fn open(opts: &BackendOptions) -> Result<CudaBackend, String> {
        let mut steps = StartSteps::new();
        let drv = driver::driver()?;
        steps.done("driver and cuInit");
        let dev = context::open(drv)?;
        steps.done("context");
        let timeline = Timeline::start(drv, dev.ctx, dev.stream)?;
        steps.done("watchdog");
        let pinned = match opts.data_region {
            Some((addr, len)) => {
                match Pinned::register(drv, addr as *mut u8, len, 0, "data region") {
                    Ok(p) => Some(p),
                    Err(why) => {
                        eprintln!(
                        "tasklet worker {}: {why}; writes and reads go through pageable memory (slower)",
                        std::process::id()
                    );
                        None
                    }
                }
            }
            None => None,
        };
        steps.done("data region pinned");
        // Made now, before any kernel runs: page-locking memory waits for every running kernel.
        let staging = Staging::open(drv)
            .map_err(|why| {
                eprintln!(
                    "tasklet worker {}: {why}; every write waits for its copy",
                    std::process::id()
                )
            })
            .ok();
        let signal = opts.completion_word.and_then(|addr| {
            CompletionWord::register(drv, addr)
                .map_err(|why| {
                    eprintln!(
                        "tasklet worker {}: {why}; syncs are answered by the worker alone",
                        std::process::id()
                    )
                })
                .ok()
        });
        steps.done("staging and completion word");
        steps.report(&dev.uuid);
        // Device printf output goes to this process's stdout; send it where emulated printf
        // goes (stderr, which is the host's).
        // SAFETY: plain dup2 of our own standard descriptors.
        unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) };
        let cap = opts.device_memory.min(dev.total_memory);
        let ctx = dev.ctx;
        Ok(CudaBackend {
            drv,
            dev,
            mem: Allocations::new(cap),
            modules: Modules::new(),
            timeline,
            args: vec![Chunk([0; 16]); 64],
            batch: Vec::with_capacity(64),
            poisoned: None,
            pinned,
            signal,
            host: HostMemory::default(),
            unchecked_async: false,
            staging,
            staged: false,
            next_ordinal: 1,
            answered_by_word: false,
            reported: Instant::now(),
            user_graphs: user_graphs::UserGraphs::default(),
            unreported: false,
            report_only: false,
            device_maps: DeviceMaps::default(),
            persistent: Persistent::new(drv, ctx),
            deferred_frees: Vec::new(),
            copy_after: None,
            copy_stream: None,
            marks: marks::Marks::default(),
        })
    }

    /// Keeps a poisoning error so every later op fails the same way.
    fn fail(&mut self, e: BackendError) -> BackendError {
        if e.kind.poisons_worker() && self.poisoned.is_none() {
            self.poisoned = Some(e.clone());
        }
        e
    }

    fn usable(&self) -> Result<(), BackendError> {
        match &self.poisoned {
            Some(e) => Err(BackendError::new(
                e.kind,
                format!("worker unusable after an earlier error: {}", e.message),
            )),
            // The context faulted under a persistent kernel (its watcher saw it): reported by
            // the next op, as a fault under a queued kernel is.
            None => self.persistent.fault().map_or(Ok(()), Err),
        }
    }

    /// Usable, and every queued kernel finished within its deadline.
    fn ready(&mut self) -> Result<(), BackendError> {
        self.usable().map_err(|e| self.fail(e))?;
        self.timeline.drain().map_err(|e| self.fail(e))
    }

    fn call(&mut self, r: Result<(), CallError>, what: &str) -> Result<(), BackendError> {
        r.map_err(|e| {
            let err = errors::call_error(self.drv, e, what);
            self.fail(err)
        })
    }

    fn load_target(&self) -> LoadTarget {
        LoadTarget::new(self.dev.compute_capability, self.dev.driver_version)
    }

    fn unload(&mut self, module: CuModule) -> Result<(), BackendError> {
        // Cached graphs may hold the module's functions.
        self.timeline.forget_graphs();
        // SAFETY: a module this backend loaded and no longer refers to; the queue is drained.
        let r = unsafe { (self.drv.module_unload)(module) };
        self.call(check("cuModuleUnload", r), "unloading a module")
    }

    /// What launching `l` needs, or why it cannot be: its function and name, with the function
    /// opted in to the dynamic shared memory asked for.
    fn check_launch(&mut self, l: &Launch<'_>) -> Result<(CuFunction, Arc<str>), BackendError> {
        let k = self.modules.kernel(l.module, l.kernel)?;
        // The driver copies as many bytes as the block has and the kernel reads as many as its
        // parameters take: a block of any other size would have it read past what was given.
        if l.args.len() != k.arg_bytes as usize {
            return Err(BackendError::new(
                ErrorKind::LaunchFailed,
                format!(
                    "kernel `{}` takes a {}-byte argument block, {} bytes given",
                    k.name,
                    k.arg_bytes,
                    l.args.len()
                ),
            ));
        }
        // Refused here for both ways a launch reaches the driver: a run of launches goes as one
        // graph launch, and whether the driver refuses an empty grid when it updates a kernel node
        // is not something to build on. The device's other limits are the driver's to enforce (its
        // refusal names them all, with its own words); the host checks them all before a launch
        // is sent (`WorkerInfo::launch_limits`).
        if l.grid.contains(&0) || l.block.contains(&0) {
            return Err(BackendError::new(
                ErrorKind::LaunchFailed,
                "grid and block dimensions must all be at least 1",
            ));
        }
        let (function, kernel) = (k.function, Arc::clone(&k.name));
        if l.shared_mem_bytes > DEFAULT_SHARED_LIMIT && l.shared_mem_bytes > k.shared_optin {
            // SAFETY: a function of a loaded module.
            let r = unsafe {
                (self.drv.func_set_attribute)(
                    function,
                    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    l.shared_mem_bytes as i32,
                )
            };
            if r != CUDA_SUCCESS {
                return Err(self.launch_refused(&kernel, l, r, None));
            }
            k.shared_optin = l.shared_mem_bytes;
        }
        Ok((function, kernel))
    }

    fn launch_refused(
        &self,
        kernel: &str,
        l: &Launch<'_>,
        code: CuResult,
        kernel_max_threads: Option<u32>,
    ) -> BackendError {
        errors::launch_error(
            self.drv,
            code,
            kernel,
            l,
            kernel_max_threads,
            &self.dev.limits,
        )
    }
}

impl Backend for CudaBackend {
    fn info(&self) -> WorkerInfo {
        WorkerInfo {
            backend: "cuda".into(),
            device: self.dev.name.clone(),
            memory_total: self.mem.cap,
            memory_used: self.mem.used,
            allocations: self.mem.len() as u32,
            modules: self.modules.len() as u32,
            memory_requested: self.mem.requested,
            device_memory: self.dev.total_memory,
            compute_capability: self.dev.compute_capability,
            uuid: self.dev.uuid.clone(),
            driver_version: self.dev.driver_version,
            pinned_data: self.pinned.is_some(),
            launch_limits: self.dev.limits,
        }
    }

    fn alloc(&mut self, bytes: u64) -> Result<u64, BackendError> {
        self.alloc_in(bytes, false)
    }

    fn alloc_shareable(&mut self, bytes: u64) -> Result<u64, BackendError> {
        self.alloc_in(bytes, true)
    }

    fn export(&mut self, addr: u64) -> Result<Vec<u8>, BackendError> {
        let Some(alloc) = self.mem.get(addr) else {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                format!("{addr:#x} is not the start of an allocation"),
            ));
        };
        if !alloc.shareable {
            return Err(BackendError::new(
                ErrorKind::Unsupported,
                format!("the allocation at {addr:#x} was not made to be shared (a group lease's buffers are)"),
            ));
        }
        if self.persistent.running() {
            return Err(beside_persistent());
        }
        let Some(ipc) = &self.drv.ipc else {
            return Err(BackendError::new(
                ErrorKind::Unsupported,
                "this CUDA driver shares no device memory between processes",
            ));
        };
        // A barrier, as a read is: the other worker copies what the queued kernels wrote. Made
        // only once the memory can be shared: a refused export costs the caller nothing more.
        self.sync()?;
        let mut handle = IpcMemHandle([0; IPC_HANDLE_BYTES]);
        // SAFETY: valid out-pointer; `addr` is a live `cuMemAlloc` allocation of ours.
        let r = unsafe { (ipc.get_mem_handle)(&mut handle, addr) };
        if r != CUDA_SUCCESS {
            return Err(BackendError::new(
                ErrorKind::Unsupported,
                format!(
                    "cannot export the allocation at {addr:#x} (cuIpcGetMemHandle: {})",
                    self.drv.describe(r)
                ),
            ));
        }
        Ok(handle.0.to_vec())
    }

    fn copy_from_peer(
        &mut self,
        dst: u64,
        handle: &[u8],
        offset: u64,
        len: u64,
    ) -> Result<(), BackendError> {
        self.ready()?;
        self.mem.check_range(dst, len)?;
        let handle: [u8; IPC_HANDLE_BYTES] = handle.try_into().map_err(|_| {
            BackendError::new(
                ErrorKind::InvalidArgument,
                format!(
                    "an export handle is {IPC_HANDLE_BYTES} bytes, not {}",
                    handle.len()
                ),
            )
        })?;
        let Some(ipc) = &self.drv.ipc else {
            return Err(BackendError::new(
                ErrorKind::Unsupported,
                "this CUDA driver maps no other process's device memory",
            ));
        };
        if len == 0 {
            return Ok(());
        }
        if self.persistent.running() {
            return Err(beside_persistent());
        }
        let n = usize::try_from(len)
            .map_err(|_| BackendError::new(ErrorKind::OutOfBounds, "copy too large"))?;
        let mut base: CuDevicePtr = 0;
        // SAFETY: valid out-pointer; the driver checks the handle (one of no live allocation, or
        // of a GPU this process does not see, fails).
        let r = unsafe {
            (ipc.open_mem_handle)(
                &mut base,
                IpcMemHandle(handle),
                CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
            )
        };
        if r != CUDA_SUCCESS {
            // No peer access between the GPUs, or the other GPU not visible here: the host
            // stages the copy instead.
            return Err(BackendError::new(
                ErrorKind::Unsupported,
                format!(
                    "cannot map the other worker's memory (cuIpcOpenMemHandle: {})",
                    self.drv.describe(r)
                ),
            ));
        }
        let stream = self.dev.stream.0;
        let r1 = match base.checked_add(offset) {
            // SAFETY: `dst..dst+n` lies in a live allocation of ours (checked); the source range
            // lies in the mapped allocation (the host checked it against the buffer's size).
            Some(src) => unsafe { (ipc.memcpy_async)(dst, src, n, stream) },
            None => CUDA_ERROR_INVALID_VALUE,
        };
        let r2 = if r1 == CUDA_SUCCESS {
            // SAFETY: the worker's stream.
            unsafe { (self.drv.stream_synchronize)(stream) }
        } else {
            CUDA_SUCCESS
        };
        // Unmapped whatever happened: the exporter may free the memory once this returns.
        // SAFETY: the mapping opened above; no work of ours uses it any more (synchronised, or
        // never queued).
        let r3 = unsafe { (ipc.close_mem_handle)(base) };
        self.call(
            check("cuMemcpyAsync", r1),
            "copying from another worker's memory",
        )?;
        self.call(
            check("cuStreamSynchronize", r2),
            "copying from another worker's memory",
        )?;
        self.call(
            check("cuIpcCloseMemHandle", r3),
            "unmapping another worker's memory",
        )
    }

    fn free(&mut self, addr: u64) -> Result<(), BackendError> {
        self.ready()?;
        if self.staged {
            // A staged copy into this allocation may still be queued (nothing else is).
            self.finish_transfer(self.dev.stream.0, "writing device memory")?;
        }
        let Some(alloc) = self.mem.get(addr) else {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                format!("{addr:#x} is not the start of an allocation"),
            ));
        };
        if alloc.shareable && self.persistent.running() {
            // Off the books now; back to the device once the persistent kernel has ended.
            self.mem.remove(addr);
            self.deferred_frees.push(addr);
            return Ok(());
        }
        self.free_deferred()?;
        // A live allocation of ours; no queued kernel uses it (drained).
        let (r, call) = self.device_free(addr, alloc.shareable);
        self.call(check(call, r), "freeing device memory")?;
        self.mem.remove(addr);
        if self.dev.pooled && !alloc.shareable {
            // A pool gives freed memory back to the device only at a synchronisation: without
            // one, an idle worker would keep what its last lease freed (NVML would count it).
            // The stream is drained, so this waits for nothing (a persistent kernel runs on
            // another stream).
            // SAFETY: the worker's stream.
            let r = unsafe { (self.drv.stream_synchronize)(self.dev.stream.0) };
            self.call(check("cuStreamSynchronize", r), "freeing device memory")?;
        }
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), BackendError> {
        let stream = self.copy_ready()?;
        self.mem.check_range(addr, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        self.write_on(stream, addr, data)
    }

    fn write_staged(&mut self, addr: u64, data: &[u8]) -> Result<(), BackendError> {
        if data.is_empty() || data.len() > STAGED_WRITE_MAX {
            return self.write(addr, data);
        }
        let stream = self.copy_ready()?;
        self.mem.check_range(addr, data.len() as u64)?;
        self.stage_write(stream, addr, data)
    }

    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let stream = self.copy_ready()?;
        self.mem.check_range(addr, out.len() as u64)?;
        if out.is_empty() {
            return Ok(());
        }
        let may_register = self.may_register();
        for piece in self
            .host
            .pieces(self.drv, out.as_ptr(), out.len(), may_register)
        {
            let chunk = &mut out[piece.offset..piece.offset + piece.len];
            // SAFETY: `chunk` is valid for writes of its length until the stream is synchronised
            // below; the range lies in one allocation.
            let r = unsafe {
                (self.drv.memcpy_dtoh_async)(
                    chunk.as_mut_ptr().cast::<c_void>(),
                    addr + piece.offset as u64,
                    chunk.len(),
                    stream,
                )
            };
            self.call(check("cuMemcpyDtoHAsync", r), "reading device memory")?;
        }
        self.finish_transfer(stream, "reading device memory")
    }

    fn copy_after(&mut self, last: u64) {
        self.copy_after = Some(last);
    }

    fn map_host(&mut self, base: *mut u8, len: usize) -> Result<(), BackendError> {
        // Registered lazily, by the copies that use it (see `host_memory`).
        self.host.map(base, len);
        Ok(())
    }

    fn unmap_host(&mut self, base: *mut u8, _len: usize) {
        // Unregistering memory a queued kernel might reach through its host address would race
        // it: wait for the queue first. A poisoned context is left alone (the process is about
        // to be killed, and its registrations die with it).
        let quiet = self.ready().is_ok();
        self.host.unmap(self.drv, base, quiet);
    }

    fn copy(&mut self, dst: u64, src: u64, len: u64) -> Result<(), BackendError> {
        self.ready()?;
        self.mem.check_range(src, len)?;
        self.mem.check_range(dst, len)?;
        if len == 0 || dst == src {
            return Ok(());
        }
        let n = usize::try_from(len)
            .map_err(|_| BackendError::new(ErrorKind::OutOfBounds, "copy too large"))?;
        let overlap = src < dst.saturating_add(len) && dst < src.saturating_add(len);
        self.unchecked_async = true;
        if !overlap {
            // SAFETY: both ranges lie in live allocations and do not overlap.
            let r = unsafe { (self.drv.memcpy_dtod_async)(dst, src, n, self.dev.stream.0) };
            return self.call(check("cuMemcpyDtoDAsync", r), "copying device memory");
        }
        // Overlapping ranges (memmove, as the emulator does): stage through a scratch allocation.
        let mut tmp: CuDevicePtr = 0;
        let (r, call) = self.device_alloc(&mut tmp, n, false);
        if r == CUDA_ERROR_OUT_OF_MEMORY {
            return Err(BackendError::new(
                ErrorKind::OutOfMemory,
                format!("an overlapping copy of {len} bytes needs as much scratch memory, and the device has none free"),
            ));
        }
        self.call(check(call, r), "allocating scratch for an overlapping copy")?;
        let stream = self.dev.stream.0;
        // SAFETY: scratch and source/destination are live and of `n` bytes; ordered on the stream.
        let r1 = unsafe { (self.drv.memcpy_dtod_async)(tmp, src, n, stream) };
        let r2 = if r1 == CUDA_SUCCESS {
            unsafe { (self.drv.memcpy_dtod_async)(dst, tmp, n, stream) }
        } else {
            r1
        };
        // The scratch is freed once the copies that use it are done.
        // SAFETY: the worker's stream.
        let r3 = unsafe { (self.drv.stream_synchronize)(stream) };
        // Ours, unused now.
        let (r4, call) = self.device_free(tmp, false);
        self.call(check("cuMemcpyDtoDAsync", r1), "copying device memory")?;
        self.call(check("cuMemcpyDtoDAsync", r2), "copying device memory")?;
        self.call(check("cuStreamSynchronize", r3), "copying device memory")?;
        self.call(check(call, r4), "freeing copy scratch")
    }

    fn load_module(&mut self, ptx: &str) -> Result<LoadedModule, BackendError> {
        self.usable()?;
        if let Some(loaded) = self.modules.lookup(ptx)? {
            return Ok(loaded);
        }
        // Refused before the driver sees it, in the emulator's words, where the driver would
        // refuse it anyway.
        let target = self.load_target();
        let header = module_check::check(ptx, &target.loader)?;
        self.ready()?;
        self.modules
            .load(self.drv, ptx, &header, &target)
            .map_err(|e| self.fail(e))
    }

    fn load_source(
        &mut self,
        source: &str,
        options: &[&str],
    ) -> Result<LoadedModule, BackendError> {
        self.usable()?;
        // PTX for exactly this device's architecture (compute_XY: NVRTC then returns PTX, which
        // the driver JIT turns into this GPU's code).
        let ptx = source::compile(source, options, Some(self.dev.compute_capability))?;
        self.load_module(&ptx).map_err(source::in_compiled_ptx)
    }

    /// The worker's own cache first; then the host's image, loaded without JIT where the device
    /// takes it; else the PTX compiled to a cubin (kept for the host) and loaded.
    fn load_module_cached(
        &mut self,
        ptx: &str,
        image: &[u8],
    ) -> Result<(LoadedModule, Compiled), BackendError> {
        self.usable()?;
        if let Some(loaded) = self.modules.lookup(ptx)? {
            return Ok((loaded, Compiled::default()));
        }
        let target = self.load_target();
        let header = module_check::check(ptx, &target.loader)?;
        self.ready()?;
        let image_refused = !image.is_empty();
        if image_refused {
            if let Some(loaded) = self.modules.load_cached_image(self.drv, ptx, image)? {
                return Ok((loaded, Compiled::default()));
            }
        }
        match self.modules.load_keeping(self.drv, ptx, &header, &target) {
            Ok((loaded, image)) => Ok((
                loaded,
                Compiled {
                    ptx: String::new(),
                    image,
                    image_refused,
                },
            )),
            Err(e) => Err(self.fail(e)),
        }
    }

    fn load_source_cached(
        &mut self,
        source: &str,
        options: &[&str],
    ) -> Result<(LoadedModule, Compiled), BackendError> {
        self.usable()?;
        let ptx = source::compile(source, options, Some(self.dev.compute_capability))?;
        let (loaded, compiled) = self
            .load_module_cached(&ptx, &[])
            .map_err(source::in_compiled_ptx)?;
        Ok((loaded, Compiled { ptx, ..compiled }))
    }

    fn unload_module(&mut self, id: u32) -> Result<(), BackendError> {
        self.usable()?;
        if let Some(kernel) = self.persistent.kernel_of(id) {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                format!(
                    "module {id} holds persistent kernel {}, which still runs; stop it (through its \
                     control block) before unloading its module",
                    quote::name(&kernel)
                ),
            ));
        }
        self.destroy_user_graphs_of(Some(id));
        if let Some(module) = self.modules.release(id)? {
            self.ready()?;
            self.unload(module)?;
        }
        Ok(())
    }

    fn kernel_name(&self, module: u32, kernel: u32) -> Option<&str> {
        self.modules.kernel_name(module, kernel)
    }

    fn launch(&mut self, l: &Launch<'_>) -> Result<(), BackendError> {
        self.launch_batch(std::slice::from_ref(l))
            .map_err(|(_, e)| e)
    }

    /// Checks and resolves every launch first, copying the argument blocks into aligned scratch,
    /// then makes the driver calls back to back: anything run between two `cuLaunchKernel` calls
    /// costs the next one more than its own time (docs/performance.md).
    fn launch_batch(&mut self, launches: &[Launch<'_>]) -> Result<(), (usize, BackendError)> {
        self.usable().map_err(|e| (0, e))?;
        let chunks: usize = launches.iter().map(|l| l.args.len().div_ceil(16)).sum();
        if self.args.len() < chunks {
            self.args.resize(chunks, Chunk([0; 16]));
        }
        // Not moved again below: every block's pointer stays valid until the calls are made.
        let scratch = self.args.as_mut_ptr();
        let mut batch = std::mem::take(&mut self.batch);
        let mut at = 0;
        let mut refused = None;
        let first = self.next_ordinal;
        // Every launch handed over counts, launched or not (as the serving loop counts them).
        self.next_ordinal = first.saturating_add(launches.len() as u64);
        for (i, l) in launches.iter().enumerate() {
            match self.check_launch(l) {
                Ok((function, kernel)) => {
                    // SAFETY: `at` + this block's chunks ≤ `chunks` ≤ the scratch's length.
                    let args = unsafe { scratch.add(at) }.cast::<u8>();
                    // SAFETY: as above; plain byte copy (the frame it came in is byte-aligned).
                    unsafe { std::ptr::copy_nonoverlapping(l.args.as_ptr(), args, l.args.len()) };
                    at += l.args.len().div_ceil(16);
                    batch.push(ReadyLaunch {
                        function,
                        kernel,
                        grid: l.grid,
                        block: l.block,
                        shared_mem_bytes: l.shared_mem_bytes,
                        args: if l.args.is_empty() {
                            std::ptr::null_mut()
                        } else {
                            args.cast()
                        },
                        args_len: l.args.len(),
                        deadline: l.deadline,
                        ordinal: first.saturating_add(i as u64),
                    });
                }
                Err(e) => {
                    refused = Some((i, e));
                    break;
                }
            }
        }
        let launched = match self.timeline.launch_all(&batch) {
            Ok(()) => refused.map_or(Ok(()), |(i, e)| Err((i, self.fail(e)))),
            Err((i, Refused::Driver { code, function })) => {
                let kernel_max = (code == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES).then(|| {
                    let mut v = 0;
                    // SAFETY: a resolved function, valid out-pointer.
                    let ok = unsafe {
                        (self.drv.func_get_attribute)(
                            &mut v,
                            CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                            function,
                        )
                    };
                    (ok == CUDA_SUCCESS).then_some(v.max(0) as u32)
                });
                let e =
                    self.launch_refused(&batch[i].kernel, &launches[i], code, kernel_max.flatten());
                Err((i, self.fail(e)))
            }
            Err((i, Refused::Wait(e))) => Err((i, self.fail(e))),
        };
        batch.clear();
        self.batch = batch;
        launched
    }

    fn number_launches_from(&mut self, first: u64) {
        self.next_ordinal = first;
    }

    fn graph_create(&mut self, ops: &[GraphOp<'_>]) -> Result<u32, BackendError> {
        self.create_user_graph(ops)
    }

    fn graph_set_args(&mut self, graph: u32, node: u32, args: &[u8]) -> Result<(), BackendError> {
        self.set_user_graph_args(graph, node, args)
    }

    fn graph_replay(&mut self, graph: u32, times: u32, writes: &[u8]) -> Result<(), BackendError> {
        self.replay_user_graph(graph, times, writes)
    }

    fn graph_destroy(&mut self, graph: u32) -> Result<(), BackendError> {
        self.destroy_user_graph(graph)
    }

    fn sync(&mut self) -> Result<(), BackendError> {
        self.ready()?;
        self.check_unchecked_async()
    }

    fn sync_signalling(&mut self, seq: u32) -> Result<(), BackendError> {
        // Only kernels take long enough for the early signal to matter; it is one more driver
        // call, made while they run.
        if self.poisoned.is_some() || self.timeline.pending() == 0 {
            return self.sync();
        }
        let Some(word) = &self.signal else {
            return self.sync();
        };
        // The host reads the GPU time only from answers it waits for, and skips the ones the
        // word stood in for: a tenant that does nothing but launch and sync would never be
        // charged. So once a report is due, this sync is answered by the worker (about one in a
        // hundred of back-to-back short syncs, or every other one where they are further apart; a
        // long one is mostly answered by the worker anyway, the host sleeping until its answer
        // comes).
        if self.unreported && self.reported.elapsed() >= REPORT_EVERY {
            self.report_only = true;
            return self.sync();
        }
        // The open group's event goes first, so the word lands after it: once the word is seen,
        // the event is done too, and the next wait's look at it is cheap. Both driver calls are
        // made while the kernels run. The wait ends the GPU-time segment: as seen finished where
        // the word comes within its spin, with no driver call of the timing's on the host's way.
        self.timeline.close_group();
        match word.store_when_done(self.drv, self.dev.stream, seq) {
            Ok(()) => {
                let drained = self.timeline.drain_signalled(word.word(), seq);
                // Past the spin, the host is more likely to read this answer than the word.
                self.answered_by_word = drained.map_err(|e| self.fail(e))?;
                self.unreported |= self.answered_by_word;
                self.check_unchecked_async()
            }
            // A device that cannot do it at all: stop asking. (A sticky fault refuses it too; the
            // wait in `sync` reports that.)
            Err(r @ (CUDA_ERROR_NOT_SUPPORTED | CUDA_ERROR_INVALID_VALUE)) => {
                eprintln!(
                    "tasklet worker {}: cuStreamWriteValue32 refused ({}); syncs are answered by the worker alone from now on",
                    std::process::id(),
                    self.drv.describe(r)
                );
                if let Some(w) = self.signal.take() {
                    w.unregister(self.drv);
                }
                self.sync()
            }
            Err(_) => self.sync(),
        }
    }

    fn record_mark(&mut self, mark: u32) -> Result<(), BackendError> {
        self.record_mark_now(mark)
    }

    fn mark_elapsed(&mut self, start: u32, end: u32) -> Result<Duration, BackendError> {
        self.mark_elapsed_now(start, end)
    }

    fn mark_done(&mut self, mark: u32) -> Result<bool, BackendError> {
        self.mark_done_now(mark)
    }

    fn wait_mark(&mut self, mark: u32) -> Result<(), BackendError> {
        self.wait_mark_now(mark)
    }

    fn flush(&mut self) {
        self.timeline.flush();
    }

    fn map_device(&mut self, base: *mut u8, len: usize) -> Result<u64, BackendError> {
        self.usable()?;
        self.device_maps
            .map(self.drv, &mut self.host, base, len)
            .map_err(|e| self.fail(e))
    }

    fn unmap_device(&mut self, addr: u64) -> Result<(), BackendError> {
        if self.persistent.running() {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                format!(
                    "{addr:#x} stays mapped for kernels while a persistent kernel runs (it may be using \
                     it); stop the kernel first"
                ),
            ));
        }
        // A queued kernel may still reach the memory: wait for the queue first. A poisoned
        // context is left alone (its process is about to end, and its registrations with it).
        let quiet = self.ready();
        self.device_maps
            .unmap(self.drv, &mut self.host, addr, quiet.is_ok())?;
        quiet
    }

    /// Checked as a launch is (module, kernel, argument block, dimensions, shared memory), then
    /// for all its blocks being resident at once (`occupancy`), then for the device launching
    /// cooperative kernels: it is launched with `cuLaunchCooperativeKernel` (see `persistent`). Starts after everything queued
    /// before it has finished (the queue is drained, as `sync` does): what the tenant launched or
    /// wrote to prepare its memory is done when the kernel starts.
    fn launch_persistent(
        &mut self,
        l: &Launch<'_>,
        control: ControlBlock,
    ) -> Result<(), BackendError> {
        self.sync()?;
        if let Some(kernel) = self.persistent.running_kernel() {
            return Err(BackendError::new(
                ErrorKind::InvalidArgument,
                format!(
                    "persistent kernel {} still runs; a worker runs one persistent kernel at a time",
                    quote::name(&kernel)
                ),
            ));
        }
        let (function, kernel) = self.check_launch(l)?;
        occupancy::check_co_resident(
            self.drv,
            function,
            &kernel,
            l.grid,
            l.block,
            l.shared_mem_bytes,
            self.dev.multiprocessors,
            "a persistent kernel",
        )?;
        if !self.dev.cooperative_launch {
            return Err(BackendError::new(
                ErrorKind::LaunchFailed,
                format!(
                    "persistent kernel {}: a persistent kernel is a cooperative launch, and this \
                     device ({}) cannot launch cooperative kernels \
                     (CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH is 0); run it on a device that can \
                     (compute capability 6.0 or newer), or launch it as a normal kernel",
                    quote::name(&kernel),
                    quote::text(&self.dev.name)
                ),
            ));
        }
        let offsets = Arc::clone(&self.modules.kernel(l.module, l.kernel)?.param_offsets);
        let prepared = self.persistent.prepare();
        self.call(prepared, "starting a persistent kernel")?;
        let chunks = l.args.len().div_ceil(16);
        if self.args.len() < chunks {
            self.args.resize(chunks, Chunk([0; 16]));
        }
        let args = self.args.as_mut_ptr().cast::<u8>();
        // SAFETY: the scratch holds `chunks` * 16 >= `l.args.len()` bytes; plain byte copy.
        unsafe { std::ptr::copy_nonoverlapping(l.args.as_ptr(), args, l.args.len()) };
        let ready = ReadyLaunch {
            function,
            kernel: Arc::clone(&kernel),
            grid: l.grid,
            block: l.block,
            shared_mem_bytes: l.shared_mem_bytes,
            args: if l.args.is_empty() {
                std::ptr::null_mut()
            } else {
                args.cast()
            },
            args_len: l.args.len(),
            // Exempt (see `persistent`); not one of the lease's numbered launches.
            deadline: Duration::ZERO,
            ordinal: 0,
        };
        // A cooperative launch takes a pointer to each parameter, not the packed block: each
        // points at its parameter's place in the block (inside it: the layout says so).
        let mut params: Vec<*mut c_void> = offsets
            .iter()
            .map(|&at| args.wrapping_add(at as usize).cast())
            .collect();
        // Before the launch: the kernel may read its control block at once, and must not see
        // an earlier kernel's request to terminate.
        control.start();
        if let Err(code) = self.persistent.launch(&ready, &mut params) {
            let e = self.launch_refused(&kernel, l, code, None);
            // The block was marked started: say it is over, and why, rather than leave it
            // running forever.
            control.finish(&Exit::Faulted(e.message.clone()));
            return Err(self.fail(e));
        }
        let tracked = self.persistent.track(control, kernel, l.module);
        tracked.map_err(|e| self.fail(e))
    }

    fn persistent_running(&self) -> bool {
        self.persistent.running()
    }

    /// Counts the finished segments first, except for the answer to a sync the completion word
    /// answered (the host skips it, and the count, a driver call per segment, would only delay
    /// the worker's next request, most often the next launch) and to one answered only to carry
    /// the time (a sync [`REPORT_EVERY`] after the last such answer, whose segments the watchdog
    /// counts in the background, every millisecond while there are some): those give the time
    /// counted so far. Every other answer is exact as of its kernels.
    ///
    /// A persistent kernel's time (wall time from its launch to its end seen, so far) is added
    /// to every answer (see `persistent`).
    fn gpu_time(&mut self) -> Duration {
        self.launches_gpu_time()
            .saturating_add(self.persistent.gpu_time())
    }

    fn reset(&mut self) -> Result<(), BackendError> {
        self.ready()?;
        if self.staged {
            // Staged copies may still be queued into the memory freed below.
            self.finish_transfer(self.dev.stream.0, "writing device memory")?;
        }
        // The worker unmapped each memory's mappings when it detached it; none is left behind.
        self.device_maps.clear(self.drv, &mut self.host, true);
        self.destroy_user_graphs_of(None);
        let mut first: Option<BackendError> = None;
        if let Err(e) = self.free_deferred() {
            first.get_or_insert(e);
        }
        for (addr, alloc) in self.mem.drain() {
            // A live allocation of ours; the queue is drained.
            let (r, call) = self.device_free(addr, alloc.shareable);
            if let Err(e) = self.call(check(call, r), "freeing device memory at reset") {
                first.get_or_insert(e);
            }
        }
        // Stateless modules stay loaded for the next lease's lookup (see `Modules::end_ids`); the
        // cached launch chains go whatever is unloaded: nothing of this lease's launches is kept.
        self.timeline.forget_graphs();
        for module in self.modules.end_ids() {
            if let Err(e) = self.unload(module) {
                first.get_or_insert(e);
            }
        }
        // SAFETY: plain driver call; no kernel is queued, so this returns promptly.
        let r = unsafe { (self.drv.ctx_synchronize)() };
        // The stream is idle: no record can be pending on an event.
        self.marks.clear(self.drv);
        self.stream_idle();
        self.next_ordinal = 1;
        if let Err(e) = self.call(check("cuCtxSynchronize", r), "resetting the worker") {
            first.get_or_insert(e);
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl CudaBackend {
    /// [`Backend::alloc`], shareable with other workers or not.
    fn alloc_in(&mut self, bytes: u64, shareable: bool) -> Result<u64, BackendError> {
        self.ready()?;
        self.free_deferred()?;
        let accounted = self.mem.admit(bytes)?;
        let size = usize::try_from(bytes).map_err(|_| {
            BackendError::new(
                ErrorKind::OutOfMemory,
                format!("{bytes} bytes do not fit this host's address size"),
            )
        })?;
        let mut addr: CuDevicePtr = 0;
        let (r, call) = self.device_alloc(&mut addr, size, shareable);
        if r == CUDA_ERROR_OUT_OF_MEMORY {
            return Err(BackendError::new(
                ErrorKind::OutOfMemory,
                format!(
                    "the device has no {bytes} bytes free ({call}: {})",
                    self.drv.describe(r)
                ),
            ));
        }
        self.call(check(call, r), "allocating device memory")?;
        // New memory reads as zeros whatever an earlier tenant left there: one lease must never
        // see another's data.
        // On the worker's stream: ordered before every later copy and kernel.
        // SAFETY: the allocation just made, whole.
        let r = unsafe { (self.drv.memset_d8_async)(addr, 0, size, self.dev.stream.0) };
        if let Err(e) = self.call(check("cuMemsetD8Async", r), "zeroing new device memory") {
            // Ours, unused.
            self.device_free(addr, shareable);
            return Err(e);
        }
        self.mem.insert(addr, bytes, accounted, shareable);
        self.unchecked_async = true;
        Ok(addr)
    }

    /// Gives back to the device the shareable allocations freed while a persistent kernel ran,
    /// once none runs.
    fn free_deferred(&mut self) -> Result<(), BackendError> {
        if self.deferred_frees.is_empty() || self.persistent.running() {
            return Ok(());
        }
        for addr in std::mem::take(&mut self.deferred_frees) {
            let (r, call) = self.device_free(addr, true);
            self.call(check(call, r), "freeing device memory")?;
        }
        Ok(())
    }

    /// Allocates `size` bytes of device memory into `addr`: from the stream-ordered allocator on
    /// the worker's stream where the device has memory pools (see [`context::Device::pooled`])
    /// and the memory is not to be `shareable` with other workers (the driver exports only
    /// `cuMemAlloc`'s memory to other processes), else `cuMemAlloc`. Returns the driver's answer
    /// and the call's name, for messages.
    fn device_alloc(
        &self,
        addr: &mut CuDevicePtr,
        size: usize,
        shareable: bool,
    ) -> (CuResult, &'static str) {
        match (self.dev.pooled && !shareable, &self.drv.pools) {
            // SAFETY: valid out-pointer; the worker's stream, context current. Later work on the
            // stream sees the allocation; work on another stream only after a sync of this one
            // (a persistent launch syncs it first).
            (true, Some(p)) => (
                unsafe { (p.alloc_async)(addr, size, self.dev.stream.0) },
                "cuMemAllocAsync",
            ),
            // SAFETY: valid out-pointer; context current.
            _ => (unsafe { (self.drv.mem_alloc)(addr, size) }, "cuMemAlloc"),
        }
    }

    /// Frees an allocation [`CudaBackend::device_alloc`] made, once the worker's stream reaches
    /// the free where it came from a pool: a running persistent kernel (another stream) is not
    /// waited for, as `cuMemFree` would. The caller makes sure no kernel of ours still uses it.
    fn device_free(&self, addr: CuDevicePtr, shareable: bool) -> (CuResult, &'static str) {
        match (self.dev.pooled && !shareable, &self.drv.pools) {
            // SAFETY: an allocation of ours from the pool; ordered after the stream's work.
            (true, Some(p)) => (
                unsafe { (p.free_async)(addr, self.dev.stream.0) },
                "cuMemFreeAsync",
            ),
            // SAFETY: an allocation of ours.
            _ => (unsafe { (self.drv.mem_free)(addr) }, "cuMemFree"),
        }
    }

    /// The launches' device time (see `Backend::gpu_time`).
    fn launches_gpu_time(&mut self) -> Duration {
        if std::mem::take(&mut self.answered_by_word) {
            return self.timeline.gpu_time_seen();
        }
        self.reported = Instant::now();
        self.unreported = false;
        if std::mem::take(&mut self.report_only) {
            return self.timeline.gpu_time_seen();
        }
        self.timeline.gpu_time()
    }

    /// The end of every sync: asynchronous work outside the launch queue (zeroing, device-to-device
    /// copies) finished without error too.
    fn check_unchecked_async(&mut self) -> Result<(), BackendError> {
        if !self.unchecked_async && !self.staged {
            // Every kernel's completion event reported success; reads and unstaged writes are
            // synchronous.
            return Ok(());
        }
        // Zeroing, device-to-device and staged copies are not in the queue: check they finished
        // without error too.
        self.unchecked_async = false;
        // SAFETY: the worker's stream.
        let r = unsafe { (self.drv.stream_query)(self.dev.stream.0) };
        let r = match r {
            CUDA_ERROR_NOT_READY => {
                // Only copies are left (the kernels are done), so this wait is bounded.
                // SAFETY: as above.
                unsafe { (self.drv.stream_synchronize)(self.dev.stream.0) }
            }
            r => r,
        };
        if r == CUDA_SUCCESS {
            self.stream_idle();
        }
        self.sync_result(r)
    }

    /// The worker's stream was seen idle and without error: nothing on it is left to check, and
    /// the staging memory is free.
    fn stream_idle(&mut self) {
        self.unchecked_async = false;
        self.staged = false;
        if let Some(s) = &mut self.staging {
            s.stream_idle();
        }
    }

    /// Copies `data` (checked against the allocation) to `addr` on `stream` (`copy_ready`'s) and
    /// waits for it.
    fn write_on(&mut self, stream: CuStream, addr: u64, data: &[u8]) -> Result<(), BackendError> {
        let may_register = self.may_register();
        for piece in self
            .host
            .pieces(self.drv, data.as_ptr(), data.len(), may_register)
        {
            let chunk = &data[piece.offset..piece.offset + piece.len];
            // SAFETY: `chunk` is valid for its length (the data region or an attached guest
            // memory; pinned when registration worked: DMA) until the stream is synchronised
            // below; the range lies in one allocation.
            let r = unsafe {
                (self.drv.memcpy_htod_async)(
                    addr + piece.offset as u64,
                    chunk.as_ptr().cast::<c_void>(),
                    chunk.len(),
                    stream,
                )
            };
            self.call(check("cuMemcpyHtoDAsync", r), "writing device memory")?;
        }
        self.finish_transfer(stream, "writing device memory")
    }

    /// Copies a small write's bytes into staging memory and queues their copy on `stream`
    /// (`copy_ready`'s). On the worker's stream nothing else is queued then, so the copy runs at
    /// once, every later op on the stream follows it, and it is not waited for. A copy beside
    /// kernels (on the copy stream), or beside a persistent kernel (which the worker's stream
    /// does not order, and which the tenant may tell through a ring to read what it has just
    /// written), is waited for. Without staging memory (or room in it beside running kernels),
    /// the copy goes from `data` itself and is waited for.
    fn stage_write(
        &mut self,
        stream: CuStream,
        addr: u64,
        data: &[u8],
    ) -> Result<(), BackendError> {
        let main = self.dev.stream.0;
        let full = |b: &Self| b.staging.as_ref().is_some_and(|s| !s.has_room(data.len()));
        if stream == main && full(self) {
            // Only staged copies and zeroing are queued: a short wait frees all of it.
            self.finish_transfer(main, "writing device memory")?;
        }
        // Beside kernels a full staging memory stays full: they are queued behind its copies.
        let Some(staging) = self.staging.as_mut().filter(|s| s.has_room(data.len())) else {
            return self.write_on(stream, addr, data);
        };
        let src = staging.stage(data);
        let wait = stream != main || self.persistent.running();
        if !wait {
            // Before the copy is queued: an error below still leaves it to be checked.
            self.staged = true;
        }
        // SAFETY: `src` holds `data.len()` bytes of page-locked staging memory that nothing
        // overwrites until the worker's stream is seen idle; the range lies in one allocation
        // (checked by the caller).
        let r = unsafe { (self.drv.memcpy_htod_async)(addr, src, data.len(), stream) };
        self.call(check("cuMemcpyHtoDAsync", r), "writing device memory")?;
        if wait {
            return self.finish_transfer(stream, "writing device memory");
        }
        let r = self
            .staging
            .as_ref()
            .map_or(CUDA_ERROR_INVALID_VALUE, |s| s.mark(self.drv, stream));
        if r != CUDA_SUCCESS {
            // Nothing off the stream could wait for it: wait here instead.
            self.finish_transfer(stream, "writing device memory")?;
        }
        Ok(())
    }

    /// Waits for what the next copy between host and device memory needs finished, and says
    /// which stream it goes on. Where the host said which launches it needs
    /// (`Backend::copy_after`), only those, and the copy goes on the copy stream beside the later
    /// kernels; else, or while zeroing or a device-to-device copy on the worker's stream may
    /// still run (no event tracks those: only the stream's order puts a copy after them), every
    /// queued launch, and the worker's stream.
    fn copy_ready(&mut self) -> Result<CuStream, BackendError> {
        let after = self.copy_after.take();
        let Some(last) = after.filter(|_| !self.unchecked_async) else {
            self.ready()?;
            return Ok(self.dev.stream.0);
        };
        self.usable().map_err(|e| self.fail(e))?;
        self.timeline
            .drain_through(last)
            .map_err(|e| self.fail(e))?;
        if self.timeline.pending() == 0 {
            return Ok(self.dev.stream.0);
        }
        let stream = match self.copy_stream {
            Some(stream) => stream.0,
            None => {
                let mut stream: CuStream = std::ptr::null_mut();
                // SAFETY: a valid out-pointer; this process's current context.
                let r = unsafe { (self.drv.stream_create)(&mut stream, CU_STREAM_NON_BLOCKING) };
                if r != CUDA_SUCCESS {
                    // The copy still works in order with everything else.
                    self.ready()?;
                    return Ok(self.dev.stream.0);
                }
                self.copy_stream = Some(WorkStream(stream));
                stream
            }
        };
        // Staged writes were queued on the worker's stream before its pending kernels: the copy
        // follows them on the device, and waits for none of the kernels.
        if let Some(staging) = self.staging.as_ref().filter(|_| self.staged) {
            let r = staging.wait_on(self.drv, stream);
            self.call(
                check("cuStreamWaitEvent", r),
                "ordering a copy after writes",
            )?;
        }
        Ok(stream)
    }

    /// Whether a copy may page-lock guest memory it has not locked yet: not while a kernel runs
    /// (`cuMemHostRegister` waits for every running kernel of the context, so a copy beside
    /// kernels would wait for them after all, and one beside a persistent kernel for ever); such
    /// a copy goes through pageable memory instead.
    fn may_register(&self) -> bool {
        !self.persistent.running() && self.timeline.pending() == 0
    }

    /// Waits for the copies just queued on `stream` (and, on the worker's stream, the zeroing
    /// before them) to complete: the host reads or reuses the memory they use as soon as the
    /// call returns.
    fn finish_transfer(&mut self, stream: CuStream, what: &str) -> Result<(), BackendError> {
        // SAFETY: the worker's stream or its copy stream; no kernel is queued on either that the
        // copy must not wait for (`copy_ready`).
        let r = unsafe { (self.drv.stream_synchronize)(stream) };
        self.call(check("cuStreamSynchronize", r), what)?;
        if stream == self.dev.stream.0 {
            self.stream_idle();
        }
        Ok(())
    }

    fn sync_result(&mut self, r: CuResult) -> Result<(), BackendError> {
        if r == CUDA_SUCCESS {
            return Ok(());
        }
        let e = errors::async_error(
            self.drv,
            r,
            "a write, a device-to-device copy or the zeroing of new memory",
        );
        Err(self.fail(e))
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // Only when nothing can block: a poisoned context may still run a kernel.
        if self.poisoned.is_none() && self.timeline.pending() == 0 {
            if let Some(p) = self.pinned.take() {
                p.unregister(self.drv);
            }
            if let Some(s) = self.staging.take() {
                // A staged copy may still read it: only once the stream is seen done with it (a
                // process about to exit loses the mapping anyway).
                // SAFETY: the worker's stream; only copies can be queued on it (nothing pending).
                let idle = !self.staged
                    || unsafe { (self.drv.stream_synchronize)(self.dev.stream.0) } == CUDA_SUCCESS;
                if idle {
                    s.close(self.drv);
                }
            }
            if let Some(w) = self.signal.take() {
                w.unregister(self.drv);
            }
            self.device_maps
                .clear(self.drv, &mut self.host, !self.persistent.running());
            self.host.clear(self.drv);
            self.marks.clear(self.drv);
            // SAFETY: ours, idle (nothing pending); nothing uses them after this.
            unsafe { (self.drv.stream_destroy)(self.dev.stream.0) };
            if let Some(copies) = self.copy_stream.take() {
                // SAFETY: as above; every copy on it was waited for.
                unsafe { (self.drv.stream_destroy)(copies.0) };
            }
        }
    }
}

/// Why a copy between workers is not made GPU to GPU while a persistent kernel runs here.
fn beside_persistent() -> BackendError {
    BackendError::new(
        ErrorKind::Unsupported,
        "a persistent kernel runs in this worker, and the driver may wait for it to share or map memory",
    )
}
