//! What the multi-node cluster tests share: a nats-server they can kill and start again, `tasklet
//! node` processes with emulated memory of their own, and polling the registry.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{free_tcp_port, free_udp_port, repo, tasklet, text};
use tasklet_cluster::{start_nats_server, LocalServer};

/// How long a process may take to start listening.
pub const START: Duration = Duration::from_secs(20);

/// A nats-server on a loopback port, its JetStream store in `dir`.
pub struct Nats {
    binary: PathBuf,
    pub port: u16,
    dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    /// Starts so far: each start after the first gets an empty store.
    starts: u32,
}

impl Nats {
    /// Started with `args` besides the address, port, JetStream and its store.
    pub fn start(binary: PathBuf, dir: &Path, args: &[&str]) -> Nats {
        let mut nats = Nats {
            binary,
            port: free_tcp_port(),
            dir: dir.to_path_buf(),
            args: args.iter().map(|a| a.to_string()).collect(),
            child: None,
            starts: 0,
        };
        nats.launch();
        nats
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Killed (SIGKILL) and started again on the same port with an empty store: the nodes must
    /// find it, and make their buckets again, by themselves.
    pub fn restart_empty(&mut self) {
        self.kill();
        self.launch();
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn launch(&mut self) {
        self.starts += 1;
        let server = LocalServer {
            port: self.port,
            jetstream_store: Some(self.dir.join(format!("js-{}", self.starts))),
            log: Some(self.dir.join(format!("nats-{}.log", self.starts))),
            args: self.args.clone(),
            start_timeout: START,
        };
        self.child = Some(start_nats_server(&self.binary, &server).expect("nats-server starts"));
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `tasklet node` process of the emulator with `memory` of device memory, in the cluster.
pub struct Node {
    pub name: String,
    pub addr: String,
    memory: String,
    dir: PathBuf,
    certs: PathBuf,
    nats: Vec<String>,
    child: Option<Child>,
    starts: u32,
}

impl Node {
    /// Started with `nats` as its NATS arguments (`--nats URL` and any TLS or credentials).
    pub fn start(name: &str, memory: &str, dir: &Path, certs: &Path, nats: &[&str]) -> Node {
        let mut node = Node {
            name: name.to_owned(),
            addr: format!("127.0.0.1:{}", free_udp_port()),
            memory: memory.to_owned(),
            dir: dir.to_path_buf(),
            certs: certs.to_path_buf(),
            nats: nats.iter().map(|a| a.to_string()).collect(),
            child: None,
            starts: 0,
        };
        node.launch();
        node
    }

    /// SIGKILL: no goodbye to NATS or to its clients, as when the machine dies.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Started again at the same address, with the same store.
    pub fn launch(&mut self) {
        self.starts += 1;
        let policy = self.dir.join(format!("{}.toml", self.name));
        std::fs::write(
            &policy,
            format!("[workers]\nemu-memory = \"{}\"\n", self.memory),
        )
        .unwrap();
        let log =
            std::fs::File::create(self.dir.join(format!("{}-{}.log", self.name, self.starts)))
                .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_tasklet"))
            .args(["node", "--listen", &self.addr, "--backend", "emu"])
            .arg("--certs")
            .arg(&self.certs)
            .args(&self.nats)
            .args(["--name", &self.name, "--policy"])
            .arg(&policy)
            .arg("--store")
            .arg(self.dir.join(format!("{}-store", self.name)))
            .current_dir(repo())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("the node starts");
        self.child = Some(child);
    }

    /// What the node logged in its latest life.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("{}-{}.log", self.name, self.starts)))
            .unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `tasklet nodes --json` with `nats` (the URL and any TLS arguments): the records.
pub fn listed(nats: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["nodes"];
    args.extend_from_slice(nats);
    args.push("--json");
    let out = tasklet(&args, b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .unwrap()
        .as_array()
        .cloned()
        .unwrap()
}

/// The names `tasklet nodes` lists, sorted.
pub fn names(nats: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = listed(nats)
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// Polls `tasklet nodes` every 200 ms until `check` holds of the names listed, for at most
/// `limit`; how long it took.
pub fn until_listed(
    nats: &[&str],
    limit: Duration,
    what: &str,
    check: impl Fn(&[String]) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let names = names(nats);
        if check(&names) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "not within {limit:?}: {what}; listed: {names:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `names` equal to `expected` (sorted).
pub fn exactly<'a>(expected: &'a [&'a str]) -> impl Fn(&[String]) -> bool + 'a {
    move |names: &[String]| {
        let mut expected: Vec<&str> = expected.to_vec();
        expected.sort_unstable();
        names.iter().map(String::as_str).eq(expected)
    }
}
