//! A real nats-server on a free loopback port, with its JetStream store in a temp folder; and
//! bounded waits.

use std::future::Future;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use tasklet_cluster::{
    start_nats_server, Cluster, ComputeCapability, DeviceRecord, Heartbeat, Load, LocalServer,
    NatsConfig, NodeName, NodeRecord, BACKEND_EMU, RECORD_FORMAT,
};

/// Starts a nats-server for the test, or prints why the test is skipped and returns from it.
macro_rules! nats_or_skip {
    () => {
        nats_or_skip!(jetstream: true, args: [])
    };
    (jetstream: $js:expr) => {
        nats_or_skip!(jetstream: $js, args: [])
    };
    (jetstream: $js:expr, args: [$($arg:expr),*]) => {
        match $crate::support::NatsServer::find_binary() {
            Some(binary) => $crate::support::NatsServer::start(binary, $js, &[$($arg),*]),
            None => {
                println!("skipped: nats-server not found (run scripts/install-nats.sh)");
                return;
            }
        }
    };
}
pub(crate) use nats_or_skip;

/// How long a server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(15);

pub struct NatsServer {
    binary: PathBuf,
    jetstream: bool,
    /// More command-line arguments (authentication, for one).
    args: Vec<String>,
    port: u16,
    /// Holds the JetStream store and the server's log.
    dir: tempfile::TempDir,
    store: PathBuf,
    child: Option<Child>,
}

impl NatsServer {
    /// See [`tasklet_cluster::find_nats_server`].
    pub fn find_binary() -> Option<PathBuf> {
        tasklet_cluster::find_nats_server(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
    }

    pub fn start(binary: PathBuf, jetstream: bool, args: &[&str]) -> NatsServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = dir.path().join("store");
        let mut server = NatsServer {
            binary,
            jetstream,
            args: args.iter().map(|a| a.to_string()).collect(),
            port: free_port(),
            dir,
            store,
            child: None,
        };
        server.launch();
        server
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn version(&self) -> String {
        let out = Command::new(&self.binary).arg("--version").output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }

    /// SIGKILL: no goodbye to clients, as when the machine dies.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same port and the same store.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// Starts again on the same port with an empty store, as a server that lost its disk.
    pub fn restart_empty(&mut self) {
        self.kill();
        std::fs::remove_dir_all(&self.store).expect("remove the store");
        self.launch();
    }

    fn launch(&mut self) {
        let server = LocalServer {
            port: self.port,
            jetstream_store: self.jetstream.then(|| self.store.clone()),
            log: Some(self.dir.path().join("nats.log")),
            args: self.args.clone(),
            start_timeout: START_TIMEOUT,
        };
        let child = start_nats_server(&self.binary, &server).expect("start nats-server");
        self.child = Some(child);
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

pub async fn connect(server: &NatsServer) -> Cluster {
    Cluster::connect(&NatsConfig::new(server.url()))
        .await
        .expect("connect to the test's nats-server")
}

/// Heartbeats fast enough for tests that are not about the default timings, with room for a
/// registrar's task to be late by a second or so on a loaded machine before its record expires.
pub fn fast() -> Heartbeat {
    Heartbeat {
        interval: Duration::from_millis(300),
        ttl: Duration::from_secs(2),
        stale_after: Duration::from_secs(5),
    }
}

/// A slow heartbeat: what shows up within a second came from a write the test asked for (a
/// drain, a refresh, a start), not from a beat.
pub fn slow() -> Heartbeat {
    Heartbeat {
        interval: Duration::from_secs(5),
        ttl: Duration::from_secs(15),
        stale_after: Duration::from_secs(20),
    }
}

/// An emulator node's record with `free_gib` free of 16 GiB.
pub fn record(name: &str, free_gib: u64) -> NodeRecord {
    NodeRecord {
        format: RECORD_FORMAT,
        name: NodeName::new(name).expect("node name"),
        address: "127.0.0.1:5701".into(),
        cert_sha256: "0".repeat(64),
        version: env!("CARGO_PKG_VERSION").into(),
        devices: vec![DeviceRecord {
            index: 0,
            name: "emulator".into(),
            backend: BACKEND_EMU.into(),
            uuid: String::new(),
            total_vram: 16 << 30,
            free_vram: free_gib << 30,
            compute_capability: ComputeCapability::new(9, 0),
            leases: 0,
        }],
        load: Load::default(),
        draining: false,
        heartbeat_unix_ms: 0,
    }
}

/// Polls `check` every 50 ms until it gives `Some`, for at most `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
