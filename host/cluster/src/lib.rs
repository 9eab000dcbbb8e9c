//! Tasklet nodes as a cluster on NATS JetStream.
//!
//! Membership, discovery and blob distribution run on NATS, an existing distributed engine:
//! a JetStream KV bucket with per-key expiry is the registry of live nodes, and the JetStream
//! object store holds blobs by digest. NATS clusters and leaf nodes carry this past one
//! server without anything here changing. This crate does no networking of its own beyond the
//! NATS client, and decides nothing a node must enforce: a registry record never authorizes
//! anything (see *Trust* below).
//!
//! # Use
//!
//! ```no_run
//! # async fn example(record: impl Fn() -> tasklet_cluster::NodeRecord + Send + Sync + 'static)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! use tasklet_cluster::{choose, Cluster, Heartbeat, NatsConfig, Registrar, Registry, Requirement};
//!
//! let cluster = Cluster::connect(&NatsConfig::new("nats://127.0.0.1:4222")).await?;
//!
//! // A node: its record in the registry until it stops.
//! let registrar = Registrar::start(&cluster, Heartbeat::default(), record).await?;
//!
//! // A client: the live nodes, and where to run.
//! let nodes = Registry::open(&cluster).await?.list().await?;
//! let requirement: Requirement = "gpu:vram=8GiB,cc>=9.0".parse()?;
//! for candidate in choose(&requirement, &nodes) {
//!     // Connect to candidate.node.address; on capacity-exceeded or a connection failure
//!     // before the run started, try the next one.
//! }
//! registrar.stop().await?;
//! # Ok(()) }
//! ```
//!
//! # Data model
//!
//! | what | where | key / name | value |
//! | --- | --- | --- | --- |
//! | live nodes | KV bucket `tasklet-nodes` (stream `KV_tasklet-nodes`, file storage, one value per key, per-message TTLs on) | the node's name ([`NodeName`]: `A-Z a-z 0-9 - _ .`, at most 64) | a [`NodeRecord`] as JSON |
//! | blobs | object store `tasklet-blobs` (stream `OBJ_tasklet-blobs`) | `sha256/<64 lowercase hex>` ([`object_name`]) | the bytes whose SHA-256 that is: a deployment's record, manifest and component |
//! | who pushed what | KV bucket `tasklet-owners` ([`OWNERS_BUCKET`]) | `<deployment digest>.<tenant>` | `{"pushed_unix_ms": …}` |
//!
//! [`ClusterDeployments`] publishes a deployment (`tasklet deploy push --nats`) and fetches it
//! for the tenant that pushed it; [`ClusterSource`] is that fetch as a node's
//! `tasklet_store::DeploymentSource`, so that a node runs a digest it lacks.
//!
//! A record, as written (`format` 1; readers ignore fields they do not know and refuse a newer
//! format):
//!
//! ```json
//! {
//!   "format": 1,
//!   "name": "gpu-a",
//!   "address": "10.0.0.5:5701",
//!   "cert_sha256": "<SHA-256 of the node certificate's DER, hex>",
//!   "version": "0.1.0",
//!   "devices": [{ "index": 0, "name": "NVIDIA H100", "backend": "cuda",
//!                 "total_vram": 85899345920, "free_vram": 68719476736,
//!                 "compute_capability": "9.0", "leases": 3 }],
//!   "load": { "connections": 4, "sessions": 2, "runs": 1 },
//!   "draining": false,
//!   "heartbeat_unix_ms": 1767225600000
//! }
//! ```
//!
//! The bucket is created by the first [`Registrar`] with the server's per-message TTLs and
//! delete markers (nats-server ≥ 2.11; [`Cluster::connect`] refuses older servers). The object
//! store is created by the first [`Blobs::open`]. With [`NatsConfig::bucket_replicas`] they
//! are replicated across a NATS cluster.
//!
//! # Timings
//!
//! [`Heartbeat::default`]: a node writes its record every **2 s** with a TTL of **6 s**; the
//! server removes a record 6 s after its last write (its expiry runs about once a second) and
//! leaves a delete marker that watchers see, so a node that stops refreshing — killed, hung,
//! cut off from NATS — is gone from the registry **within 10 s**. Readers also treat a record
//! older than **10 s** (`stale_after`, by their clock against the server's) as gone. A clean
//! [`Registrar::stop`] removes the record at once. A registrar that loses NATS keeps retrying
//! every heartbeat; the client reconnects with waits growing to 1 s, so the record is back
//! within about 3 s of NATS returning (the bucket is created again if the server lost it).
//!
//! # Placement
//!
//! [`Requirement`] parses `gpu[:vram=8GiB][,cc>=9.0][,backend=cuda]`; `gpu` alone accepts any
//! device, the emulator included. [`choose`] keeps the nodes that are not draining and have a
//! device that fits, and orders them by most free VRAM on that device, then fewest leases,
//! then least load, then name. The caller tries them in order, moving on only when a node
//! refuses for capacity or cannot be reached *before the run started*; the node admits or
//! refuses, never the registry.
//!
//! # Trust
//!
//! Anyone who can write to the bucket can write a record, so a record is a hint where to
//! connect, nothing more: a client connecting to a node verifies the node's certificate
//! against the fabric CA *and* checks that its SHA-256 is the record's `cert_sha256`, and the
//! node checks the client's certificate as always. Blobs are verified against their digest on
//! every fetch. NATS itself is reached with TLS and credentials when the operator configures
//! them ([`NatsConfig`]); restrict the accounts that may write to `$KV.tasklet-nodes.>` and
//! `$O.tasklet-blobs.>` to the nodes and deployers.

mod blobs;
mod cluster;
mod config;
mod deployments;
mod error;
mod heartbeat;
mod local_server;
mod nodes_bucket;
mod placement;
mod record;
mod registrar;
mod registry;
mod source;
mod view_cache;

pub use blobs::{object_name, Blobs, Published, BLOBS_BUCKET, DEFAULT_MAX_BLOB_BYTES};
pub use cluster::Cluster;
pub use config::{NatsConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT};
pub use deployments::{ClusterDeployments, FetchedParts, PublishedDeployment, OWNERS_BUCKET};
pub use error::{Error, Result};
pub use heartbeat::Heartbeat;
pub use local_server::{find_nats_server, start_nats_server, LocalServer};
pub use nodes_bucket::NODES_BUCKET;
pub use placement::{choose, Candidate, Requirement, RequirementError};
pub use record::{
    ComputeCapability, DeviceRecord, InvalidComputeCapability, Load, NodeName, NodeRecord,
    RecordError, BACKEND_CUDA, BACKEND_EMU, MAX_DEVICES, MAX_NAME_LEN, MAX_RECORD_BYTES,
    RECORD_FORMAT,
};
pub use registrar::{RecordSource, Registrar, RegistrarStatus};
pub use registry::{LiveNode, Registry, RegistryEvent};
pub use source::ClusterSource;
pub use tasklet_store::Digest;
pub use view_cache::{CachedView, ViewCache, DEFAULT_VIEW_MAX_AGE};
