//! A nats-server on this machine, for tests, benchmarks and trying the cluster out: where the
//! binary is, and starting one on a loopback port.
//!
//! Nothing a node or a client does needs this: they connect to whatever NATS the operator runs.

use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The nats-server to use, looked for in this order:
///
/// 1. `$TASKLET_NATS_SERVER`, when set (and nothing else then: a wrong setting is not papered
///    over by another binary);
/// 2. what `scripts/install-nats.sh` installed: `<dir>/*/bin/nats-server`, where `<dir>` is
///    `$TASKLET_NATS_DIR` or `repo`'s `target/nats` (the newest version directory first);
/// 3. `nats-server` on `PATH`.
///
/// A candidate counts only if `nats-server --version` runs and succeeds. `None` when none
/// does: callers that need one say `skipped: nats-server not found` and do not run.
pub fn find_nats_server(repo: &Path) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TASKLET_NATS_SERVER") {
        return Some(PathBuf::from(path)).filter(|p| runs(p));
    }
    let dir = std::env::var_os("TASKLET_NATS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target/nats"));
    let mut installed: Vec<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin/nats-server"))
        .collect();
    // Version directories (`v2.12.8`) sort oldest first; try the newest first.
    installed.sort();
    installed
        .into_iter()
        .rev()
        .find(|p| runs(p))
        .or_else(|| Some(PathBuf::from("nats-server")).filter(|p| runs(p)))
}

/// What [`start_nats_server`] starts.
#[derive(Debug, Clone)]
pub struct LocalServer {
    /// The loopback TCP port clients connect to.
    pub port: u16,
    /// JetStream's store directory; `None` starts the server without JetStream.
    pub jetstream_store: Option<PathBuf>,
    /// Where the server logs (`-l`); nowhere when `None`.
    pub log: Option<PathBuf>,
    /// More arguments (authentication, TLS, monitoring).
    pub args: Vec<String>,
    /// How long the server may take to accept connections.
    pub start_timeout: Duration,
}

impl LocalServer {
    /// A server with JetStream storing in `store`, on `port`.
    pub fn new(port: u16, store: impl Into<PathBuf>) -> LocalServer {
        LocalServer {
            port,
            jetstream_store: Some(store.into()),
            log: None,
            args: Vec::new(),
            start_timeout: Duration::from_secs(15),
        }
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

/// Starts `binary` as `server` says, on 127.0.0.1, and waits (polling every 20 ms, at most
/// `server.start_timeout`) until it accepts TCP connections. The caller owns the process: kill
/// it when done. An error says why it did not come up, with the end of its log when it exited.
pub fn start_nats_server(binary: &Path, server: &LocalServer) -> Result<Child, String> {
    let mut command = Command::new(binary);
    command
        .args(["-a", "127.0.0.1", "-p", &server.port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(store) = &server.jetstream_store {
        command.arg("-js").arg("-sd").arg(store);
    }
    if let Some(log) = &server.log {
        command.arg("-l").arg(log);
    }
    command.args(&server.args);
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let deadline = Instant::now() + server.start_timeout;
    loop {
        if TcpStream::connect((Ipv4Addr::LOCALHOST, server.port)).is_ok() {
            return Ok(child);
        }
        if let Ok(Some(status)) = child.try_wait() {
            let log = server
                .log
                .as_ref()
                .and_then(|log| std::fs::read_to_string(log).ok())
                .unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(format!(
                "nats-server exited at start ({status}){}{}",
                if tail.is_empty() { "" } else { ":\n" },
                tail.join("\n")
            ));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "nats-server did not accept connections on port {} within {:?}",
                server.port, server.start_timeout
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `binary --version` runs and succeeds.
fn runs(binary: &Path) -> bool {
    Command::new(binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
