//! What the benchmark runs against: a certificate folder, a node served from this process on a
//! runtime like `tasklet node`'s (its own host and a store for deployed tasklets), and a second
//! host of this process's own for the local path. Both hosts run the same policy, backend and
//! worker program.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tasklet_node::{NodeBuilder, RunningNode};
use tasklet_remote::{NodeClient, RemoteGpu};
use tasklet_runtime::gpu::{GpuService, LocalGpu};
use tasklet_runtime::{BackendKind, Host, HostConfig, Policy, WorkerCommand};
use tasklet_tls::Tenant;
use tokio::runtime::Runtime;

/// How long stopping the node may take before the benchmark gives up waiting.
const STOP_GRACE: Duration = Duration::from_secs(30);

pub struct Rig {
    /// The node's runtime: two worker threads, as `tasklet node` runs.
    pub runtime: Runtime,
    node: Option<RunningNode>,
    pub addr: SocketAddr,
    /// The host of the local path.
    local: Host,
    policy: Policy,
    /// `certs/` (CA, node, tenant `dev`) and `store/`; removed when the rig is dropped.
    dir: tempfile::TempDir,
}

impl Rig {
    pub fn start(
        backend: BackendKind,
        worker: WorkerCommand,
        policy: Policy,
    ) -> Result<Rig, String> {
        let dir = tempfile::Builder::new()
            .prefix("tasklet-fabric-bench")
            .tempdir()
            .map_err(|e| format!("cannot make a temporary folder: {e}"))?;
        let certs = dir.path().join("certs");
        tasklet_tls::init(&certs, &[]).map_err(|e| format!("certificates: {e}"))?;
        let host = |what: &str| {
            Host::new(HostConfig {
                policy: policy.clone(),
                worker: worker.clone(),
                backend,
            })
            .map_err(|e| {
                format!(
                    "the {what} host does not start on {}: {e}",
                    backend.as_str()
                )
            })
        };
        let local = host("local")?;
        let node_host = host("node's")?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tasklet-node")
            .enable_all()
            .build()
            .map_err(|e| format!("the node's runtime: {e}"))?;
        let store = dir.path().join("store");
        let node = runtime.block_on(async {
            NodeBuilder::new()
                .listen(([127, 0, 0, 1], 0).into())
                .certs(&certs)
                .host(node_host)
                .store(store)
                .name("fabric bench")
                .build()
                .map(|node| node.start())
                .map_err(|e| format!("the node does not start: {e}"))
        })?;
        Ok(Rig {
            addr: node.local_addr(),
            node: Some(node),
            runtime,
            local,
            policy,
            dir,
        })
    }

    pub fn certs(&self) -> PathBuf {
        self.dir.path().join("certs")
    }

    /// The local path: a `LocalGpu` over this process's host, with the grant the node gives
    /// every tenant (the policy's ceiling).
    pub fn local_gpu(&self) -> Box<dyn GpuService> {
        Box::new(LocalGpu::new(
            self.policy.ceiling(),
            Arc::clone(self.local.leases()),
        ))
    }

    /// A new connection to the node, as tenant `dev`.
    pub fn client(&self) -> Result<NodeClient, String> {
        let tenant = Tenant::new(tasklet_tls::DEFAULT_TENANT).map_err(|e| e.to_string())?;
        NodeClient::connect(&self.addr.to_string(), self.certs(), &tenant)
            .map_err(|e| format!("connecting to the node: {e}"))
    }

    /// The remote path: a `RemoteGpu` on a connection of its own.
    pub fn remote_gpu(&self) -> Result<Box<dyn GpuService>, String> {
        Ok(Box::new(RemoteGpu::new(self.client()?)))
    }

    /// The node's own time for requests of each of `ops` (opcodes' names, e.g. `SYNC`) so far,
    /// from its `gpu_op_seconds` histogram: the seconds its connections' GPU threads spent on
    /// them, and how many there were.
    pub fn node_op_times<const N: usize>(&self, ops: [&str; N]) -> [(f64, u64); N] {
        let Some(node) = &self.node else {
            return [(0.0, 0); N];
        };
        // One rendering for all of them: it is the node's whole metrics text.
        let text = node.control().metrics_text();
        ops.map(|op| {
            let label = format!("{{op=\"{op}\"}}");
            let value = |series: &str| {
                text.lines()
                    .find_map(|line| line.strip_prefix(series)?.strip_prefix(label.as_str()))
                    .and_then(|rest| rest.trim().parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            (
                value("gpu_op_seconds_sum"),
                value("gpu_op_seconds_count") as u64,
            )
        })
    }

    /// Stops the node (every connection closed, every lease ended, every worker stopped).
    pub fn stop(mut self) -> Result<(), String> {
        let Some(node) = self.node.take() else {
            return Ok(());
        };
        node.stop();
        self.runtime
            .block_on(async { tokio::time::timeout(STOP_GRACE, node.wait()).await })
            .map_err(|_| format!("the node did not stop within {STOP_GRACE:?}"))?
            .map_err(|e| format!("the node stopped with an error: {e}"))
    }
}
