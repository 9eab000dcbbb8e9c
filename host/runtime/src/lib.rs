//! The tasklet host: runs tasklet components under wasmtime, implements `tasklet:gpu` with every call
//! checked against the tasklet's grant, and serves leases from supervised GPU worker processes.
//!
//! ```text
//! Host ── Linker (WASI p2 + tasklet:gpu) ── Store<TaskletState> per run
//!   └─ LeaseManager (VRAM accounting, expiry) ── tasklet_worker::Pool (one process per lease)
//! ```

mod bindings;
pub mod config;
pub mod gpu;
pub mod guest_memory;
mod host;
pub mod lease;
mod state;

pub use config::{Manifest, Policy};
pub use host::{Host, HostConfig, HostError, RunError, Sizing, Tasklet};
pub use lease::{Accounting, Device};
pub use tasklet_worker::{BackendKind, WorkerCommand, WorkerInfo};
