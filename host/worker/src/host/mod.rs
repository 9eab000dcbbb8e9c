//! The host's side: worker processes started, driven, watched and ended from the host process.
//!
//! - `process`: a worker's OS process as our child (spawn, liveness, kill, reap);
//! - [`client`]: [`Worker`], the RPC client of one worker process, with its deadlines;
//! - [`pool`]: [`Pool`], warm workers handed out one per lease, reset and reused or replaced;
//! - `slot`: how a leased worker gives its pool slot back, without the client knowing pools;
//! - [`linger`]: how long a leased worker may spin for its next request;
//! - [`probe`](mod@probe): whether a backend works here, asked of a short-lived worker;
//! - [`guest_memory`]: tasklets' linear memories, which workers map to copy without the host;
//! - `module_aliases`: repeated loads of a module the worker holds, answered by the host;
//! - [`mapped`]: memory a lease's kernels share with the host (persistent kernels' rings);
//! - [`error`]: what these fail with ([`WorkerError`]).

pub mod client;
pub mod error;
pub mod guest_memory;
pub mod linger;
pub mod mapped;
pub(crate) mod module_aliases;
pub mod output;
pub mod pool;
pub mod probe;
pub(crate) mod process;
pub(crate) mod slot;

pub use client::Worker;
pub use error::WorkerError;
pub use pool::{Census, Pool, PoolConfig};
pub use probe::{probe, probe_cuda};
