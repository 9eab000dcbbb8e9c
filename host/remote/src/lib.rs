//! A tasklet node's client: [`NodeClient`] for the node's operations (inventory, leases,
//! GPU_SUBMIT, any request), and [`RemoteGpu`], the `GpuService` whose GPU is on a node, so
//! that `tasklet_runtime::Runner` runs a tasklet here with its GPU work there.
//!
//! ```no_run
//! use tasklet_remote::{NodeClient, RemoteGpu};
//! use tasklet_runtime::{Manifest, Policy, Runner};
//! use tasklet_tls::Tenant;
//!
//! let manifest = Manifest::load("tasklets/iota".as_ref())?;
//! let runner = Runner::new()?;
//! let tasklet = runner.load(manifest.clone(), Policy::default().grant(&manifest))?;
//! let node = NodeClient::connect("localhost", "certs", &Tenant::new("dev")?)?;
//! let gpu = RemoteGpu::for_manifest(node, &manifest)?;
//! let output = runner.run(&tasklet, b"10", Box::new(gpu))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The client is synchronous: it runs a small Tokio runtime on a thread of its own and blocks
//! the caller for each answer. A lost connection (the node stopped, or went quiet past the idle
//! timeout) fails every later call with *disconnected*, which `RemoteGpu` reports as the
//! `device-lost` error; a refused handshake is explained in one line (`tasklet_tls::explain`).

mod channel;
mod client;
mod connect;
mod error;
mod gpu;

pub use client::{LeaseGrant, NodeClient};
pub use connect::{ConnectOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT};
pub use error::ClientError;
pub use gpu::{manifest_grant, RemoteGpu};
