//! What a worker process executes requests against.
//!
//! One trait, [`Backend`], with one implementation per device kind: [`EmuBackend`] (the PTX
//! emulator, for CI and machines without a GPU) and, later, a `cuda` backend over cudarc. Both
//! sit behind the same protocol, supervisor and pool, so the whole path is tested everywhere.
//!
//! Seam for the `cuda` backend (not built yet): add `backend/cuda.rs` implementing [`Backend`]
//! (one context per worker process; dynamic loading so the binary starts without CUDA), and
//! construct it in [`open`]. Things it must honour that the emulator gets for free:
//! - new allocations read as zeros (DESIGN.md invariant 6): `cuMemsetD8` after `cuMemAlloc`;
//! - `reset` frees everything and unloads every module, returning to the state at start;
//! - `load_source` runs NVRTC and can report kernel signatures by parsing the resulting PTX with
//!   `tasklet_ptx::Module::parse` (for `KernelInfo::param_layout`);
//! - `launch` ignores `step_limit`: the host's deadline kills the process instead;
//! - the transport's data region is plain shared memory; registering it with
//!   `cuMemHostRegister` makes writes and reads run at pinned speed.

mod emu;
mod null;

pub use crate::protocol::{LaunchRequest, WorkerInfo};
pub use emu::EmuBackend;
pub use null::NullBackend;

use crate::error::ErrorKind;
use tasklet_ptx::KernelInfo;

/// Which backend a worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    Emu,
    Cuda,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Emu => "emu",
            BackendKind::Cuda => "cuda",
        }
    }

    pub fn parse(s: &str) -> Option<BackendKind> {
        match s {
            "emu" => Some(BackendKind::Emu),
            "cuda" => Some(BackendKind::Cuda),
            _ => None,
        }
    }
}

/// A module as loaded into a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedModule {
    /// The worker's id for it: unique for the worker's lifetime (never reused, even after reset).
    pub id: u32,
    /// Its kernels in source order, with their parameter layouts.
    pub kernels: Vec<KernelInfo>,
}

/// A refused or failed backend operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct BackendError {
    pub kind: ErrorKind,
    pub message: String,
}

impl BackendError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> BackendError {
        BackendError { kind, message: message.into() }
    }
}

/// A device as one worker process sees it. Calls are synchronous: when one returns, its effect is
/// complete (an asynchronous backend may instead queue and report errors at `sync`).
pub trait Backend {
    fn info(&self) -> WorkerInfo;
    /// Allocates `bytes` (> 0) of zeroed device memory; returns its device address.
    fn alloc(&mut self, bytes: u64) -> Result<u64, BackendError>;
    /// Frees an allocation made by `alloc`, by its start address.
    fn free(&mut self, addr: u64) -> Result<(), BackendError>;
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), BackendError>;
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), BackendError>;
    fn copy(&mut self, dst: u64, src: u64, len: u64) -> Result<(), BackendError>;
    fn load_module(&mut self, ptx: &str) -> Result<LoadedModule, BackendError>;
    /// Compiles CUDA C and loads it.
    fn load_source(&mut self, source: &str, options: &[&str]) -> Result<LoadedModule, BackendError>;
    fn unload_module(&mut self, id: u32) -> Result<(), BackendError>;
    fn launch(&mut self, launch: &LaunchRequest<'_>) -> Result<(), BackendError>;
    /// Waits for everything queued and reports the first deferred error.
    fn sync(&mut self) -> Result<(), BackendError>;
    /// Frees every allocation and unloads every module.
    fn reset(&mut self) -> Result<(), BackendError>;
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
}

/// Opens the backend a worker was asked for. Errors are for people: the worker reports them to
/// the host, which fails the spawn with them.
pub fn open(kind: BackendKind, opts: &BackendOptions) -> Result<Box<dyn Backend>, String> {
    if opts.null {
        return Ok(Box::new(NullBackend));
    }
    match kind {
        BackendKind::Emu => Ok(Box::new(EmuBackend::new(opts.device_memory, opts.emu_threads))),
        BackendKind::Cuda => Err("the cuda backend is not built into this worker yet; use the emu backend".into()),
    }
}
