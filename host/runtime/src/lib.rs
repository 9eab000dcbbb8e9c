//! The tasklet host: runs tasklet components under wasmtime, implements `tasklet:gpu` with every call
//! checked against the tasklet's grant, and serves leases from supervised GPU worker processes.
//!
//! ```text
//! Host ── Runner (engine, linker: WASI p2 + tasklet:gpu) ── Store<TaskletState> per run
//!   wit     the tasklet:gpu glue: resource handles ↔ ids, gpu-error at the edge
//!   gpu     GpuService: where a tasklet's GPU operations go; LocalGpu checks them (rights,
//!           quotas, ownership, spans) and runs them on this machine
//!   lease   LeaseManager: node-wide VRAM accounting, expiry ── tasklet_worker::Pool
//!   error   GpuError, the host's own error type
//! ```
//! Each layer depends only on those below it.

pub mod config;
pub mod error;
pub mod gpu;
pub mod guest_memory;
mod host;
pub mod lease;
mod limits;
mod runner;
mod state;
pub mod wit;

pub use config::{Manifest, Policy};
pub use error::GpuError;
pub use host::{Host, HostConfig, HostError, Sizing};
pub use lease::{Accounting, Device};
pub use runner::{RunError, RunStop, Runner, Tasklet, EPOCH_TICK};
pub use tasklet_worker::{BackendKind, WorkerCommand, WorkerInfo};
