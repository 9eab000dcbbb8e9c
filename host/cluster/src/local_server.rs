//! A nats-server on this machine, for tests, benchmarks and trying the cluster out: where the
//! binary is, and starting one on a loopback port.
//!
//! Nothing a node or a client does needs this: they connect to whatever NATS the operator runs.

use std::io::{BufRead, BufReader, Read};
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

    /// The name the server is started with and announces in its INFO line: how
    /// [`start_nats_server`] tells it from anything else that answers on its port.
    pub fn server_name(&self) -> String {
        format!("tasklet-local-{}", self.port)
    }

    /// The last lines of the server's log (empty without one): for a test to show when the
    /// server did not do what it expected.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self
            .log
            .as_ref()
            .and_then(|log| std::fs::read_to_string(log).ok())
            .unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(lines).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

/// Starts `binary` as `server` says, on 127.0.0.1, and waits (polling every 20 ms, at most
/// `server.start_timeout`) until it answers on its port with its own INFO line (its
/// [`LocalServer::server_name`]): a connection alone could be taken by something else holding
/// the port a moment, while this server failed to bind it. The caller owns the process: kill it
/// when done. An error says why it did not come up, with the end of its log when it exited.
pub fn start_nats_server(binary: &Path, server: &LocalServer) -> Result<Child, String> {
    let name = server.server_name();
    let mut command = Command::new(binary);
    command
        .args(["-a", "127.0.0.1", "-p", &server.port.to_string()])
        .args(["--server_name", &name])
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
    let mut answered = None;
    loop {
        if let Some(info) = info_line(server.port) {
            if info.contains(&format!("\"server_name\":\"{name}\"")) {
                return Ok(child);
            }
            answered = Some(info);
        }
        if let Ok(Some(status)) = child.try_wait() {
            let tail = server.log_tail(20);
            return Err(format!(
                "nats-server exited at start ({status}){}{}",
                if tail.is_empty() { "" } else { ":\n" },
                tail
            ));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(match answered {
                Some(info) => format!(
                    "something other than the nats-server started answered on port {} \
                     within {:?}: {info:.200}",
                    server.port, server.start_timeout
                ),
                None => format!(
                    "nats-server did not accept connections on port {} within {:?}",
                    server.port, server.start_timeout
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The first line what listens on 127.0.0.1:`port` sends (a NATS server's `INFO {…}`), read
/// for at most a second; `None` when nothing accepts there or it sends no line.
fn info_line(port: u16) -> Option<String> {
    let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    let mut line = String::new();
    // An INFO line is a few hundred bytes; bounded, whatever answers.
    BufReader::new(stream.take(1 << 16))
        .read_line(&mut line)
        .ok()?;
    Some(line)
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
