//! [`NodeClient`]: a connection to a node, its HELLO said, with calls for each of the node's
//! operations. Every call blocks the calling thread until it is answered.

use crate::channel::Channel;
use crate::connect::{handshake, ConnectOptions};
use crate::error::ClientError;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tasklet_tls::Tenant;
use tasklet_wire::{
    Device, GpuSubmit, Grant, LeaseId, LeaseRequirements, Reply, Request, RequestId,
    PROTOCOL_VERSION,
};
use tokio::runtime::Runtime;

/// How long a closing client waits for its close to reach the node.
const CLOSE_GRACE: Duration = Duration::from_millis(200);

/// A lease as LEASE_ALLOC's reply describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseGrant {
    pub lease: LeaseId,
    pub generation: u64,
    pub device: u32,
    pub granted_bytes: u64,
    pub ttl_ms: u64,
}

/// Closes a [`NodeClient`]'s connection ([`NodeClient::closer`]) while the client lives; once
/// the client is dropped it does nothing (and holds nothing of it: the connection closes with
/// the client, as without a closer).
#[derive(Clone)]
pub struct Closer {
    live: Arc<std::sync::Mutex<Option<Live>>>,
}

/// What a close needs of a live client.
#[derive(Clone)]
struct Live {
    connection: quinn::Connection,
    endpoint: quinn::Endpoint,
    runtime: Arc<Runtime>,
}

impl Closer {
    /// Closes the connection, telling the node `reason`, and waits (at most `within`) for the
    /// close to be sent.
    pub fn close(&self, reason: &str, within: std::time::Duration) {
        let live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let Some(live) = live else {
            return;
        };
        live.connection
            .close(quinn::VarInt::from_u32(0), reason.as_bytes());
        let endpoint = live.endpoint.clone();
        let _ = live
            .runtime
            .block_on(async move { tokio::time::timeout(within, endpoint.wait_idle()).await });
    }
}

/// A connection to a node. It runs a small Tokio runtime of its own on a background thread, so
/// its callers stay synchronous; do not call it from inside an async runtime.
///
/// ```no_run
/// use tasklet_remote::NodeClient;
/// use tasklet_tls::Tenant;
///
/// let mut node = NodeClient::connect("localhost", "certs", &Tenant::new("dev")?)?;
/// for device in node.inventory()? {
///     println!("{} {} ({} bytes free)", device.index, device.name, device.free_memory);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct NodeClient {
    // Declared before the runtime: the channels' streams go before the runtime that drives them.
    channel: Channel,
    /// The stream of the last transfer (DEPLOY_PUSH, DEPLOY_RUN), kept until the next one or
    /// until after the close: a stream dropped just before the close leaves its last frames
    /// queued, and quinn (0.11) holds a close behind queued frames while the congestion window
    /// is full (as a young connection's path-MTU probes fill it), so the close would never leave
    /// and the node would hold the connection until its idle timeout. Dropped after the close,
    /// a stream queues nothing.
    last_transfer: Option<Channel>,
    endpoint: quinn::Endpoint,
    runtime: Arc<Runtime>,
    node: String,
    max_stream_bytes: u64,
    /// Handed out by [`NodeClient::closer`]; emptied when the client is dropped.
    closer: Closer,
}

/// What GET_INVENTORY says of a node.
#[derive(Debug, Clone)]
pub struct NodeInventory {
    pub devices: Vec<Device>,
    /// The node is draining: it refuses new leases, sessions and runs (`DRAINING`) and serves
    /// what runs until it ends.
    pub draining: bool,
}

impl NodeClient {
    /// Connects to the node at `addr` (`HOST[:PORT]`, port 5701 by default) as `tenant`, with
    /// the certificates in `certs`.
    pub fn connect(
        addr: &str,
        certs: impl AsRef<Path>,
        tenant: &Tenant,
    ) -> Result<NodeClient, ClientError> {
        NodeClient::connect_with(&ConnectOptions::new(addr, certs.as_ref(), tenant.clone()))
    }

    pub fn connect_with(options: &ConnectOptions) -> Result<NodeClient, ClientError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tasklet-remote")
            .enable_all()
            .build()
            .map_err(|err| {
                ClientError::Setup(format!("cannot start the client's runtime: {err}"))
            })?;
        let runtime = Arc::new(runtime);
        let (endpoint, connection, send, recv) = runtime.block_on(async {
            let (endpoint, connection) = handshake(options).await?;
            let (send, recv) = connection
                .open_bi()
                .await
                .map_err(|err| crate::connect::refusal_or_loss(&err))?;
            Ok::<_, ClientError>((endpoint, connection, send, recv))
        })?;
        let closer = Closer {
            live: Arc::new(std::sync::Mutex::new(Some(Live {
                connection: connection.clone(),
                endpoint: endpoint.clone(),
                runtime: Arc::clone(&runtime),
            }))),
        };
        let channel = Channel::new(Arc::clone(&runtime), connection, send, recv);
        let mut client = NodeClient {
            channel,
            last_transfer: None,
            endpoint,
            runtime,
            node: String::new(),
            max_stream_bytes: 0,
            closer,
        };
        // TLS 1.3: a client whose certificate the node refuses learns it here, at its first
        // request, rather than from the handshake.
        let (reply, _) = client.channel.call(&Request::Hello {
            min_version: PROTOCOL_VERSION,
            max_version: PROTOCOL_VERSION,
            agent: options.agent.clone(),
        })?;
        if let Reply::Hello {
            node,
            max_stream_bytes,
            ..
        } = reply
        {
            client.node = node;
            client.max_stream_bytes = max_stream_bytes;
        }
        Ok(client)
    }

    /// What the node calls itself.
    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// The largest streamed total the node accepts in one message (a MEM_WRITE's data).
    pub fn max_stream_bytes(&self) -> u64 {
        self.max_stream_bytes
    }

    /// The node's devices, their free memory and running leases.
    pub fn inventory(&mut self) -> Result<Vec<Device>, ClientError> {
        self.node_inventory().map(|inventory| inventory.devices)
    }

    /// The node's devices, and whether it is draining.
    pub fn node_inventory(&mut self) -> Result<NodeInventory, ClientError> {
        match self.call(&Request::GetInventory)? {
            Reply::Inventory { devices, draining } => Ok(NodeInventory { devices, draining }),
            other => Err(unexpected(other)),
        }
    }

    /// Narrows this connection's grant to `asked` (before its first lease); returns the grant in
    /// force, which the node may have cut down further.
    pub fn grant(&mut self, asked: &Grant) -> Result<Grant, ClientError> {
        match self.call(&Request::Grant(*asked))? {
            Reply::Grant(grant) => Ok(grant),
            other => Err(unexpected(other)),
        }
    }

    pub fn lease_alloc(
        &mut self,
        min_bytes: u64,
        seconds: u32,
        device: Option<u32>,
    ) -> Result<LeaseGrant, ClientError> {
        self.lease_alloc_with(min_bytes, seconds, device, LeaseRequirements::default())
    }

    /// [`NodeClient::lease_alloc`] on a device that meets `requires` too; the node fails it
    /// CAPACITY_EXCEEDED, naming what each device lacked, when none does.
    pub fn lease_alloc_with(
        &mut self,
        min_bytes: u64,
        seconds: u32,
        device: Option<u32>,
        requires: LeaseRequirements,
    ) -> Result<LeaseGrant, ClientError> {
        match self.call(&Request::LeaseAlloc {
            min_bytes,
            seconds,
            device,
            requires,
        })? {
            Reply::LeaseAlloc {
                lease,
                generation,
                device,
                granted_bytes,
                ttl_ms,
            } => Ok(LeaseGrant {
                lease,
                generation,
                device,
                granted_bytes,
                ttl_ms,
            }),
            other => Err(unexpected(other)),
        }
    }

    /// Releases a lease and everything under it.
    pub fn mem_free(&mut self, lease: LeaseId) -> Result<(), ClientError> {
        self.call(&Request::MemFree { lease }).map(|_| ())
    }

    /// One kernel on a lease's memory (see GPU_SUBMIT in docs/wire.md); the bytes read back.
    pub fn gpu_submit(&mut self, submit: &GpuSubmit) -> Result<Vec<u8>, ClientError> {
        let (reply, data) = self.channel.call(&Request::GpuSubmit(submit.clone()))?;
        match reply {
            Reply::GpuSubmit { .. } => Ok(data),
            other => Err(unexpected(other)),
        }
    }

    /// One kernel on a lease of its own: LEASE_ALLOC of at least `min_bytes` for `seconds`,
    /// GPU_SUBMIT of `submit` on it (its `lease` field is replaced), MEM_FREE whatever happened.
    /// A stateless call: [`crate::submit_anywhere`] runs it on the next node when this one is
    /// lost before it answers.
    pub fn submit_once(
        &mut self,
        min_bytes: u64,
        seconds: u32,
        submit: &GpuSubmit,
    ) -> Result<Vec<u8>, ClientError> {
        let lease = self.lease_alloc(min_bytes, seconds, None)?.lease;
        let submit = GpuSubmit {
            lease,
            ..submit.clone()
        };
        let output = self.gpu_submit(&submit);
        // An ended or lost lease is gone either way.
        let _ = self.mem_free(lease);
        output
    }

    /// From now on no call waits for the node past `deadline` (`None`: no bound but the idle
    /// timeout). A call still waiting then fails with [`ClientError::DeadlinePassed`] and the
    /// connection is closed, which ends everything it held on the node.
    pub fn set_deadline(&mut self, deadline: Option<std::time::Instant>) {
        self.channel.set_deadline(deadline);
    }

    /// Whether the connection is lost: the node went away or stopped answering (every call
    /// then fails `disconnected`).
    pub fn is_lost(&self) -> bool {
        self.channel.lost()
    }

    /// Any request that is answered, with the data its reply streams: for operations this type
    /// has no method for.
    pub fn request(&mut self, request: &Request) -> Result<(Reply, Vec<u8>), ClientError> {
        self.channel.call(request)
    }

    /// [`NodeClient::request`], the reply's data going to `sink` as it arrives.
    pub(crate) fn request_into(
        &mut self,
        request: &Request,
        sink: &mut dyn crate::sink::Sink,
    ) -> Result<Reply, ClientError> {
        self.channel.call_into(request, sink)
    }

    /// Sends a pipelined request (LAUNCH, MEM_WRITE with `data`) without waiting: its failure
    /// comes back from the session's next SYNC or MEM_READ.
    pub fn post(&mut self, request: &Request, data: &[u8]) -> Result<RequestId, ClientError> {
        self.channel.post(request, data)
    }

    /// A write spread over several streams (see `channel::spread`).
    pub(crate) fn post_spread(&mut self, parts: &[(Request, &[u8])]) -> Result<(), ClientError> {
        self.channel.post_spread(parts)
    }

    /// A read spread over several streams, into `into` (see `channel::spread`).
    pub(crate) fn call_spread(
        &mut self,
        parts: &[(Request, usize)],
        into: &mut dyn crate::sink::Spread,
    ) -> Result<(), ClientError> {
        self.channel.call_spread(parts, into)
    }

    pub(crate) fn connection(&self) -> &quinn::Connection {
        self.channel.connection()
    }

    /// A handle that closes this client's connection from anywhere (another thread, a signal
    /// handler's), so that the node frees what it holds at once rather than at its idle
    /// timeout.
    pub fn closer(&self) -> Closer {
        self.closer.clone()
    }

    pub(crate) fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    fn call(&mut self, request: &Request) -> Result<Reply, ClientError> {
        self.channel.call(request).map(|(reply, _)| reply)
    }

    /// A handle that reads this connection's path figures (datagram size, round trip,
    /// losses), also after the client has been handed on.
    pub fn path_watch(&self) -> crate::PathWatch {
        crate::PathWatch::new(self.channel.connection().clone())
    }

    /// Closes the connection, telling the node (which ends this connection's leases at once).
    pub fn close(self) {}
}

impl NodeClient {
    /// Keeps `channel`, a transfer's (or none), in place of the last one (see `last_transfer`).
    pub(crate) fn keep_transfer(&mut self, channel: Option<Channel>) {
        self.last_transfer = channel;
    }
}

impl Drop for NodeClient {
    fn drop(&mut self) {
        self.close_now();
    }
}

impl NodeClient {
    /// Closes the connection now, as dropping the client does (the node ends its leases at
    /// once); any call after fails `disconnected`.
    pub(crate) fn close_now(&mut self) {
        // A closer handed out holds nothing of the client past here.
        let live = self
            .closer
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if live.is_none() {
            // Closed already (a service's end, then its drop): its wait was had.
            return;
        }
        // Pipelined frames still gathered are not sent: the close ends what they would do, and
        // frames queued just before it could hold it back (see `last_transfer`).
        self.channel.connection().close(0u32.into(), b"client done");
        let endpoint = self.endpoint.clone();
        self.runtime.block_on(async move {
            let _ = tokio::time::timeout(CLOSE_GRACE, endpoint.wait_idle()).await;
        });
        self.last_transfer.take();
    }
}

pub(crate) fn unexpected(reply: Reply) -> ClientError {
    ClientError::Protocol(format!("an unexpected {} reply", reply.opcode()))
}
