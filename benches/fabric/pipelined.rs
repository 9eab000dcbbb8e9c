//! Several deployed runs in flight on one connection.
//!
//! `NodeClient` makes one call at a time (every call takes `&mut self`), so how many runs a node
//! sustains over one connection is measured by driving the wire directly: HELLO on a stream of
//! its own, then `lanes` streams, each sending a DEPLOY_RUN as soon as its last one is answered.
//! The node serves each stream's runs in order and different streams' runs side by side.

use crate::deploy::{check, Runs, TINY_INPUT};
use crate::stats::Samples;
use bytes::{Buf, Bytes};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tasklet_remote::{DeployExit, Digest};
use tasklet_tls::Tenant;
use tasklet_wire::{
    encode_request, Decoder, DecoderConfig, Event, Reply, Request, RequestId, PROTOCOL_VERSION,
};

/// The most output a reply may announce: far more than the tiny run answers.
const MAX_REPLY_DATA: u64 = 1 << 20;

/// Runs `lanes` streams of runs of `digest` on one connection to the node at `addr`: `warmup`
/// untimed runs per lane, then up to `count` runs in all, for at most `budget`.
pub fn runs(
    addr: SocketAddr,
    certs: &Path,
    digest: &Digest,
    lanes: usize,
    warmup: usize,
    count: usize,
    budget: Duration,
) -> Result<Runs, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("pipelined-client")
        .enable_all()
        .build()
        .map_err(|e| format!("the pipelined client's runtime: {e}"))?;
    let tenant = Tenant::new(tasklet_tls::DEFAULT_TENANT).map_err(|e| e.to_string())?;
    let mut config = tasklet_tls::client_config(certs, &tenant)
        .map_err(|e| format!("the pipelined client's TLS: {e}"))?;
    config.transport_config(Arc::new(tasklet_tls::transport::transport_config()));
    let digest = *digest;
    runtime.block_on(async move {
        let socket = std::net::UdpSocket::bind(("127.0.0.1", 0))
            .map_err(|e| format!("the pipelined client's socket: {e}"))?;
        let quic = quinn::default_runtime().ok_or("no runtime for quinn")?;
        let mut endpoint = quinn::Endpoint::new(
            tasklet_tls::transport::endpoint_config(),
            None,
            socket,
            quic,
        )
        .map_err(|e| format!("the pipelined client's endpoint: {e}"))?;
        endpoint.set_default_client_config(config);
        let connection = endpoint
            .connect(addr, "localhost")
            .map_err(|e| format!("connecting to the node: {e}"))?
            .await
            .map_err(|e| format!("the node's handshake: {e}"))?;
        let ids = Arc::new(AtomicU32::new(1));
        let mut control = Wire::open(&connection).await?;
        let hello = Request::Hello {
            min_version: PROTOCOL_VERSION,
            max_version: PROTOCOL_VERSION,
            agent: "fabric bench (pipelined runs)".into(),
        };
        match control.call(next(&ids), &hello, &[]).await?.0 {
            Reply::Hello { .. } => {}
            other => return Err(format!("HELLO answered {}", other.opcode())),
        }

        let left = Arc::new(AtomicUsize::new(count));
        let start_line = Arc::new(tokio::sync::Barrier::new(lanes + 1));
        let mut tasks = Vec::new();
        for _ in 0..lanes {
            let mut wire = Wire::open(&connection).await?;
            let (ids, left, start_line) =
                (Arc::clone(&ids), Arc::clone(&left), Arc::clone(&start_line));
            tasks.push(tokio::spawn(async move {
                let run = Request::DeployRun {
                    digest,
                    input_len: TINY_INPUT.len() as u64,
                };
                let mut warm = Ok(());
                for _ in 0..warmup {
                    warm = wire.run(next(&ids), &run).await.map(|_| ());
                    if warm.is_err() {
                        break;
                    }
                }
                // Every lane reaches the start line, warmed or not, so that none waits forever.
                start_line.wait().await;
                warm?;
                let mut node = Samples::with_capacity(count / lanes.max(1) + 1);
                let mut client = Samples::with_capacity(count / lanes.max(1) + 1);
                let end = Instant::now() + budget;
                while Instant::now() < end && take_one(&left) {
                    let t = Instant::now();
                    let ran = wire.run(next(&ids), &run).await?;
                    client.push(t.elapsed());
                    node.push(ran);
                }
                Ok::<_, String>((node, client))
            }));
        }
        start_line.wait().await;
        let start = Instant::now();
        let mut runs = Runs::default();
        for task in tasks {
            let (node, client) = task.await.map_err(|e| e.to_string())??;
            runs.node.extend(node);
            runs.client.extend(client);
        }
        runs.wall = start.elapsed();
        connection.close(0u32.into(), b"done");
        let _ = tokio::time::timeout(Duration::from_millis(200), endpoint.wait_idle()).await;
        Ok(runs)
    })
}

fn next(ids: &AtomicU32) -> RequestId {
    ids.fetch_add(1, Ordering::Relaxed)
}

/// Takes one run from the series' count; false when none are left.
fn take_one(left: &AtomicUsize) -> bool {
    left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

/// One stream: requests out, replies and their data decoded back.
struct Wire {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    decoder: Decoder,
    pending: Bytes,
}

impl Wire {
    async fn open(connection: &quinn::Connection) -> Result<Wire, String> {
        let (send, recv) = connection
            .open_bi()
            .await
            .map_err(|e| format!("opening a stream: {e}"))?;
        Ok(Wire {
            send,
            recv,
            decoder: Decoder::for_client(DecoderConfig {
                max_stream_bytes: MAX_REPLY_DATA,
            }),
            pending: Bytes::new(),
        })
    }

    /// One tiny run; the node's time for it.
    async fn run(&mut self, id: RequestId, request: &Request) -> Result<Duration, String> {
        match self.call(id, request, TINY_INPUT).await? {
            (
                Reply::DeployRun {
                    exit_status,
                    elapsed_us,
                    ..
                },
                output,
            ) => {
                check(DeployExit::from_code(exit_status), &output)?;
                Ok(Duration::from_micros(elapsed_us))
            }
            (other, _) => Err(format!("DEPLOY_RUN answered {}", other.opcode())),
        }
    }

    /// Sends `request` (with `data`, if it announces any) and reads its reply and the reply's data.
    async fn call(
        &mut self,
        id: RequestId,
        request: &Request,
        data: &[u8],
    ) -> Result<(Reply, Vec<u8>), String> {
        let mut out = Vec::new();
        let encoder = encode_request(id, request, &mut out).map_err(|e| e.to_string())?;
        if let Some(mut encoder) = encoder {
            encoder.encode(data, &mut out).map_err(|e| e.to_string())?;
        }
        self.send
            .write_all(&out)
            .await
            .map_err(|e| format!("sending {}: {e}", request.opcode()))?;
        let mut reply = None;
        let mut output = Vec::new();
        loop {
            while !self.pending.is_empty() {
                let (used, event) = self
                    .decoder
                    .decode(&self.pending)
                    .map_err(|e| format!("the node's reply: {e}"))?;
                let done = match event {
                    None => false,
                    Some(Event::Reply {
                        request_id,
                        reply: r,
                    }) if request_id == id => {
                        if let Reply::Error { opcode, error } = &r {
                            return Err(format!("{opcode} failed: {error}"));
                        }
                        let streamed = r.streamed().map_or(0, |(_, len)| len);
                        reply = Some(r);
                        streamed == 0
                    }
                    Some(Event::Data {
                        request_id,
                        bytes,
                        remaining,
                        ..
                    }) if request_id == id => {
                        output.extend_from_slice(bytes);
                        remaining == 0
                    }
                    Some(Event::GoAway(error)) => return Err(format!("the node closed: {error}")),
                    Some(_) => return Err("a reply to another request".into()),
                };
                self.pending.advance(used);
                if done {
                    if let Some(reply) = reply.take() {
                        return Ok((reply, output));
                    }
                }
            }
            match self.recv.read_chunk(1 << 20, true).await {
                Ok(Some(chunk)) => self.pending = chunk.bytes,
                Ok(None) => return Err("the node ended the stream".into()),
                Err(e) => return Err(format!("reading the reply: {e}")),
            }
        }
    }
}
