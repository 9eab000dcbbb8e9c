//! The tasklet host: runs tasklet components under wasmtime, implements `tasklet:gpu` with every call
//! checked against the tasklet's grant, and serves leases from supervised GPU worker processes.
//!
//! ```text
//! Host ── Runner (engine, linker: WASI p2 + tasklet:gpu) ── Store<TaskletState> per run
//!   wit     the tasklet:gpu glue: resource handles ↔ ids, gpu-error at the edge
//!   gpu     GpuService: where a tasklet's GPU operations go; LocalGpu checks them (rights,
//!           quotas, ownership, spans) and runs them on this machine
//!   lease   LeaseManager: per-device VRAM accounting, expiry ── a tasklet_worker::Pool per device
//!   devices, placement: which devices a node lends, and which one a lease goes to
//!   error   GpuError, the host's own error type
//! ```
//! Each layer depends only on those below it.

pub mod component_bytes;
pub mod config;
pub mod devices;
pub mod error;
pub mod gpu;
pub mod guest_memory;
pub mod guest_output;
mod host;
pub mod large_buffer;
pub mod lease;
mod limits;
pub mod module_cache;
pub mod placement;
mod runner;
mod sleep;
mod state;
pub mod wit;

pub use config::{Manifest, Policy};
pub use error::GpuError;
pub use guest_output::{Captured, CapturedOutput, GuestOutput};
pub use host::{one_line, Host, HostConfig, HostError, Sizing};
pub use lease::{Accounting, Device, DeviceUsage};
pub use placement::DeviceRequirement;
pub use runner::{RunError, RunStop, Runner, Tasklet, Teardown, EPOCH_TICK};
pub use tasklet_worker::{BackendKind, WorkerCommand, WorkerInfo};
