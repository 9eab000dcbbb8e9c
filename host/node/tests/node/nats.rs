//! A real nats-server on a free loopback port for the cluster tests, its JetStream store in a
//! temp folder; found as `tasklet_cluster`'s tests find it (`$TASKLET_NATS_SERVER`, what
//! scripts/install-nats.sh installed under `$TASKLET_NATS_DIR` or target/nats, or PATH).

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
    pub fn find_binary() -> Option<PathBuf> {
        if let Some(path) = std::env::var_os("TASKLET_NATS_SERVER") {
            return Some(PathBuf::from(path)).filter(|p| runs(p));
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let dir = std::env::var_os("TASKLET_NATS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/nats"));
        let mut installed: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path().join("bin/nats-server"))
            .filter(|p| runs(p))
            .collect();
        installed.sort();
        installed
            .pop()
            .or_else(|| Some(PathBuf::from("nats-server")).filter(|p| runs(p)))
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
        let log = self.dir.path().join("nats.log");
        let mut child = Command::new(&self.binary)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.dir.path().join("store"))
            .arg("-l")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        let deadline = Instant::now() + START_TIMEOUT;
        while TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "nats-server exited ({status}) at start:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "nats-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
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

fn runs(binary: &Path) -> bool {
    Command::new(binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}
