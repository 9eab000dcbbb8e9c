//! GPU worker processes.
//!
//! All GPU state lives in worker processes, one per lease: a fault or a runaway kernel can only
//! be contained by killing the process that owns the context, and the next lease must never see
//! what the last one left behind. This crate holds both ends of that arrangement, in three
//! folders:
//!
//! - [`contract`]: what the host and a worker agree on, and nothing else — the worker's command
//!   line and exit statuses, the messages and their codec, the shared-memory channel (its layout,
//!   its ring of records, and both of its ends), the control socket that passes file
//!   descriptors, the error kinds. Both sides depend on it; neither owns it.
//! - [`host`]: what runs in the host process. [`Pool`] keeps warm workers and hands them out as
//!   [`Worker`]s, each an RPC client that treats its process as untrusted and killable;
//!   [`probe()`] / [`probe_cuda`] ask a short-lived worker whether a backend works here (or its own
//!   reason it could not start, e.g. "no CUDA driver found (libcuda.so.1 not loadable)");
//!   [`guest_memory`] gives tasklets linear memories that workers can map too, so
//!   [`Worker::write_from`] / [`Worker::read_into`] copy straight between linear memory and the
//!   device (one pinned DMA on cuda).
//! - [`worker`]: what runs in a worker process. [`serve_main`] turns any binary into a worker
//!   serving one [`Backend`] (the emulator, a CUDA GPU); it maps the guest memories the host
//!   sends, compiles CUDA C with [`nvrtc`], and can pin its serving thread to a CPU near its GPU
//!   ([`cpus`], `TASKLET_WORKER_CPUS`).
//!
//! The host and the worker side never depend on each other, only on the contract. Beside them,
//! [`nvml`] is the GPU inventory: read by a worker process started in its `--inventory` mode, in
//! one file with the line format that carries it back and the host's reader of it.
//!
//! # Using it from a host
//!
//! - Make the host binary able to be a worker: on `tasklet worker <flags…>` call
//!   `std::process::exit(tasklet_worker::serve_main(std::env::args().skip(2)))` *before* starting
//!   any runtime machinery, and give the pool `WorkerCommand { program: current_exe, args:
//!   ["worker"] }`; the pool appends its own flags (`--shm-fd`, `--backend`, …).
//! - `Pool` is `Send + Sync` behind an `Arc`; a `Worker` is `Send` (not `Sync`: one lease drives
//!   it, from any thread, one op at a time).
//! - A [`Launch`] names its kernel by index in the module's `kernels`, in the order
//!   [`Worker::load_module`] returned them: resolve a name once, at load, not per launch.
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

pub mod contract;
pub mod host;
pub mod nvml;
pub mod worker;

pub use host::guest_memory;
pub use worker::{cpus, nvrtc};

pub use contract::marks::MAX_MARKS;
pub use contract::modules::{MAX_MODULES, MAX_MODULE_TEXT_BYTES};
pub use contract::{
    charged_bytes, BackendKind, Compiled, DeviceBinding, ErrorKind, Launch, LaunchLimits,
    LimitExceeded, LoadedModule, WorkerCommand, WorkerInfo, ALLOC_GRANULE,
};
pub use host::{probe, probe_cuda, Pool, PoolConfig, Worker, WorkerError};
pub use tasklet_ptx::{KernelInfo, ParamInfo, ParamType, MAX_PARAM_BYTES};
pub use worker::{
    serve_main, Backend, BackendError, CudaBackend, EmuBackend, EMU_LANE_INSTRUCTIONS_PER_SECOND,
    EMU_MAX_DEVICE_MAPPINGS, EMU_MAX_RESIDENT_CTAS,
};
