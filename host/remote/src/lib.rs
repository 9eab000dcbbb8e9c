//! A tasklet node's client: [`NodeClient`] for the node's operations (inventory, leases,
//! GPU_SUBMIT, deployed tasklets, any request), and [`RemoteGpu`], the `GpuService` whose GPU is
//! on a node, so that `tasklet_runtime::Runner` runs a tasklet here with its GPU work there.
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
//!
//! A one-shot is stateless, so it may run on any of several nodes: [`submit_anywhere`] runs a
//! GPU_SUBMIT on the first of a list ([`NodeList`], or any [`Fallback`]) that answers it, moving
//! on when a node cannot be reached, is full or draining, or is lost before it answers; and
//! [`RemoteGpu::with_fallback`] moves a tasklet's one-shots the same way while it holds nothing
//! on its node. A session never moves.
//!
//! A deployed tasklet runs on the node itself, wasm and GPU both:
//!
//! ```no_run
//! use tasklet_remote::{deployment_digest, NodeClient};
//! use tasklet_tls::Tenant;
//!
//! let manifest = std::fs::read("tasklets/iota/tasklet.toml")?;
//! let component = std::fs::read("tasklets/target/wasm32-wasip2/release/iota.wasm")?;
//! let mut node = NodeClient::connect("localhost", "certs", &Tenant::new("dev")?)?;
//! let digest = deployment_digest(&manifest, &component);
//! if !node.deploy_has(&digest)? {
//!     node.deploy_push(&manifest, &component)?;
//! }
//! let run = node.deploy_run(&digest, b"10")?;
//! println!("run {:032x}: {} in {:?}", run.run_id, run.exit, run.elapsed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod awake;
mod channel;
mod client;
mod connect;
mod deploy;
mod error;
mod fallback;
mod gpu;
mod path;
mod sink;
mod spin;

/// The target of the client's timeline events, TRACE events whose names name the stage: `sent`
/// (frames handed to quinn) and `read` (a read of the stream returned bytes), and where the
/// runtime thread kept awake stops: `awake-ended`, `awake-refused` (no spinning slot free), and
/// where the calling thread stops polling for a reply: `spin-ended`, `spin-refused`; a bulk
/// write's frames mark `frame-copied` (the calling thread framed a chunk) and `frame-sent`
/// (quinn took it). They carry no fields; the node marks its own stages the same way
/// (`tasklet_node::TIMELINE`).
pub const TIMELINE: &str = "tasklet_remote::timeline";

pub use channel::transfer_streams;
pub use client::{Closer, LeaseGrant, NodeClient, NodeInventory};
pub use connect::{ConnectOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT};
pub use deploy::{deployment_digest, DeployExit, DeployPushed, DeployRun};
pub use error::ClientError;
pub use fallback::{stateless_may_move, submit_anywhere, Fallback, NodeList, Submitted};
pub use gpu::{manifest_grant, RemoteGpu};
pub use path::{PathStats, PathWatch};
/// A deployment's digest, as DEPLOY_PUSH returns it and DEPLOY_RUN names it.
pub use tasklet_wire::Digest;
