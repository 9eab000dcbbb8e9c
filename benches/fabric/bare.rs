//! Bare quinn beside the fabric: the node's TLS (`tasklet_tls`'s configurations, mutual), the
//! same loopback, and none of our protocol. An echo gives the round-trip floor; bulk transfers
//! under several transport settings give the best throughput quinn itself reaches here.
//!
//! One bidirectional stream does one thing, named by its first byte: [`ECHO`] answers every
//! [`ECHO_BYTES`]-byte message with itself until the client finishes; [`UPLOAD`] takes
//! everything the client sends and answers its count (8 bytes, big-endian); [`DOWNLOAD`] reads
//! a count, where in the payload its stream's share starts, and whether the bytes are
//! [`Data::Distinct`], and sends that many bytes.

use crate::stats::Samples;
use bytes::Bytes;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tasklet_tls::Tenant;
use tokio::runtime::Runtime;

const ECHO: u8 = b'E';
const UPLOAD: u8 = b'U';
const DOWNLOAD: u8 = b'D';

/// An echo message: about a SYNC request or its reply on the node's wire.
pub const ECHO_BYTES: usize = 32;

/// Bulk data is handed to quinn in slices of this size, without copying.
const WRITE_CHUNK: usize = 1 << 20;

/// What a bare transfer's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Data {
    /// As long as the transfer, each byte sent once, from memory written before the transfer
    /// began: as a remote write sends a tasklet's buffer and a remote read the device's bytes.
    Distinct,
    /// One [`WRITE_CHUNK`] buffer sent again and again, which stays in the sender's cache: what
    /// quinn moves when memory costs it nothing.
    Resent,
}

/// The bytes a transfer of `len` sends: the first `len` of one process-wide buffer (made, or
/// grown, at the first transfer that needs more, so its making is not timed after that), or the
/// first [`WRITE_CHUNK`] of it for [`Data::Resent`].
fn payload(len: u64, data: Data) -> Bytes {
    static PAYLOAD: std::sync::Mutex<Bytes> = std::sync::Mutex::new(Bytes::new());
    let want = match data {
        Data::Distinct => len.max(WRITE_CHUNK as u64),
        Data::Resent => WRITE_CHUNK as u64,
    };
    let mut payload = PAYLOAD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if (payload.len() as u64) < want {
        // Not zeros: a zeroed allocation may be the kernel's one shared zero page.
        *payload = Bytes::from(crate::pattern(want));
    }
    payload.clone()
}

/// `len` bytes of `payload` from `start`, as slices of at most [`WRITE_CHUNK`]: each a new part
/// of it, or for [`Data::Resent`] its first chunk again.
fn chunks(payload: &Bytes, data: Data, start: u64, len: u64) -> impl Iterator<Item = Bytes> + '_ {
    let mut at = start;
    let end = start + len;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let n = (end - at).min(WRITE_CHUNK as u64) as usize;
        let from = match data {
            Data::Distinct => at as usize,
            Data::Resent => 0,
        };
        at += n as u64;
        Some(payload.slice(from..from + n))
    })
}

/// The flow-control windows the node and its client use (`tasklet_tls::transport`, in this
/// process): a stream's receive window, the connection's receive and send windows.
pub fn fabric_windows() -> Windows {
    Windows {
        stream: tasklet_tls::transport::stream_window(),
        connection: tasklet_tls::transport::CONNECTION_WINDOW,
        send: tasklet_tls::transport::CONNECTION_WINDOW as u64,
    }
}

/// Windows large enough that a 256 MiB transfer is never waiting for credit on loopback.
const WIDE_WINDOWS: Windows = Windows {
    stream: 128 << 20,
    connection: 512 << 20,
    send: 512 << 20,
};

/// UDP socket buffers asked of the kernel (which caps them at `net.core.{r,w}mem_max`).
const SOCKET_BUFFERS: usize = 8 << 20;

/// A jumbo-frame datagram size: what a datacenter network with 9000-byte frames carries. quinn
/// sends up to 10 datagrams in one GSO send, which must fit in one 64 KiB UDP send: datagrams
/// this large are tried with GSO off.
const JUMBO_MTU: u16 = 8952;

/// The largest datagrams whose GSO batches (10 of them) still fit in one UDP send.
const GSO_MTU: u16 = 6400;

#[derive(Debug, Clone, Copy)]
pub struct Windows {
    pub stream: u32,
    pub connection: u32,
    pub send: u64,
}

/// The datagram sizes both ends use.
#[derive(Debug, Clone, Copy)]
pub enum Datagrams {
    /// quinn's: from 1200 bytes, discovered up to 1452, at most 1472 accepted.
    Quinn,
    /// Discovered from 1200 bytes up to this, which both ends accept (the fabric's own, with
    /// `tasklet_tls::transport::MAX_DATAGRAM`).
    Discover(u16),
    /// This size from the start, no discovery.
    Fixed(u16),
}

/// One way to configure both ends of a bare transfer.
#[derive(Debug, Clone)]
pub struct Setting {
    pub name: &'static str,
    /// `None`: quinn's defaults.
    pub windows: Option<Windows>,
    /// UDP generic segmentation offload (quinn's default: on).
    pub gso: bool,
    pub datagrams: Datagrams,
    /// `SO_RCVBUF`/`SO_SNDBUF` of both sockets; `None`: the kernel's default.
    pub socket_buffers: Option<usize>,
    /// Streams a transfer is split over, all at once on one connection.
    pub streams: usize,
    /// What the transfers' bytes are.
    pub data: Data,
}

impl Setting {
    /// The settings the fabric itself runs with (`tasklet_tls::transport`, as the node and its
    /// client configure them; the rest quinn's defaults): the echo floor is measured on it.
    pub fn fabric() -> Setting {
        Setting {
            name: "fabric's settings (as node and client)",
            windows: Some(fabric_windows()),
            gso: true,
            datagrams: Datagrams::Discover(tasklet_tls::transport::MAX_DATAGRAM),
            socket_buffers: Some(tasklet_tls::transport::socket_buffer()),
            streams: 1,
            data: Data::Distinct,
        }
    }

    /// The settings tried, from quinn's defaults through the fabric's to the widest.
    pub fn all() -> Vec<Setting> {
        let fabric = Setting::fabric();
        let wide = Setting {
            name: "wide windows, 8 MiB socket buffers, 6400-byte datagrams",
            windows: Some(WIDE_WINDOWS),
            socket_buffers: Some(SOCKET_BUFFERS),
            datagrams: Datagrams::Fixed(GSO_MTU),
            ..fabric.clone()
        };
        vec![
            Setting {
                name: "quinn defaults",
                windows: None,
                datagrams: Datagrams::Quinn,
                ..fabric.clone()
            },
            Setting {
                name: "fabric's windows, quinn's datagrams (up to 1452 bytes), kernel's socket buffers",
                datagrams: Datagrams::Quinn,
                socket_buffers: None,
                ..fabric.clone()
            },
            Setting {
                name: "fabric's settings, GSO off",
                gso: false,
                ..fabric.clone()
            },
            fabric.clone(),
            Setting {
                name: "fabric's settings, 4 streams",
                streams: 4,
                ..fabric.clone()
            },
            Setting {
                name: "fabric's settings, one 1 MiB buffer re-sent",
                data: Data::Resent,
                ..fabric.clone()
            },
            Setting {
                name: "fabric's windows, 6400-byte datagrams from the start",
                datagrams: Datagrams::Fixed(GSO_MTU),
                ..fabric.clone()
            },
            wide.clone(),
            Setting {
                name: "wide, 6400-byte datagrams, 4 streams",
                streams: 4,
                ..wide.clone()
            },
            Setting {
                name: "wide, 8952-byte datagrams, GSO off",
                datagrams: Datagrams::Fixed(JUMBO_MTU),
                gso: false,
                ..wide
            },
        ]
    }

    fn transport(&self) -> quinn::TransportConfig {
        let mut transport = quinn::TransportConfig::default();
        if let Some(w) = self.windows {
            transport
                .stream_receive_window(w.stream.into())
                .receive_window(w.connection.into())
                .send_window(w.send);
        }
        // The bulk phase keeps every setting's connection open through its rounds, idle while
        // the others transfer: keep-alives hold it open past quinn's idle timeout.
        transport
            .max_concurrent_bidi_streams(64u32.into())
            .keep_alive_interval(Some(Duration::from_secs(5)))
            .enable_segmentation_offload(self.gso);
        match self.datagrams {
            Datagrams::Quinn => {}
            Datagrams::Discover(bound) => {
                let mut discovery = quinn::MtuDiscoveryConfig::default();
                discovery.upper_bound(bound);
                transport.mtu_discovery_config(Some(discovery));
            }
            Datagrams::Fixed(mtu) => {
                transport
                    .initial_mtu(mtu)
                    .min_mtu(mtu)
                    .mtu_discovery_config(None);
            }
        }
        transport
    }

    fn endpoint_config(&self) -> quinn::EndpointConfig {
        let mut config = quinn::EndpointConfig::default();
        if let Datagrams::Discover(mtu) | Datagrams::Fixed(mtu) = self.datagrams {
            // Both ends must accept datagrams that large; the error is only for values outside
            // 1200..=65527, which these are not.
            let _ = config.max_udp_payload_size(mtu.max(1472));
        }
        config
    }

    fn socket(&self, addr: SocketAddr) -> Result<UdpSocket, String> {
        let socket = UdpSocket::bind(addr)
            .map_err(|e| format!("cannot bind a UDP socket on {addr}: {e}"))?;
        if let Some(bytes) = self.socket_buffers {
            set_buffers(&socket, bytes);
        }
        Ok(socket)
    }
}

/// Asks for `bytes` of send and receive buffer; the kernel may give less, which is what it
/// gives every program.
fn set_buffers(socket: &UdpSocket, bytes: usize) {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for option in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        // SAFETY: a valid socket, a c_int option value of the size given.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

/// A bare server on the node's runtime, with one setting.
pub struct Server {
    endpoint: quinn::Endpoint,
}

impl Server {
    pub fn start(runtime: &Runtime, certs: &Path, setting: &Setting) -> Result<Server, String> {
        let mut config =
            tasklet_tls::server_config(certs).map_err(|e| format!("the bare server's TLS: {e}"))?;
        config.transport_config(Arc::new(setting.transport()));
        let socket = setting.socket(([127, 0, 0, 1], 0).into())?;
        let endpoint = runtime.block_on(async {
            let runtime = quinn::default_runtime().ok_or("no runtime for quinn")?;
            quinn::Endpoint::new(setting.endpoint_config(), Some(config), socket, runtime)
                .map_err(|e| format!("cannot start the bare server: {e}"))
        })?;
        let accepting = endpoint.clone();
        runtime.spawn(async move {
            while let Some(incoming) = accepting.accept().await {
                tokio::spawn(async move {
                    let Ok(connection) = incoming.await else {
                        return;
                    };
                    while let Ok((send, recv)) = connection.accept_bi().await {
                        tokio::spawn(serve_stream(send, recv));
                    }
                });
            }
        });
        Ok(Server { endpoint })
    }

    pub fn addr(&self) -> Result<SocketAddr, String> {
        self.endpoint
            .local_addr()
            .map_err(|e| format!("the bare server's address: {e}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.endpoint.close(0u32.into(), b"done");
    }
}

async fn serve_stream(mut send: quinn::SendStream, mut recv: quinn::RecvStream) {
    let mut kind = [0u8; 1];
    if recv.read_exact(&mut kind).await.is_err() {
        return;
    }
    match kind[0] {
        ECHO => {
            let mut message = [0u8; ECHO_BYTES];
            while recv.read_exact(&mut message).await.is_ok() {
                tracing::trace!(name: "server-read", target: crate::timeline::TARGET, "");
                if send.write_all(&message).await.is_err() {
                    return;
                }
                tracing::trace!(name: "server-written", target: crate::timeline::TARGET, "");
            }
        }
        UPLOAD => {
            let mut received = 0u64;
            while let Ok(Some(chunk)) = recv.read_chunk(usize::MAX, false).await {
                tracing::trace!(name: "server-upload-read", target: crate::timeline::TARGET, "");
                received += chunk.bytes.len() as u64;
            }
            if send.write_all(&received.to_be_bytes()).await.is_ok() {
                let _ = send.finish();
            }
        }
        DOWNLOAD => {
            // The count, the stream's start in the payload, and whether the data is distinct.
            let mut request = [0u8; 17];
            if recv.read_exact(&mut request).await.is_err() {
                return;
            }
            let word =
                |at: usize| u64::from_be_bytes(request[at..at + 8].try_into().unwrap_or_default());
            let (len, start) = (word(0), word(8));
            let data = if request[16] == 1 {
                Data::Distinct
            } else {
                Data::Resent
            };
            let payload = payload(start.saturating_add(len), data);
            for chunk in chunks(&payload, data, start, len) {
                if send.write_chunk(chunk).await.is_err() {
                    return;
                }
            }
            let _ = send.finish();
        }
        _ => {}
    }
}

/// A bare client: a runtime like `tasklet_remote::NodeClient`'s (one worker thread, the caller
/// blocking on it), one connection.
pub struct Client {
    connection: quinn::Connection,
    endpoint: quinn::Endpoint,
    runtime: Runtime,
    data: Data,
}

impl Client {
    pub fn connect(server: SocketAddr, certs: &Path, setting: &Setting) -> Result<Client, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("bare-client")
            .enable_all()
            .build()
            .map_err(|e| format!("the bare client's runtime: {e}"))?;
        let tenant = Tenant::new(tasklet_tls::DEFAULT_TENANT).map_err(|e| e.to_string())?;
        let mut config = tasklet_tls::client_config(certs, &tenant)
            .map_err(|e| format!("the bare client's TLS: {e}"))?;
        config.transport_config(Arc::new(setting.transport()));
        let socket = setting.socket(([127, 0, 0, 1], 0).into())?;
        let (endpoint, connection) = runtime.block_on(async {
            let quic = quinn::default_runtime().ok_or("no runtime for quinn")?;
            let mut endpoint = quinn::Endpoint::new(setting.endpoint_config(), None, socket, quic)
                .map_err(|e| format!("cannot start the bare client: {e}"))?;
            endpoint.set_default_client_config(config);
            let connecting = endpoint
                .connect(server, "localhost")
                .map_err(|e| format!("cannot connect to the bare server: {e}"))?;
            let connection = tokio::time::timeout(Duration::from_secs(10), connecting)
                .await
                .map_err(|_| "the bare server did not answer in 10 s".to_string())?
                .map_err(|e| format!("the bare server's handshake: {e}"))?;
            Ok::<_, String>((endpoint, connection))
        })?;
        Ok(Client {
            connection,
            endpoint,
            runtime,
            data: setting.data,
        })
    }

    /// Round trips of one [`ECHO_BYTES`] message on one stream, each timed: `warmup` untimed,
    /// then up to `count`, for at most `budget`; `marked`: each between the timeline's markers.
    pub fn echo(
        &self,
        warmup: usize,
        count: usize,
        budget: Duration,
        marked: bool,
    ) -> Result<Samples, String> {
        let connection = self.connection.clone();
        self.runtime.block_on(async move {
            let (mut send, mut recv) = connection.open_bi().await.map_err(err)?;
            send.write_all(&[ECHO]).await.map_err(err)?;
            let message = [7u8; ECHO_BYTES];
            let mut back = [0u8; ECHO_BYTES];
            let mut samples = Samples::with_capacity(count);
            let start = Instant::now();
            for i in 0..warmup + count {
                if marked {
                    crate::timeline::begin();
                }
                let t = Instant::now();
                send.write_all(&message).await.map_err(err)?;
                recv.read_exact(&mut back).await.map_err(err)?;
                if marked {
                    crate::timeline::end();
                }
                if i >= warmup {
                    samples.push(t.elapsed());
                }
                if start.elapsed() > budget {
                    break;
                }
            }
            let _ = send.finish();
            Ok(samples)
        })
    }

    /// Sends `bytes` to the server over `streams` streams at once; the time until the server
    /// has counted them all (at most `budget`).
    pub fn upload(&self, bytes: u64, streams: usize, budget: Duration) -> Result<Duration, String> {
        let connection = self.connection.clone();
        let data = self.data;
        let payload = payload(bytes, data);
        self.within(budget, async move {
            let start = Instant::now();
            let mut tasks = Vec::new();
            let mut from = 0;
            for share in shares(bytes, streams) {
                let connection = connection.clone();
                let payload = payload.clone();
                let at = from;
                from += share;
                tasks.push(tokio::spawn(async move {
                    let (mut send, mut recv) = connection.open_bi().await.map_err(err)?;
                    send.write_all(&[UPLOAD]).await.map_err(err)?;
                    for chunk in chunks(&payload, data, at, share) {
                        send.write_chunk(chunk).await.map_err(err)?;
                    }
                    send.finish().map_err(err)?;
                    let mut count = [0u8; 8];
                    recv.read_exact(&mut count).await.map_err(err)?;
                    if u64::from_be_bytes(count) != share {
                        return Err(format!(
                            "the server counted {} of {share} bytes",
                            u64::from_be_bytes(count)
                        ));
                    }
                    Ok::<_, String>(())
                }));
            }
            for task in tasks {
                task.await.map_err(err)??;
            }
            Ok(start.elapsed())
        })
    }

    /// Has the server send `bytes` over `streams` streams at once; the time until all arrived
    /// (at most `budget`).
    pub fn download(
        &self,
        bytes: u64,
        streams: usize,
        budget: Duration,
    ) -> Result<Duration, String> {
        let connection = self.connection.clone();
        let distinct = u8::from(self.data == Data::Distinct);
        // Made before the clock starts (the server takes the same buffer).
        drop(payload(bytes, self.data));
        self.within(budget, async move {
            let start = Instant::now();
            let mut tasks = Vec::new();
            let mut from = 0u64;
            for share in shares(bytes, streams) {
                let connection = connection.clone();
                let at = from;
                from += share;
                tasks.push(tokio::spawn(async move {
                    let (mut send, mut recv) = connection.open_bi().await.map_err(err)?;
                    let mut request = vec![DOWNLOAD];
                    request.extend_from_slice(&share.to_be_bytes());
                    request.extend_from_slice(&at.to_be_bytes());
                    request.push(distinct);
                    send.write_all(&request).await.map_err(err)?;
                    send.finish().map_err(err)?;
                    let mut received = 0u64;
                    while let Some(chunk) = recv.read_chunk(usize::MAX, false).await.map_err(err)? {
                        received += chunk.bytes.len() as u64;
                    }
                    if received != share {
                        return Err(format!("received {received} of {share} bytes"));
                    }
                    Ok::<_, String>(())
                }));
            }
            for task in tasks {
                task.await.map_err(err)??;
            }
            Ok(start.elapsed())
        })
    }
}

impl Client {
    /// The client end's path figures: datagram size now, losses of its sending (uploads),
    /// fallbacks to the minimum datagram size.
    pub fn path(&self) -> String {
        let path = self.connection.stats().path;
        format!(
            "{}-byte datagrams, {} of {} packets lost, {} congestion events, {} black holes",
            path.current_mtu,
            path.lost_packets,
            path.sent_packets,
            path.congestion_events,
            path.black_holes_detected
        )
    }

    /// Runs a transfer to its end or for `budget`, whichever comes first.
    fn within(
        &self,
        budget: Duration,
        transfer: impl std::future::Future<Output = Result<Duration, String>>,
    ) -> Result<Duration, String> {
        self.runtime.block_on(async move {
            tokio::time::timeout(budget, transfer)
                .await
                .map_err(|_| format!("the transfer did not end within {budget:?}"))?
        })
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.connection.close(0u32.into(), b"done");
        let endpoint = self.endpoint.clone();
        self.runtime.block_on(async move {
            let _ = tokio::time::timeout(Duration::from_millis(200), endpoint.wait_idle()).await;
        });
    }
}

/// `bytes` cut into `streams` nearly equal shares.
fn shares(bytes: u64, streams: usize) -> Vec<u64> {
    let streams = streams.max(1) as u64;
    (0..streams)
        .map(|i| bytes / streams + u64::from(i < bytes % streams))
        .collect()
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}
