//! GPU worker processes.
//!
//! All GPU state lives in worker processes, one per lease (DESIGN.md, invariant 1): a fault or a
//! runaway kernel can only be contained by killing the process that owns the context. This crate
//! holds both ends of that arrangement:
//!
//! - host side: [`Pool`] keeps warm workers and hands them out as [`Worker`]s, each an RPC client
//!   over shared memory that treats its process as untrusted and killable;
//! - worker side: [`serve_main`] turns any binary into a worker serving one [`Backend`].
//!
//! The layers, each its own module: [`protocol`] (sans-IO codec), [`transport`] (memfd ring +
//! futex wake-ups), [`backend`] (emu, cuda), [`serve`] (worker loop), [`supervisor`] (one
//! worker process) and [`pool`]; beside them [`nvml`] (GPU inventory, through a worker process in
//! its `--inventory` mode) and [`nvrtc`] (CUDA C → PTX).
//!
//! Bulk data need not go through the channel: [`guest_memory`] gives tasklets linear memories
//! backed by a memfd that workers map too (passed over a control socket, [`fdpass`]; mapped
//! worker-side by [`attach`]), so [`Worker::write_from`] / [`Worker::read_into`] copy straight
//! between linear memory and the device (one pinned DMA on cuda).
//!
//! A worker's serving thread can be pinned to a CPU near its GPU ([`cpus`], `TASKLET_WORKER_CPUS`).
//!
//! Finding out whether CUDA works here is a worker's job too: [`probe`] / [`probe_cuda`] start a
//! short-lived worker on a backend and return its [`WorkerInfo`], or the worker's own reason it
//! could not start (e.g. "no CUDA driver found (libcuda.so.1 not loadable)").
//!
//! # Using it from a host
//!
//! - Make the host binary able to be a worker: on `tasklet worker <flags…>` call
//!   `std::process::exit(tasklet_worker::serve_main(std::env::args().skip(2)))` *before* starting
//!   any runtime machinery, and give the pool `WorkerCommand { program: current_exe, args:
//!   ["worker"] }`; the pool appends its own flags (`--shm-fd`, `--backend`, …).
//! - `Pool` is `Send + Sync` behind an `Arc`; a `Worker` is `Send` (not `Sync`: one lease drives
//!   it, from any thread, one op at a time).
//! - Every op is a synchronous RPC: when it returns, the worker has finished it — except a
//!   `launch` on CUDA, which returns once the kernel is queued (as in CUDA); its fault or missed
//!   deadline comes back from `sync` or the next op that waits for it (see [`Worker::launch`]).
//! - `WorkerError::Op` leaves the worker usable unless its kind poisons it (`KernelFault`,
//!   `DeadlineExceeded`); `Lost` means the process is gone. Either way `Pool::release` does the
//!   right thing (reset + keep, or kill + replace). Dropping a leased worker also frees its slot.
//! - Workers are our children, reaped by `waitpid(pid)`: the host must not reap children
//!   wholesale (`waitpid(-1)`) or set `SIGCHLD` to `SIG_IGN`.
//! - Workers die with the *thread* that spawned them (`PR_SET_PDEATHSIG`); the pool spawns from
//!   its own long-lived thread. `Worker::spawn` used directly inherits that caveat.
//! - Worker stderr is the host's stderr (emulated `printf` output lands there); stdout is null.

pub mod attach;
pub mod backend;
pub mod cpus;
pub mod fdpass;
pub mod guest_memory;
pub mod nvml;
pub mod nvrtc;
pub mod pool;
pub mod protocol;
pub mod serve;
pub mod supervisor;
pub mod transport;

mod error;

pub use backend::{
    charged_bytes, Backend, BackendError, BackendKind, CudaBackend, EmuBackend, LoadedModule,
    WorkerInfo, ALLOC_GRANULE,
};
pub use error::{ErrorKind, WorkerError};
pub use pool::{Pool, PoolConfig};
pub use serve::serve_main;
pub use supervisor::{
    probe, probe_cuda, Launch, Worker, WorkerCommand, EMU_LANE_INSTRUCTIONS_PER_SECOND,
};
pub use tasklet_ptx::{KernelInfo, ParamInfo, MAX_PARAM_BYTES};
