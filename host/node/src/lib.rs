//! The tasklet node as a library: a host's leases, GPU sessions, one-shot submissions and
//! deployed tasklets served to remote clients over QUIC, with mutual TLS and tenants read from
//! client certificates; its metrics served to Prometheus.
//!
//! `tasklet node` is a thin command over this crate; another daemon embeds a node the same way:
//! build one with [`NodeBuilder`], serve it on its own Tokio runtime, and drain or stop it with a
//! [`NodeControl`]. [`NodeBuilder::build`] checks everything it needs before it serves; a daemon
//! that starts its [`Host`](tasklet_runtime::Host) (hence GPU workers) first can make the same
//! checks before that, each failing with the error `build` would give: [`check_policy_tenants`],
//! [`check_certs`], [`check_store`] (no other running node holds the folder),
//! [`check_addresses`] (both ports free) and, for a node in a cluster, [`check_advertise`] (the
//! address its record gives clients, which its certificate must name). What a node does, in
//! layers each using only those
//! below it:
//!
//! ```text
//! Node           the endpoint's accept loop; drain and stop; /metrics    (node, metrics::http)
//!   connection   a client: its tenant, grant, streams, GPU thread,       (connection)
//!                each stream's deploy lane
//!     dispatch   the GPU thread: requests on the connection's LocalGpu   (dispatch)
//!     deploy     pushes into the store, runs by digest on blocking       (deploy)
//!                threads, each run's GPU work on a LocalGpu of its own
//!       tasklet_runtime::gpu::LocalGpu, tasklet_deploy::Deployer
//!   caller, reply, metrics, shared: what the layers above share
//! ```
//!
//! # Tenants and grants
//!
//! A client's certificate names its tenant (see `tasklet_tls`). The host's policy decides what a
//! tenant gets: `[tasklets]` caps everyone, `[tenants.NAME]` narrows it for tenant `NAME`. A
//! policy without any `[tenants.*]` section serves every tenant the node's CA certified; one
//! with sections refuses the tenants it does not list, with `UNAUTHORIZED` naming the section to
//! add. An [`Authorizer`] may then narrow or refuse a tenant further. A connection may narrow its
//! grant once more with GRANT (a tasklet's manifest), before its first lease; the node never
//! widens it.
//!
//! # Deployed tasklets
//!
//! With a store ([`NodeBuilder::store`]) the node serves DEPLOY_PUSH, DEPLOY_HAS and DEPLOY_RUN.
//! Deployments are content-addressed (the same tasklet has the same digest whoever pushed it,
//! and is stored and compiled once), but each tenant sees and runs only the deployments it
//! pushed itself: to any other it is told `NOT_FOUND`, as for a digest nobody pushed. A run is
//! granted its manifest's request cut down by the tenant's ceiling, and its GPU work goes to
//! this node's leases. A tenant's `deploy = false` (in `[tasklets]` or its `[tenants.NAME]`
//! section) refuses its pushes and runs with `UNAUTHORIZED`, naming the key.
//!
//! # Metrics
//!
//! [`NodeBuilder::metrics`] serves Prometheus text at `/metrics`: `gpu_submit_total`,
//! `gpu_submit_errors`, `gpu_submit_output_bytes`, `gpu_lease_acquired`, `gpu_lease_dropped`
//! (per tenant), `gpu_vram_allocated_bytes`, the `gpu_op_seconds` latency histogram (per op),
//! and the node's own `tasklet_*` series: connections, refusals, requests, deploy pushes and
//! runs. [`NodeControl::metrics`] reads the same registry.
//!
//! # Cluster
//!
//! With [`NodeBuilder::nats`] the node joins a cluster: while it serves, its record is in the
//! NATS registry (see `tasklet_cluster`), where clients find it and place work by requirement.
//! NATS is never on the serving path: a node that cannot reach it serves anyway and registers
//! once it answers. A drain marks the record draining; a stop removes it; a node that dies is
//! gone from the registry within 10 s.
//!
//! # Connections
//!
//! Each connection owns its leases: when it closes, or its client goes quiet for the idle
//! timeout, its GPU thread drops everything it held. Malformed bytes close the connection with
//! GOAWAY `PROTOCOL_ERROR`; the node serves its other connections on. See `docs/wire.md` for the
//! protocol.
//!
//! # Timeline
//!
//! For profiling, the node marks each stage of a request's way through it with a TRACE event of
//! target [`TIMELINE`], the event's name naming the stage: `read` (a stream's read returned
//! bytes), `handed` (what they held went to the connection's GPU thread), `taken` (the GPU thread
//! took it), `done` (the GPU thread finished one request), and where its reply went: `written`
//! (handed to quinn by the GPU thread), `left` (left for a runtime thread kept awake for it),
//! `written-hot` (written by that thread) or `written-queued` (by the stream's writer task).
//! The hot waits mark where they start and stop: `poll-began`, `poll-ended` and `poll-refused`
//! (the GPU thread began polling for its next batch, its poll ran out of budget, or it found no
//! spinning slot free), `hot-ended` and `hot-refused` (the runtime thread kept awake for a
//! stream). A MEM_WRITE's pieces mark `budget-wait` and `budget-got` (a stream's reader waiting
//! for the connection's queue budget), `piece-gathered` and `piece-written` (the GPU thread
//! gathered a piece's bytes, and the worker wrote them). The events carry no fields; a
//! subscriber that records when each came (the fabric benchmark's `timeline` phase) sees where
//! the time goes. With TRACE off for the target (the default), each costs a load and a branch.
//!
//! # Embedding
//!
//! ```no_run
//! use tasklet_node::NodeBuilder;
//! use tasklet_runtime::{BackendKind, WorkerCommand};
//!
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! // The program is its own GPU worker: on `worker` it serves as one (see tasklet_worker).
//! let worker = WorkerCommand { program: std::env::current_exe()?, args: vec!["worker".into()] };
//! let node = NodeBuilder::new()
//!     .listen("127.0.0.1:5701".parse()?)
//!     .certs("certs")
//!     .backend(BackendKind::Emu)
//!     .worker(worker)
//!     .build()?;
//! let control = node.control();
//! tokio::spawn(async move {
//!     let _ = tokio::signal::ctrl_c().await;
//!     control.drain();
//! });
//! node.serve().await?;
//! # Ok(())
//! # }
//! ```
//!
//! `examples/embedded.rs` is this as a whole program.

mod authorize;
mod builder;
mod caller;
mod cluster;
mod connection;
mod connection_budgets;
mod deploy;
mod dispatch;
mod inventory;
mod job;
mod log_limit;
mod metrics;
mod node;
mod outlet;
mod reply;
mod reply_budget;
mod shared;
mod status;
mod tenant_slots;
mod transport;

/// The target of the node's [timeline](crate#timeline) events.
pub const TIMELINE: &str = "tasklet_node::timeline";

pub use authorize::{Authorization, Authorizer, Denied};
pub use builder::{
    check_addresses, check_advertise, check_certs, check_policy_tenants, check_store, NodeBuilder,
    NodeError, DEFAULT_IDLE_TIMEOUT, DEFAULT_LISTEN, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_DEPLOY_JOBS, DEFAULT_MAX_TENANT_CONNECTIONS, DEFAULT_MAX_TENANT_DEPLOY_JOBS,
    DEFAULT_STALL_TIMEOUT,
};
pub use deploy::{DeployOpenError, StoreLockError};
pub use metrics::{MetricsError, MetricsSnapshot, NodeMetrics};
pub use node::{Node, NodeControl, RunningNode};
pub use status::NodeStatus;
pub use tasklet_cluster::{Heartbeat, NatsConfig};
pub use tasklet_deploy::DeployConfig;
pub use tasklet_store::StoreConfig;
