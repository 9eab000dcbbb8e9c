//! One real `tasklet node` (the built binary, on the emulator) registered in the benchmark's
//! nats-server beside the simulated nodes: the node `deploy run` reaches by `--node` and by
//! placement.

use std::net::{Ipv4Addr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use tasklet_cluster::{Cluster, NatsConfig, NodeName, Registry};
use tokio::runtime::Runtime;

/// The real node's name in the registry.
pub const NAME: &str = "real-node-0";

/// How long the node may take to appear in the registry.
const REGISTER_WAIT: Duration = Duration::from_secs(60);

/// How long a stopping node may take before it is killed.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// The `tasklet` binary: `$TASKLET_BIN`, else target/release/tasklet, else target/debug/tasklet.
pub fn find_tasklet(repo: &Path) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TASKLET_BIN") {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    ["release", "debug"]
        .iter()
        .map(|profile| repo.join("target").join(profile).join("tasklet"))
        .find(|p| p.is_file())
}

/// A `tasklet node --nats` process, stopped (SIGTERM, then SIGKILL) when dropped.
pub struct RealNode {
    child: Child,
    pub addr: String,
    pub binary: PathBuf,
    /// Its folder: certs/ (CA, node, tenant `dev`), store/, node.log.
    dir: tempfile::TempDir,
}

impl RealNode {
    /// Makes certificates with `tasklet certs init` and starts `tasklet node` on the emulator,
    /// registered at `url`.
    pub fn start(binary: &Path, repo: &Path, url: &str) -> Result<RealNode, String> {
        let dir = tempfile::Builder::new()
            .prefix("tasklet-cluster-bench-node")
            .tempdir()
            .map_err(|e| format!("cannot make a temporary folder: {e}"))?;
        let certs = dir.path().join("certs");
        let init = Command::new(binary)
            .args(["certs", "init"])
            .arg(&certs)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
        if !init.status.success() {
            return Err(format!(
                "tasklet certs init: {}",
                String::from_utf8_lossy(&init.stderr).trim()
            ));
        }
        let port = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|s| s.local_addr())
            .map(|a| a.port())
            .map_err(|e| format!("no free loopback UDP port: {e}"))?;
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("node.log"))
            .map_err(|e| format!("the node's log: {e}"))?;
        let log_err = log
            .try_clone()
            .map_err(|e| format!("the node's log: {e}"))?;
        let child = Command::new(binary)
            .args(["node", "--listen", &addr, "--backend", "emu", "--certs"])
            .arg(&certs)
            .args(["--nats", url, "--name", NAME, "--store"])
            .arg(dir.path().join("store"))
            .current_dir(repo)
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| format!("cannot start {} node: {e}", binary.display()))?;
        Ok(RealNode {
            child,
            addr,
            binary: binary.to_owned(),
            dir,
        })
    }

    pub fn certs(&self) -> PathBuf {
        self.dir.path().join("certs")
    }

    /// Waits until the node's record is in the registry; how long that took.
    pub fn wait_registered(&mut self, runtime: &Runtime, url: &str) -> Result<Duration, String> {
        let start = Instant::now();
        let name = NodeName::new(NAME).map_err(|e| e.to_string())?;
        let config = NatsConfig::new(url);
        let cluster = runtime
            .block_on(Cluster::connect(&config))
            .map_err(|e| e.to_string())?;
        loop {
            let found = runtime.block_on(async {
                let registry = Registry::open(&cluster).await.ok()?;
                registry.get(&name).await.ok().flatten()
            });
            if found.is_some() {
                return Ok(start.elapsed());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "tasklet node exited: {status}; {}",
                    self.log_tail()
                ));
            }
            if start.elapsed() > REGISTER_WAIT {
                return Err(format!(
                    "tasklet node was not in the registry within {REGISTER_WAIT:?}; {}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The end of the node's log, for errors.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("node.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "its log ends: {}",
            lines[lines.len().saturating_sub(5)..].join(" | ")
        )
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        // A drain and a clean stop first, so its record leaves the registry.
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: signals the child this value started, still unreaped (try_wait below).
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let start = Instant::now();
        while start.elapsed() < STOP_WAIT {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
