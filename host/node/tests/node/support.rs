//! What the tests share: a certificate folder, a node on 127.0.0.1 serving the suite's backend
//! (the emulator, or the GPU with `TASKLET_TEST_BACKEND=cuda`) with this binary as its worker,
//! clients of it, and a raw QUIC client that sends any bytes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tasklet_node::{NodeBuilder, RunningNode};
use tasklet_remote::{ConnectOptions, NodeClient};
use tasklet_runtime::{Accounting, BackendKind, Host, HostConfig, Policy, WorkerCommand};
use tasklet_tls::{Tenant, Validity};
use tasklet_wire::{
    encode_request, Decoder, DecoderConfig, ErrorCode, Event, Reply, Request, RequestId,
};

/// Bound on every wait for something the node does by itself (free a lease, close a connection).
pub const WAIT: Duration = Duration::from_secs(15);

pub type TestResult = Result<(), libtest_mimic::Failed>;

/// This binary as a GPU worker: `main` serves as one on `worker`.
pub fn worker() -> WorkerCommand {
    WorkerCommand {
        program: std::env::current_exe().expect("the test binary's path"),
        args: vec!["worker".into()],
    }
}

pub fn tenant(name: &str) -> Tenant {
    Tenant::new(name).expect("a valid tenant name")
}

/// A certificate folder with tenants `dev` (from init) and `team`.
pub fn certs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    tasklet_tls::init(dir.path(), &[]).expect("certs init");
    tasklet_tls::issue(dir.path(), &tenant("team"), Validity::days(1).unwrap()).expect("issue");
    dir
}

/// The suite's policy, as tests/ runs hosts with: a small pool, short deadlines.
pub fn policy() -> Policy {
    tasklet_tests::test_policy()
}

/// The backend a host with `policy` serves: the emulator when the policy lists emulated devices
/// (placement over devices of known sizes), else the suite's (`TASKLET_TEST_BACKEND`), so that
/// the GPU suite runs these tests with the node lending the machine's GPUs.
pub fn backend_for(policy: &Policy) -> BackendKind {
    if policy.devices.emu.is_some() {
        BackendKind::Emu
    } else {
        tasklet_tests::backend()
    }
}

/// A host on this machine, as `tasklet run` without `--node` has.
pub fn local_host() -> Host {
    let policy = policy();
    Host::new(HostConfig {
        backend: backend_for(&policy),
        policy,
        worker: worker(),
    })
    .expect("the local host starts")
}

/// A node serving on 127.0.0.1 from a runtime of its own; stopped when dropped.
pub struct TestNode {
    pub certs: tempfile::TempDir,
    pub addr: SocketAddr,
    /// Where `/metrics` is served, for a node set up with it.
    pub metrics_addr: Option<SocketAddr>,
    /// The deployments' store, for a node set up with one.
    pub _store: Option<tempfile::TempDir>,
    node: Option<RunningNode>,
    runtime: tokio::runtime::Runtime,
}

/// What a test may change about its node.
pub struct Setup {
    pub policy: Policy,
    pub idle_timeout: Duration,
    pub stall_timeout: Duration,
    pub authorizer: Option<Box<dyn FnOnce(NodeBuilder) -> NodeBuilder>>,
    /// Serve deployments from a store in a temporary folder.
    pub store: bool,
    /// Serve `/metrics` on a free port of 127.0.0.1.
    pub metrics: bool,
    /// Join the cluster at this NATS URL under this name.
    pub cluster: Option<(String, String)>,
    /// The cluster heartbeat, when not the default.
    pub heartbeat: Option<tasklet_cluster::Heartbeat>,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            policy: policy(),
            idle_timeout: Duration::from_secs(3),
            stall_timeout: Duration::from_secs(2),
            authorizer: None,
            store: false,
            metrics: false,
            cluster: None,
            heartbeat: None,
        }
    }
}

impl TestNode {
    pub fn start() -> TestNode {
        TestNode::with(Setup::default())
    }

    pub fn with(setup: Setup) -> TestNode {
        let certs = certs();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let dir = certs.path().to_path_buf();
        let store = setup.store.then(|| tempfile::tempdir().expect("temp dir"));
        let store_dir = store.as_ref().map(|d| d.path().to_path_buf());
        let backend = backend_for(&setup.policy);
        let node = runtime.block_on(async move {
            let mut builder = NodeBuilder::new()
                .listen("127.0.0.1:0".parse().unwrap())
                .certs(dir)
                .policy(setup.policy)
                .backend(backend)
                .worker(worker())
                .idle_timeout(setup.idle_timeout)
                .stall_timeout(setup.stall_timeout);
            if let Some(dir) = store_dir {
                builder = builder.store(dir);
            }
            if setup.metrics {
                builder = builder.metrics("127.0.0.1:0".parse().unwrap());
            }
            if let Some((url, name)) = setup.cluster {
                builder = builder.nats(tasklet_node::NatsConfig::new(url)).name(name);
            }
            if let Some(heartbeat) = setup.heartbeat {
                builder = builder.heartbeat(heartbeat);
            }
            if let Some(add) = setup.authorizer {
                builder = add(builder);
            }
            builder.build().expect("the node starts").start()
        });
        TestNode {
            certs,
            addr: node.local_addr(),
            metrics_addr: node.metrics_addr(),
            _store: store,
            node: Some(node),
            runtime,
        }
    }

    pub fn node(&self) -> &RunningNode {
        self.node.as_ref().expect("running")
    }

    pub fn addr_text(&self) -> String {
        self.addr.to_string()
    }

    /// The node's store folder (a node started with `store: true`).
    pub fn store_path(&self) -> &Path {
        self._store.as_ref().expect("a node with a store").path()
    }

    pub fn certs_path(&self) -> &Path {
        self.certs.path()
    }

    pub fn options(&self, tenant_name: &str) -> ConnectOptions {
        let mut options =
            ConnectOptions::new(self.addr_text(), self.certs_path(), tenant(tenant_name));
        options.idle_timeout = Duration::from_secs(3);
        options.connect_timeout = Duration::from_secs(5);
        options
    }

    pub fn client(&self, tenant_name: &str) -> NodeClient {
        NodeClient::connect_with(&self.options(tenant_name)).expect("the client connects")
    }

    pub fn accounting(&self) -> Accounting {
        self.node().accounting()
    }

    /// Waits (bounded) until the node holds no lease; the accounting then, and how long it took.
    /// How many devices the node lends (the emulator's one, or every GPU of the machine).
    pub fn devices(&self) -> usize {
        self.node().control().status().devices.len()
    }

    pub fn wait_for_baseline(&self, within: Duration) -> Result<Duration, String> {
        let start = Instant::now();
        while start.elapsed() < within {
            if self.accounting() == Accounting::default() {
                return Ok(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "accounting not back at baseline after {within:?}: {:?}",
            self.accounting()
        ))
    }

    /// Drains the node and waits for it to stop.
    pub fn drain_and_wait(mut self, within: Duration) -> Result<(), String> {
        let node = self.node.take().expect("running");
        node.drain();
        let waited = self
            .runtime
            .block_on(async { tokio::time::timeout(within, node.wait()).await });
        match waited {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => Err(err.to_string()),
            Err(_) => Err(format!(
                "the node did not stop within {within:?} of its drain"
            )),
        }
    }

    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            node.stop();
            let _ = self
                .runtime
                .block_on(async { tokio::time::timeout(WAIT, node.wait()).await });
        }
    }
}

/// A client that speaks frames as the test writes them, over its own QUIC connection.
pub struct RawClient {
    runtime: Arc<tokio::runtime::Runtime>,
    _endpoint: quinn::Endpoint,
    pub connection: quinn::Connection,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    decoder: Decoder,
    pending: Vec<u8>,
}

impl RawClient {
    pub fn connect(node: &TestNode, tenant_name: &str) -> RawClient {
        let runtime = Arc::new(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap(),
        );
        let config = tasklet_tls::client_config(node.certs_path(), &tenant(tenant_name)).unwrap();
        let addr = node.addr;
        let (endpoint, connection, send, recv) = runtime.block_on(async move {
            let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
            endpoint.set_default_client_config(config);
            let connection = endpoint.connect(addr, "localhost").unwrap().await.unwrap();
            let (send, recv) = connection.open_bi().await.unwrap();
            (endpoint, connection, send, recv)
        });
        RawClient {
            runtime,
            _endpoint: endpoint,
            connection,
            send,
            recv,
            decoder: Decoder::for_client(DecoderConfig::default()),
            pending: Vec::new(),
        }
    }

    /// Goes on on a new stream of the same connection (anything pending on the old one is
    /// dropped).
    pub fn new_stream(&mut self) -> Result<(), String> {
        let connection = self.connection.clone();
        let (send, recv) = self
            .runtime
            .block_on(async move { connection.open_bi().await })
            .map_err(|e| e.to_string())?;
        self.send = send;
        self.recv = recv;
        self.pending.clear();
        self.decoder = Decoder::for_client(DecoderConfig::default());
        Ok(())
    }

    /// Opens another stream of the connection and writes `bytes` on it, leaving it open for as
    /// long as the caller keeps what this returns (a stream dropped is finished).
    pub fn open_stream_with(
        &self,
        bytes: &[u8],
    ) -> Result<(quinn::SendStream, quinn::RecvStream), String> {
        let connection = self.connection.clone();
        self.runtime.block_on(async move {
            let (mut send, recv) = connection.open_bi().await.map_err(|e| e.to_string())?;
            send.write_all(bytes).await.map_err(|e| e.to_string())?;
            Ok((send, recv))
        })
    }

    /// A lease of `bytes` for 60 s (LEASE_ALLOC as request `id`).
    pub fn lease(&mut self, id: RequestId, bytes: u64) -> Result<tasklet_wire::LeaseId, String> {
        let alloc = Request::LeaseAlloc {
            min_bytes: bytes,
            seconds: 60,
            device: None,
            requires: Default::default(),
        };
        match self.request(id, &alloc)? {
            (Reply::LeaseAlloc { lease, .. }, _) => Ok(lease),
            other => Err(format!("lease: {other:?}")),
        }
    }

    /// Writes `bytes` on a stream [`RawClient::open_stream_with`] opened.
    pub fn write_on(&self, send: &mut quinn::SendStream, bytes: &[u8]) -> Result<(), String> {
        self.runtime
            .block_on(send.write_all(bytes))
            .map_err(|e| e.to_string())
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        let send = &mut self.send;
        // A write may fail once the node has closed the connection; the tests look at that.
        let _ = self.runtime.block_on(send.write_all(bytes));
    }

    pub fn finish(&mut self) {
        let _ = self.send.finish();
    }

    /// Abandons the stream (RESET_STREAM): what was written and not yet sent is dropped.
    pub fn reset(&mut self) {
        let _ = self.send.reset(quinn::VarInt::from_u32(7));
    }

    pub fn request(
        &mut self,
        id: RequestId,
        request: &Request,
    ) -> Result<(Reply, Vec<u8>), String> {
        let mut out = Vec::new();
        encode_request(id, request, &mut out).map_err(|e| e.to_string())?;
        self.send_bytes(&out);
        self.next_reply()
    }

    /// The next reply and its data, or what ended the stream (a GOAWAY, a closed connection).
    pub fn next_reply(&mut self) -> Result<(Reply, Vec<u8>), String> {
        let mut reply = None;
        let mut data = Vec::new();
        let deadline = Instant::now() + WAIT;
        loop {
            while !self.pending.is_empty() {
                let (used, event) = self
                    .decoder
                    .decode(&self.pending)
                    .map_err(|e| e.to_string())?;
                let mut done = false;
                match event {
                    Some(Event::Reply { reply: r, .. }) => {
                        done = r.streamed().is_none_or(|(_, n)| n == 0);
                        reply = Some(r);
                    }
                    Some(Event::Data {
                        bytes, remaining, ..
                    }) => {
                        data.extend_from_slice(bytes);
                        done = remaining == 0;
                    }
                    Some(Event::GoAway(error)) => {
                        self.pending.drain(..used);
                        return Err(format!("GOAWAY {error}"));
                    }
                    _ => {}
                }
                self.pending.drain(..used);
                if done {
                    return Ok((reply.take().expect("a reply"), data));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let recv = &mut self.recv;
            let chunk = self.runtime.block_on(async {
                tokio::time::timeout(left, recv.read_chunk(1 << 20, true)).await
            });
            match chunk {
                Err(_) => return Err("no reply in time".into()),
                Ok(Ok(Some(chunk))) => self.pending.extend_from_slice(&chunk.bytes),
                Ok(Ok(None)) => return Err("the stream ended".into()),
                Ok(Err(err)) => return Err(format!("read failed: {err}")),
            }
        }
    }

    /// The one reply on a stream [`RawClient::open_stream_with`] opened, and its data, read
    /// once the node has ended the stream (the caller finished its side).
    pub fn reply_on(&self, recv: &mut quinn::RecvStream) -> Result<(Reply, Vec<u8>), String> {
        let bytes = self
            .runtime
            .block_on(async { tokio::time::timeout(WAIT, recv.read_to_end(1 << 30)).await })
            .map_err(|_| "the stream did not end in time".to_string())?
            .map_err(|e| e.to_string())?;
        let mut decoder = Decoder::for_client(DecoderConfig::default());
        let (mut reply, mut data, mut at) = (None, Vec::new(), 0);
        while at < bytes.len() {
            let (used, event) = decoder.decode(&bytes[at..]).map_err(|e| e.to_string())?;
            at += used;
            match event {
                Some(Event::Reply { reply: r, .. }) => reply = Some(r),
                Some(Event::Data { bytes, .. }) => data.extend_from_slice(bytes),
                Some(other) => return Err(format!("not a reply: {other:?}")),
                None => {}
            }
        }
        Ok((reply.ok_or("no reply on the stream")?, data))
    }

    /// Waits (bounded) for the connection to be closed; its close code and reason.
    pub fn closed(&self) -> Result<(u64, String), String> {
        self.ended()?
            .ok_or_else(|| "closed otherwise: reset by peer".to_string())
    }

    /// Waits (bounded) for the connection to end: its close code and reason, or `None` for a
    /// stateless reset, which a node sends only for a connection it has closed and forgotten.
    fn ended(&self) -> Result<Option<(u64, String)>, String> {
        let connection = self.connection.clone();
        let closed = self
            .runtime
            .block_on(async move { tokio::time::timeout(WAIT, connection.closed()).await });
        match closed {
            Err(_) => Err("the connection is still open".into()),
            Ok(quinn::ConnectionError::ApplicationClosed(close)) => Ok(Some((
                close.error_code.into_inner(),
                String::from_utf8_lossy(&close.reason).into_owned(),
            ))),
            Ok(quinn::ConnectionError::Reset) => Ok(None),
            Ok(other) => Err(format!("closed otherwise: {other}")),
        }
    }

    /// After a frame `what` that breaks the protocol: the node says so, a GOAWAY
    /// PROTOCOL_ERROR naming `named` (unless the close overtook it), and closes the connection
    /// with PROTOCOL_ERROR.
    ///
    /// A stateless reset in place of the close passes too: the node sends one only for a
    /// connection it closed and has forgotten, when its close did not reach this client first
    /// (seen once, on a 2-core machine under a load of 7).
    pub fn closed_for_breaking_the_protocol(&mut self, what: &str, named: &str) -> TestResult {
        match self.next_reply() {
            Err(e) if e.starts_with("GOAWAY PROTOCOL_ERROR") => {
                check(e.contains(named), || format!("{what}: {e}"))?;
            }
            // The GOAWAY may be lost to the close itself; the close code says the same.
            _ => {}
        }
        match self.ended().map_err(|e| format!("{what}: {e}"))? {
            Some((code, reason)) => check(code == ErrorCode::ProtocolError as u64, || {
                format!("{what}: closed with {code}: {reason}")
            }),
            None => {
                eprintln!("{what}: the node's close came as a stateless reset");
                Ok(())
            }
        }
    }
}

/// The HELLO every connection starts with.
pub fn hello() -> Request {
    Request::Hello {
        min_version: tasklet_wire::PROTOCOL_VERSION,
        max_version: tasklet_wire::PROTOCOL_VERSION,
        agent: "test".into(),
    }
}

/// Asserts with a message instead of panicking, for tests that return results.
/// A client that offers only protocol `version` (older than the node's) is refused at HELLO,
/// `UNSUPPORTED` in words naming both versions, and its connection closes: it never gets to send
/// a frame the node cannot read.
pub fn an_older_client_is_told_at_hello(version: u8, agent: &str) -> TestResult {
    let node = TestNode::start();
    let mut raw = RawClient::connect(&node, "dev");
    let answer = raw.request(
        1,
        &Request::Hello {
            min_version: version,
            max_version: version,
            agent: agent.into(),
        },
    )?;
    let expected = format!(
        "this node speaks protocol version {}, the client offered {version} to {version}",
        tasklet_wire::PROTOCOL_VERSION
    );
    match answer {
        (Reply::Error { error, .. }, _) => check(
            error.code == tasklet_wire::ErrorCode::Unsupported && error.message == expected,
            || format!("{error}"),
        )?,
        other => return Err(format!("a version {version} client was answered {other:?}").into()),
    }
    raw.closed()?;
    Ok(())
}

pub fn check(condition: bool, message: impl FnOnce() -> String) -> TestResult {
    if condition {
        Ok(())
    } else {
        Err(message().into())
    }
}

/// A tasklet folder under tasklets/.
pub fn tasklet(name: &str) -> PathBuf {
    tasklet_tests::tasklet_dir(name)
}

/// A tasklet as `tasklet deploy push` sends it: its manifest's text and its component's bytes.
pub fn pushable(name: &str) -> (Vec<u8>, Vec<u8>) {
    let dir = tasklet(name);
    let manifest = std::fs::read(dir.join("tasklet.toml")).expect("the manifest");
    let component = tasklet_runtime::Manifest::load(&dir)
        .expect("the manifest parses")
        .component;
    let component = std::fs::read(&component)
        .unwrap_or_else(|e| panic!("{} (built by tests/build.rs): {e}", component.display()));
    (manifest, component)
}

/// Process ids of `parent`'s children (from /proc).
pub fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    // The fields after the command name: state, then the parent's pid.
                    let after = &stat[stat.rfind(')')? + 2..];
                    after.split(' ').nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// Whether a process runs (a zombie does not count: it has exited).
pub fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => stat
            .rfind(')')
            .and_then(|at| stat.get(at + 2..at + 3))
            .is_some_and(|state| state != "Z" && state != "X"),
    }
}

/// A session on `lease`, opened over `client`'s connection (SESSION_OPEN).
pub fn session_on(
    client: &mut NodeClient,
    lease: tasklet_wire::LeaseId,
) -> Result<tasklet_wire::SessionId, String> {
    match client
        .request(&Request::SessionOpen { lease })
        .map_err(|e| e.to_string())?
    {
        (Reply::SessionOpen { session }, _) => Ok(session),
        (other, _) => Err(format!("SESSION_OPEN answered {other:?}")),
    }
}
