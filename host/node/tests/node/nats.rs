//! A real nats-server on a free loopback port for the cluster tests, its JetStream store in a
//! temp folder; found and started by `tasklet_cluster::find_nats_server` and
//! `start_nats_server` (`$TASKLET_NATS_SERVER`, what scripts/install-nats.sh installed under
//! `$TASKLET_NATS_DIR` or target/nats, or PATH).

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;
use tasklet_cluster::{start_nats_server, LocalServer};

/// How long a server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// Starts a nats-server for the test, or prints why the test is skipped and returns `Ok`.
macro_rules! nats_or_skip {
    () => {
        match $crate::nats::NatsServer::find_binary() {
            Some(binary) => $crate::nats::NatsServer::start(binary),
            None => {
                println!("skipped: nats-server not found (run scripts/install-nats.sh)");
                return Ok(());
            }
        }
    };
}
pub(crate) use nats_or_skip;

pub struct NatsServer {
    binary: PathBuf,
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl NatsServer {
    /// See `tasklet_cluster::find_nats_server`.
    pub fn find_binary() -> Option<PathBuf> {
        tasklet_cluster::find_nats_server(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
    }

    pub fn start(binary: PathBuf) -> NatsServer {
        let mut server = NatsServer {
            binary,
            port: free_port(),
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
        };
        server.launch();
        server
    }

    /// A server on the port of none yet: `launch` starts it there.
    pub fn not_started(binary: PathBuf) -> NatsServer {
        NatsServer {
            binary,
            port: free_port(),
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn launch(&mut self) {
        let mut server = LocalServer::new(self.port, self.dir.path().join("store"));
        server.log = Some(self.dir.path().join("nats.log"));
        server.start_timeout = START_TIMEOUT;
        let child = start_nats_server(&self.binary, &server).expect("start nats-server");
        self.child = Some(child);
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}
