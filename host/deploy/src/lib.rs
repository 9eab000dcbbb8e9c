//! Deployed tasklets on a node: pushed once, compiled once, run by digest many times.
//!
//! A [`Deployer`] sits between a node's connections and its [`Store`](tasklet_store::Store):
//!
//! ```text
//! Deployer ── push ── manifest checked, component compiled and linked ── Store (blobs, record)
//!    │                                                 └─ compiled form ── Store's compiled cache
//!    └── run(digest) ── warm set (linked tasklets in memory, LRU)
//!                          └─ miss: compiled cache ── miss: compile (and cache)
//!                       ── Runner::run: instantiate, call `run`, tear down
//! ```
//!
//! # Pushing
//!
//! [`Deployer::push`] (or [`Deployer::start_push`] and [`Push::write_chunk`] for a component
//! arriving in pieces) refuses, each with a typed [`Error`] whose message is one line:
//! a manifest that is not a tasklet manifest, a component past
//! [`DeployConfig::max_component_bytes`], and a component this node cannot run (not a
//! WebAssembly component; imports the host does not provide; no tasklet `run` export). The
//! component is compiled *and linked* before anything is stored, so a refused push leaves the
//! store as it was, and the compiled form goes into the compiled cache at once, so that not even
//! the first run compiles. Pushing what is already there changes nothing
//! ([`Pushed::already_present`]) and compiles nothing.
//!
//! # Running
//!
//! [`Deployer::run`] names a deployment by digest. The caller decides the run's grant from the
//! manifest (a node intersects it with its policy and the tenant's) and gives the
//! [`GpuService`](tasklet_runtime::gpu::GpuService) its GPU operations go to. The
//! [`RunOutcome`] carries an unguessable [`RunId`], the [`ExitStatus`] (ok, the tasklet's error,
//! a trap, the wall-time limit, an instantiation failure), the output, and how the linked
//! tasklet was obtained ([`LoadKind`]):
//!
//! - **warm**: a tasklet linked for an earlier run, kept in memory: the run only instantiates
//!   and calls. The warm set is bounded in count and in compiled bytes
//!   ([`DeployConfig::warm_tasklets`], [`DeployConfig::warm_bytes`]); the deployments used
//!   longest ago leave first. Runs of one deployment at once each take their own tasklet.
//! - **cached**: read from the store's compiled cache (its digest verified) and linked; no
//!   compiling.
//! - **compiled**: the cache had no entry, or a damaged one: the component is compiled, and
//!   the result cached.
//!
//! The deployer owns its wasm engine ([`Deployer::new`], or [`Deployer::with_runner`] for one
//! configured otherwise), so a tasklet linked by it is always run by the engine that linked it.
//! Its compiled-cache entries are keyed by that engine's fingerprint: another build or
//! configuration of the engine misses them rather than loading code it did not make.
//!
//! # Using it
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let host: tasklet_runtime::Host = unimplemented!();
//! use std::sync::Arc;
//! use tasklet_deploy::{DeployConfig, Deployer};
//! use tasklet_runtime::gpu::LocalGpu;
//! use tasklet_store::{Store, StoreConfig};
//!
//! let store = Store::open("/var/lib/tasklet/store", StoreConfig::default())?;
//! let deployer = Deployer::new(store, DeployConfig::default())?;
//!
//! let manifest = std::fs::read("tasklets/iota/tasklet.toml")?;
//! let component = std::fs::File::open("iota.wasm")?;
//! let pushed = deployer.push(&manifest, component)?;
//!
//! let leases = Arc::clone(host.leases());
//! let outcome = deployer.run(
//!     &pushed.digest,
//!     b"4",
//!     |manifest| host.policy().grant(manifest),
//!     |grant| Box::new(LocalGpu::new(grant, leases)),
//! )?;
//! println!("{} {} {:?}", outcome.run_id, outcome.status, outcome.load);
//! # Ok(())
//! # }
//! ```

mod compile_gate;
mod config;
mod deployer;
mod error;
mod load;
mod manifest;
mod push;
mod run;
mod run_id;
mod warm;

pub use config::{DeployConfig, MAX_COMPONENT_SETTING, MAX_MANIFEST_BYTES};
pub use deployer::Deployer;
pub use error::Error;
pub use load::LoadKind;
pub use push::{Compiled, Push, Pushed};
pub use run::{ExitStatus, RunOutcome};
pub use run_id::RunId;
