//! [`NodeBuilder`]: everything a node is made of, and the checks that it can serve.

use crate::authorize::Authorizer;
use crate::cluster::Membership;
use crate::deploy::{DeployOpenError, Deployments};
use crate::metrics::{MetricsError, NodeMetrics};
use crate::node::Node;
use crate::shared::{Limits, Shared};
use crate::transport;
use std::net::{Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tasklet_cluster::{ClusterSource, Heartbeat, NatsConfig, NodeName, RecordError};
use tasklet_deploy::DeployConfig;
use tasklet_runtime::config::DeployLimits;
use tasklet_runtime::{BackendKind, Host, HostConfig, HostError, Policy, WorkerCommand};
use tasklet_store::StoreConfig;
use tasklet_tls::{InvalidTenant, Tenant};
use tasklet_wire::limits::DEFAULT_MAX_STREAM_BYTES;
use tasklet_wire::DEFAULT_PORT;

/// Where a node listens unless told otherwise: every address, IPv6 and (where the system maps
/// them) IPv4, on [`DEFAULT_PORT`].
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V6(Ipv6Addr::UNSPECIFIED), DEFAULT_PORT);

/// Defaults of the timeouts; see the builder's methods for what each bounds.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_MAX_CONNECTIONS: u64 = 256;
/// Connections one tenant may hold at once by default: half the node's, so that one tenant
/// cannot take them all.
pub const DEFAULT_MAX_TENANT_CONNECTIONS: u64 = DEFAULT_MAX_CONNECTIONS / 2;
/// Deploy requests (pushes, runs) served at once by default, each on a blocking thread of the
/// node's tokio runtime: half the 512 such threads tokio allows unless told, so that the node's
/// own blocking work (its shutdown among it) always finds one.
pub const DEFAULT_MAX_DEPLOY_JOBS: u64 = 256;
/// Deploy requests one tenant may have served at once by default: half the node's.
pub const DEFAULT_MAX_TENANT_DEPLOY_JOBS: u64 = DEFAULT_MAX_DEPLOY_JOBS / 2;

/// Why a node could not be built.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("a node needs its certificate folder: call NodeBuilder::certs (`tasklet certs init DIR` makes one)")]
    NoCerts,
    #[error("cannot use the node's certificates: {0}")]
    Certs(#[from] tasklet_tls::Error),
    #[error("a node that starts its own host needs a worker command: call NodeBuilder::worker (or give it a started host with NodeBuilder::host)")]
    NoWorker,
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("the node's policy names tenant {name:?}, which no certificate can carry: {reason}")]
    InvalidTenant { name: String, reason: InvalidTenant },
    #[error("cannot listen on {addr}: {source}{}", hint(addr, source))]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("a node is built and served inside a Tokio runtime (quinn needs one)")]
    NoRuntime,
    #[error("the node's store: {source}")]
    Store {
        path: PathBuf,
        source: DeployOpenError,
    },
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    #[error("cannot serve metrics on {addr}: {source}{}", hint(addr, source))]
    MetricsBind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("a node in a cluster needs a name, its key in the registry: call NodeBuilder::name (`tasklet node --name`)")]
    NoClusterName,
    #[error("the node's name cannot be its key in the cluster registry: {0}")]
    ClusterName(RecordError),
    #[error("the node listens on {listen}, which clients cannot connect to: give the address they reach it at (`tasklet node --advertise HOST:PORT`; NodeBuilder::advertise)")]
    NoAdvertise { listen: SocketAddr },
    #[error("the node would advertise {addr}, but its certificate is not valid for {host} (it names {}), so clients would refuse it: issue it again with that name, `tasklet certs node CERTS --name {host}`, or advertise a name it has", if names.is_empty() { "nothing".to_owned() } else { names.join(", ") })]
    AdvertiseNotCertified {
        addr: String,
        host: String,
        names: Vec<String>,
    },
    #[error("the advertised address {addr:?} cannot be connected to: {why} (give HOST:PORT, as clients reach the node, e.g. gpu1.example:5701)")]
    BadAdvertise { addr: String, why: &'static str },
    #[error(transparent)]
    Heartbeat(tasklet_cluster::Error),
}

/// What to do about a bind that failed, as the end of its error line.
fn hint(addr: &SocketAddr, source: &std::io::Error) -> String {
    match source.kind() {
        std::io::ErrorKind::AddrInUse => format!(
            " (another process holds port {}, perhaps another node: stop it, or give this one another port)",
            addr.port()
        ),
        std::io::ErrorKind::PermissionDenied if addr.port() < 1024 => format!(
            " (port {} is privileged: use a port from 1024 up, or give the program the right to bind it)",
            addr.port()
        ),
        _ if addr.is_ipv6() && addr.ip().is_unspecified() => {
            " (if this machine has no IPv6, listen on 0.0.0.0 instead)".into()
        }
        _ => String::new(),
    }
}

/// Builds a [`Node`]: its address, certificates, host (or what to start one with), tenant
/// authorization and timeouts.
///
/// Only [`NodeBuilder::certs`] and a way to get a host ([`NodeBuilder::host`], or
/// [`NodeBuilder::worker`] to start one) are required; everything else has a default.
pub struct NodeBuilder {
    listen: SocketAddr,
    certs: Option<PathBuf>,
    host: Option<Host>,
    policy: Policy,
    backend: BackendKind,
    worker: Option<WorkerCommand>,
    authorizer: Option<Arc<dyn Authorizer>>,
    name: Option<String>,
    limits: Limits,
    store: Option<PathBuf>,
    deploy: Option<DeployConfig>,
    store_config: Option<StoreConfig>,
    metrics: Option<SocketAddr>,
    nats: Option<NatsConfig>,
    heartbeat: Heartbeat,
    advertise: Option<String>,
}

impl Default for NodeBuilder {
    fn default() -> Self {
        NodeBuilder::new()
    }
}

impl NodeBuilder {
    pub fn new() -> NodeBuilder {
        NodeBuilder {
            listen: DEFAULT_LISTEN,
            certs: None,
            host: None,
            policy: Policy::default(),
            backend: BackendKind::Emu,
            worker: None,
            authorizer: None,
            name: None,
            store: None,
            deploy: None,
            store_config: None,
            metrics: None,
            nats: None,
            heartbeat: Heartbeat::default(),
            advertise: None,
            limits: Limits {
                idle_timeout: DEFAULT_IDLE_TIMEOUT,
                stall_timeout: DEFAULT_STALL_TIMEOUT,
                drain_timeout: None,
                max_connections: DEFAULT_MAX_CONNECTIONS,
                max_tenant_connections: DEFAULT_MAX_TENANT_CONNECTIONS,
                max_stream_bytes: DEFAULT_MAX_STREAM_BYTES,
                max_deploy_jobs: DEFAULT_MAX_DEPLOY_JOBS,
                max_tenant_deploy_jobs: DEFAULT_MAX_TENANT_DEPLOY_JOBS,
            },
        }
    }

    /// The UDP address to serve on (default [`DEFAULT_LISTEN`]; port 0 picks a free one, which
    /// [`Node::local_addr`] tells).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// The certificate folder (`ca.pem`, `node.pem`, `node.key`) the node proves itself with and
    /// checks its clients against.
    pub fn certs(mut self, dir: impl Into<PathBuf>) -> Self {
        self.certs = Some(dir.into());
        self
    }

    /// Serves this host's leases: its policy (with its `[tenants.*]` sections) is the node's.
    /// Without one, the node starts its own from [`NodeBuilder::policy`],
    /// [`NodeBuilder::backend`] and [`NodeBuilder::worker`].
    pub fn host(mut self, host: Host) -> Self {
        self.host = Some(host);
        self
    }

    /// The policy of the host the node starts (default: [`Policy::default`]).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The backend of the host the node starts (default: the emulator).
    pub fn backend(mut self, backend: BackendKind) -> Self {
        self.backend = backend;
        self
    }

    /// How the host the node starts runs a GPU worker process: typically the daemon's own
    /// program with an argument on which it calls `tasklet_worker::serve_main`.
    pub fn worker(mut self, command: WorkerCommand) -> Self {
        self.worker = Some(command);
        self
    }

    /// Consulted once per connection, after the policy: see [`Authorizer`].
    pub fn authorizer(mut self, authorizer: impl Authorizer) -> Self {
        self.authorizer = Some(Arc::new(authorizer));
        self
    }

    /// What the node calls itself in HELLO's reply (default: `tasklet-node <version>`), and
    /// its key in the cluster registry when it joins one ([`NodeBuilder::nats`]; then it is
    /// required, and 1 to 64 of `A-Z a-z 0-9 - _ .`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// A connection that hears nothing from its client for this long is closed, and its leases
    /// with it (default [`DEFAULT_IDLE_TIMEOUT`]). The node's clients send keep-alives well
    /// within it.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.limits.idle_timeout = timeout;
        self
    }

    /// The longest a client may take to say HELLO after its handshake, or go without sending a
    /// byte of a frame it has begun (default [`DEFAULT_STALL_TIMEOUT`]); past it the connection
    /// is closed.
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.limits.stall_timeout = timeout;
        self
    }

    /// The longest a drain waits for running leases to end before closing their connections
    /// (default: no limit but the leases' own expiry).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.limits.drain_timeout = Some(timeout);
        self
    }

    /// Most connections served at once (default [`DEFAULT_MAX_CONNECTIONS`]); each holds an OS
    /// thread for its GPU work.
    pub fn max_connections(mut self, n: u64) -> Self {
        self.limits.max_connections = n.max(1);
        self
    }

    /// Most connections one tenant may hold at once (default
    /// [`DEFAULT_MAX_TENANT_CONNECTIONS`], half the node's): its next is closed at once with
    /// `CAPACITY_EXCEEDED`, saying so, so that no tenant can take every connection.
    pub fn max_tenant_connections(mut self, n: u64) -> Self {
        self.limits.max_tenant_connections = n.max(1);
        self
    }

    /// Most deploy requests (pushes, runs, DEPLOY_HAS) served at once, over every tenant
    /// (default [`DEFAULT_MAX_DEPLOY_JOBS`]): each holds a blocking thread of the tokio runtime
    /// the node runs on, so keep it below that runtime's `max_blocking_threads`. One more is
    /// answered `CAPACITY_EXCEEDED` at once, so that a placed run moves to another node.
    pub fn max_deploy_jobs(mut self, n: u64) -> Self {
        self.limits.max_deploy_jobs = n.max(1);
        self
    }

    /// Most deploy requests one tenant may have served at once (default
    /// [`DEFAULT_MAX_TENANT_DEPLOY_JOBS`], half the node's); its next is answered
    /// `CAPACITY_EXCEEDED` at once. A policy's `tenant-max-runs` bounds its runs besides.
    pub fn max_tenant_deploy_jobs(mut self, n: u64) -> Self {
        self.limits.max_tenant_deploy_jobs = n.max(1);
        self
    }

    /// Serves deployed tasklets (DEPLOY_PUSH, DEPLOY_HAS, DEPLOY_RUN) from a store in `dir`,
    /// created if need be. Without one the node answers deploy requests `UNSUPPORTED`.
    ///
    /// The folder holds the content-addressed store (`blobs/`, `deployments/`, `compiled/`,
    /// `tmp/`) and `owners/`, which records the tenants that pushed each deployment: a tenant
    /// runs only what it pushed itself.
    pub fn store(mut self, dir: impl Into<PathBuf>) -> Self {
        self.store = Some(dir.into());
        self
    }

    /// The deployer's limits: component size, tasklets kept warm. Default: the policy's
    /// `[deploy]` section, each key it leaves out [`DeployConfig::default`]'s.
    pub fn deploy_config(mut self, config: DeployConfig) -> Self {
        self.deploy = Some(config);
        self
    }

    /// The store's limits: file size, compiled cache. Default: the policy's `[store]` section,
    /// each key it leaves out [`StoreConfig::default`]'s.
    pub fn store_config(mut self, config: StoreConfig) -> Self {
        self.store_config = Some(config);
        self
    }

    /// Serves the node's metrics in Prometheus's text format at `http://ADDR/metrics` (plain
    /// HTTP/1.1 over TCP: bind it to an address only the scraper reaches). Port 0 picks a free
    /// one, which [`Node::metrics_addr`] tells.
    pub fn metrics(mut self, addr: SocketAddr) -> Self {
        self.metrics = Some(addr);
        self
    }

    /// Joins the cluster on this NATS: while the node serves, its record (name, address,
    /// certificate fingerprint, devices with their free memory, leases, load, draining) is in
    /// the registry, refreshed every heartbeat; a drain marks it draining and a stop removes it.
    /// A node that cannot reach NATS serves anyway and registers once NATS answers.
    ///
    /// With a store ([`NodeBuilder::store`]), a run of a deployment the node lacks is fetched
    /// from the cluster's object store (`tasklet deploy push --nats`) when the tenant asking
    /// pushed it there, verified, stored and compiled here, then run.
    pub fn nats(mut self, config: NatsConfig) -> Self {
        self.nats = Some(config);
        self
    }

    /// How often the node's record is written and how long it outlives the last write
    /// (default [`Heartbeat::default`]: every 2 s, gone within 10 s of the node).
    pub fn heartbeat(mut self, heartbeat: Heartbeat) -> Self {
        self.heartbeat = heartbeat;
        self
    }

    /// Where clients reach this node (`HOST:PORT`), as its cluster record says. Default: the
    /// address it listens on, unless that is a wildcard (`0.0.0.0`, `::`), which then needs
    /// this.
    pub fn advertise(mut self, addr: impl Into<String>) -> Self {
        self.advertise = Some(addr.into());
        self
    }

    /// Starts the host (unless one was given; this waits for its first worker), reads the
    /// certificates, opens the store and binds the addresses. Call it inside a Tokio runtime.
    pub fn build(self) -> Result<Node, NodeError> {
        let certs = self.certs.ok_or(NodeError::NoCerts)?;
        let server = transport::server_config(&certs, &self.limits)?;
        let host = match self.host {
            Some(host) => {
                check_policy_tenants(host.policy())?;
                host
            }
            // Checked before any worker starts.
            None => {
                check_policy_tenants(&self.policy)?;
                Host::new(HostConfig {
                    policy: self.policy,
                    worker: self.worker.ok_or(NodeError::NoWorker)?,
                    backend: self.backend,
                })?
            }
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(NodeError::NoRuntime);
        }
        let endpoint =
            crate::transport::endpoint(server, self.listen).map_err(|source| NodeError::Bind {
                addr: self.listen,
                source,
            })?;
        // A node in a cluster fetches the deployments it lacks from the cluster's object store.
        let source = self.nats.clone().map(|nats| {
            let handle = tokio::runtime::Handle::current();
            ClusterSource::new(nats, handle)
        });
        let membership = match self.nats {
            None => None,
            Some(nats) => {
                let listen = endpoint.local_addr().unwrap_or(self.listen);
                Some(membership(
                    nats,
                    self.heartbeat,
                    self.name.as_deref(),
                    self.advertise,
                    listen,
                    &certs,
                )?)
            }
        };
        let metrics = NodeMetrics::new()?;
        metrics.known_tenants(host.policy().tenants.keys());
        let scrapes = match self.metrics {
            None => None,
            Some(addr) => Some(bind_metrics(addr)?),
        };
        let limits = host.policy().deploy_limits;
        let deploy = self.deploy.unwrap_or_else(|| deploy_config(&limits));
        let store_config = self.store_config.unwrap_or_else(|| store_config(&limits));
        let deployments =
            match &self.store {
                None => None,
                Some(dir) => Some(Deployments::open(dir, store_config, deploy).map_err(
                    |source| NodeError::Store {
                        path: dir.clone(),
                        source,
                    },
                )?),
            };
        let deployments = match (deployments, source) {
            (Some(deployments), Some(source)) => Some(
                deployments
                    .with_source(Arc::new(source.with_max_bytes(store_config.max_blob_bytes))),
            ),
            (deployments, _) => deployments,
        };
        let name = self
            .name
            .unwrap_or_else(|| format!("tasklet-node {}", env!("CARGO_PKG_VERSION")));
        let shared = Shared::new(
            host,
            deployments,
            self.authorizer,
            name,
            self.limits,
            metrics,
        );
        Ok(Node::new(Arc::new(shared), endpoint, scrapes, membership))
    }
}

/// Checks the certificate folder at `dir` as [`NodeBuilder::build`] does before anything else
/// (its files, that they belong together, that the node's certificate has not expired): for a
/// daemon that refuses a folder the node cannot serve with before it starts its host.
pub fn check_certs(dir: impl AsRef<std::path::Path>) -> Result<(), NodeError> {
    let dir = dir.as_ref();
    tasklet_tls::server_tls(dir)?;
    tasklet_tls::check_node_unexpired(dir)?;
    Ok(())
}

/// Checks that a node could take the store folder at `dir` now, as [`NodeBuilder::build`]
/// does (creating it if need be): for a daemon that refuses a folder another running node holds
/// before it starts its host. The folder is let go again at once; `build` takes it for good.
pub fn check_store(dir: impl AsRef<std::path::Path>) -> Result<(), NodeError> {
    let dir = dir.as_ref();
    crate::deploy::check_unlocked(dir).map_err(|source| NodeError::Store {
        path: dir.to_path_buf(),
        source,
    })
}

/// Checks that the node's addresses can be bound now, as [`NodeBuilder::build`] binds them (the
/// QUIC socket on `listen`, the metrics port on `metrics`), and lets them go again: for a daemon
/// that refuses a port another process holds before it starts its host.
pub fn check_addresses(listen: SocketAddr, metrics: Option<SocketAddr>) -> Result<(), NodeError> {
    drop(
        tasklet_tls::transport::socket(listen).map_err(|source| NodeError::Bind {
            addr: listen,
            source,
        })?,
    );
    if let Some(addr) = metrics {
        drop(
            std::net::TcpListener::bind(addr)
                .map_err(|source| NodeError::MetricsBind { addr, source })?,
        );
    }
    Ok(())
}

/// Who the node is in the cluster, checked before it serves.
fn membership(
    nats: NatsConfig,
    heartbeat: Heartbeat,
    name: Option<&str>,
    advertise: Option<String>,
    listen: SocketAddr,
    certs: &std::path::Path,
) -> Result<Membership, NodeError> {
    heartbeat.validate().map_err(NodeError::Heartbeat)?;
    let name =
        NodeName::new(name.ok_or(NodeError::NoClusterName)?).map_err(NodeError::ClusterName)?;
    let address = check_advertise(listen, advertise.as_deref(), certs)?;
    Ok(Membership {
        nats,
        heartbeat,
        name,
        address,
        cert_sha256: tasklet_tls::node_fingerprint(certs)?,
    })
}

/// The address a node in a cluster gives clients in its record, checked as
/// [`NodeBuilder::build`] checks it: `advertise` if given (`HOST:PORT`, not a wildcard), else
/// `listen` unless that is a wildcard; and the node certificate in `certs` must be valid for its
/// host, or every client the registry sends would refuse the node. For a daemon that refuses
/// such a node before it starts its host.
pub fn check_advertise(
    listen: SocketAddr,
    advertise: Option<&str>,
    certs: impl AsRef<std::path::Path>,
) -> Result<String, NodeError> {
    let address = match advertise {
        Some(addr) => {
            check_advertised(addr).map_err(|why| NodeError::BadAdvertise {
                addr: addr.to_owned(),
                why,
            })?;
            addr.to_owned()
        }
        None if listen.ip().is_unspecified() => return Err(NodeError::NoAdvertise { listen }),
        None => listen.to_string(),
    };
    let host = address
        .rsplit_once(':')
        .map_or(address.as_str(), |(host, _)| host);
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if !tasklet_tls::node_valid_for(&certs, host)? {
        return Err(NodeError::AdvertiseNotCertified {
            addr: address.clone(),
            host: host.to_owned(),
            names: tasklet_tls::node_names(&certs)?,
        });
    }
    Ok(address)
}

/// Why clients could not connect to `addr` as a node's record gives it, if they could not: it
/// must be `HOST:PORT` (`[IPv6]:PORT`), the port 1 to 65535, the host not a wildcard address.
fn check_advertised(addr: &str) -> Result<(), &'static str> {
    let (host, port) = addr.rsplit_once(':').ok_or("it has no port")?;
    match port.parse::<u16>() {
        Ok(0) | Err(_) => return Err("its port is not a number from 1 to 65535"),
        Ok(_) => {}
    }
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if bare.is_empty() {
        return Err("it has no host");
    }
    match bare.parse::<std::net::IpAddr>() {
        Ok(ip) if ip.is_unspecified() => Err("it is a wildcard address, which only binds"),
        Ok(std::net::IpAddr::V6(_)) if !host.starts_with('[') => {
            Err("an IPv6 address needs brackets: [ADDR]:PORT")
        }
        _ => Ok(()),
    }
}

/// Whether every tenant `policy` names could be named by a client certificate (checked before
/// a node starts workers, and by `tasklet check --policy`): a section no certificate can reach
/// is a typo that would leave its tenant refused.
pub fn check_policy_tenants(policy: &Policy) -> Result<(), NodeError> {
    for name in policy.tenants.keys() {
        Tenant::new(name).map_err(|reason| NodeError::InvalidTenant {
            name: name.clone(),
            reason,
        })?;
    }
    Ok(())
}

/// The deployer's limits a policy's `[deploy]` section sets.
fn deploy_config(limits: &DeployLimits) -> DeployConfig {
    let default = DeployConfig::default();
    DeployConfig {
        max_component_bytes: limits
            .max_component_size
            .unwrap_or(default.max_component_bytes),
        warm_tasklets: limits.warm_tasklets.unwrap_or(default.warm_tasklets),
        warm_bytes: limits.warm_size.unwrap_or(default.warm_bytes),
        printed_bytes: default.printed_bytes,
    }
}

/// The store's limits a policy's `[store]` section sets.
fn store_config(limits: &DeployLimits) -> StoreConfig {
    let default = StoreConfig::default();
    StoreConfig {
        max_blob_bytes: limits.max_blob_size.unwrap_or(default.max_blob_bytes),
        compiled_cache_bytes: limits
            .compiled_cache_size
            .unwrap_or(default.compiled_cache_bytes),
    }
}

/// Binds the metrics address: a std listener made non-blocking and handed to Tokio, so that
/// binding needs no `.await` in the synchronous `build`.
fn bind_metrics(addr: SocketAddr) -> Result<tokio::net::TcpListener, NodeError> {
    let bind_error = |source| NodeError::MetricsBind { addr, source };
    let listener = std::net::TcpListener::bind(addr).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    tokio::net::TcpListener::from_std(listener).map_err(bind_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advertised_address_is_one_a_client_can_connect_to() {
        for good in [
            "gpu1.example:5701",
            "127.0.0.1:5701",
            "[::1]:5701",
            "localhost:1",
        ] {
            assert_eq!(check_advertised(good), Ok(()), "{good}");
        }
        for bad in [
            "nohostport",
            "host:99999",
            "host:0",
            "host:x",
            ":5701",
            "0.0.0.0:5701",
            "[::]:5701",
            "::1:5701",
        ] {
            assert!(check_advertised(bad).is_err(), "{bad}");
        }
    }

    /// A port another process holds is named with what to do; the IPv6 hint is kept for the
    /// failures it explains.
    #[test]
    fn a_bind_failure_says_what_to_do() {
        let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let source = std::net::UdpSocket::bind(addr).unwrap_err();
        let text = NodeError::Bind { addr, source }.to_string();
        assert!(
            text.contains(&format!("another process holds port {}", addr.port())),
            "{text}"
        );
        let any6: SocketAddr = "[::]:5701".parse().unwrap();
        let unavailable = std::io::Error::from(std::io::ErrorKind::AddrNotAvailable);
        let text = NodeError::Bind {
            addr: any6,
            source: unavailable,
        }
        .to_string();
        assert!(text.contains("listen on 0.0.0.0 instead"), "{text}");
    }
}
