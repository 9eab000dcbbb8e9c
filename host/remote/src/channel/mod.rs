//! One stream to a node, driven synchronously: requests go out (pipelined ones gathered and sent
//! together), replies and their data come back, the wire crate's tracker matching the two.
//!
//! The calling thread does the I/O itself, inside the client's runtime (`block_on`); the
//! runtime's own thread keeps the connection alive (keep-alives, acknowledgements) between calls.
//! The data of a large reply is the exception: a task on the runtime's thread reads it (see
//! [`BULK_READ`]).

mod spread;

pub(crate) use spread::clamp_streams;
pub(crate) use spread::parts as spread_parts;
pub use spread::streams as transfer_streams;

use crate::awake::Awake;
use crate::error::ClientError;
use crate::sink::Sink;
use crate::spin::Spin;
use bytes::{Buf, Bytes, BytesMut};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;
use tasklet_wire::limits::MAX_CHUNK;
use tasklet_wire::tracker::MAX_TRACKED;
use tasklet_wire::{
    encode_request, ClientTracker, DataEncoder, Decoder, DecoderConfig, Event, Reply, Request,
    RequestId,
};
use tokio::runtime::Runtime;

/// Pipelined frames wait in the client until this many bytes of them are gathered, or a request
/// that needs an answer goes out: a hundred-odd launches then cost one write, and the node
/// starts on the first of a long series while the client is still sending the rest (with all
/// of a thousand launches in one write it would start only after the client's last).
const GATHER_BYTES: usize = 8 << 10;

/// The first pipelined frames after a call go out once this many bytes are gathered: the node's
/// GPU thread, idle since the call, starts on a series a few dozen launches in rather than a
/// hundred-odd.
const FIRST_GATHER_BYTES: usize = 1 << 10;

/// The most a reply may stream (a read into a 4 GiB linear memory).
const MAX_REPLY_DATA: u64 = 1 << 32;

/// The most bytes read from the stream at once.
const READ_CHUNK: usize = 1 << 20;

/// A reply streaming more data than this has the rest of it read by a task on the client's
/// runtime, on the thread that runs quinn's connection: each datagram's worth that arrives then
/// wakes a task on the same thread, where the calling thread would be woken from another (a
/// futex wake and a context switch per few datagrams, which bounded a large read to a fraction
/// of what the connection carries). Smaller replies are read by the calling thread, which
/// saves a hand-off per call.
const BULK_READ: u64 = 256 << 10;

/// A bulk read hands its data to the calling thread about this many bytes at a time, which the
/// calling thread copies into the reply's buffer (and takes that buffer's page faults) while the
/// runtime's thread reads on; at most [`HAND_OVER_BATCHES`] batches wait.
const HAND_OVER_BYTES: usize = 256 << 10;
const HAND_OVER_BATCHES: usize = 16;

/// Frames of a bulk write (each a chunk of up to `MAX_CHUNK` bytes behind its header) queued for
/// the runtime's thread at most.
const WRITE_FRAMES: usize = 8;

pub(crate) struct Channel {
    runtime: Arc<Runtime>,
    connection: quinn::Connection,
    /// `None` only while a bulk write has it, or after that write was lost.
    send: Option<quinn::SendStream>,
    /// `None` only while a bulk read has it, or after that read was lost.
    recv: Option<quinn::RecvStream>,
    decoder: Decoder,
    /// Bytes read and not yet decoded.
    pending: Bytes,
    tracker: ClientTracker,
    /// Pipelined frames not yet written.
    gathered: Vec<u8>,
    /// Why the channel can no longer be used, once it cannot.
    broken: Option<ClientError>,
    /// No wait for the node goes past this; one that would closes the connection.
    deadline: Option<Instant>,
    /// How long a wait for a reply polls before parking.
    spin: Spin,
    /// Keeps the runtime's thread awake while a call is out (see `awake`).
    awake: Awake,
    /// Whether pipelined frames were written since the last call (see [`FIRST_GATHER_BYTES`]).
    posted_since_call: bool,
    /// Streams a transfer is spread over (see `spread`), opened when first needed.
    branches: Vec<spread::Branch>,
    /// The number of the next FORK.
    next_fork: u64,
}

/// Runs `future` on `runtime` until it is done or `deadline` passes (`None`: it passed).
fn block_until<F: Future>(
    runtime: &Runtime,
    deadline: Option<Instant>,
    future: F,
) -> Option<F::Output> {
    match deadline {
        None => Some(runtime.block_on(future)),
        Some(at) => {
            let at = tokio::time::Instant::from_std(at);
            runtime
                .block_on(async { tokio::time::timeout_at(at, future).await })
                .ok()
        }
    }
}

impl Channel {
    pub fn new(
        runtime: Arc<Runtime>,
        connection: quinn::Connection,
        send: quinn::SendStream,
        recv: quinn::RecvStream,
    ) -> Channel {
        Channel {
            runtime,
            connection,
            send: Some(send),
            recv: Some(recv),
            decoder: client_decoder(),
            pending: Bytes::new(),
            tracker: ClientTracker::new(MAX_TRACKED),
            gathered: Vec::new(),
            broken: None,
            deadline: None,
            spin: Spin::new(),
            awake: Awake::new(),
            posted_since_call: false,
            branches: Vec::new(),
            next_fork: 1,
        }
    }

    /// From now on no wait for the node goes past `deadline` (`None`: waits are unbounded).
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// Whether the connection was lost (the node went away, or stopped answering), as opposed
    /// to closed by this side (a deadline) or for a broken protocol.
    pub fn lost(&self) -> bool {
        matches!(
            self.broken,
            Some(ClientError::Disconnected(_) | ClientError::Refused(_))
        )
    }

    pub fn connection(&self) -> &quinn::Connection {
        &self.connection
    }

    /// Sends a pipelined request (LAUNCH, or a MEM_WRITE with `data`); it gets no reply.
    pub fn post(&mut self, request: &Request, data: &[u8]) -> Result<RequestId, ClientError> {
        self.usable()?;
        let id = self.start(request)?;
        // An op that cannot be encoded was never sent; the id it took is settled by the
        // session's next barrier like any other.
        let mut data_encoder = encode(id, request, &mut self.gathered)?;
        if let Some(encoder) = data_encoder.as_mut() {
            if data.len() + self.gathered.len() <= GATHER_BYTES {
                encoder
                    .encode(data, &mut self.gathered)
                    .map_err(|err| ClientError::Setup(err.to_string()))?;
            } else {
                // Large data goes straight to the stream, a header before each chunk.
                self.flush()?;
                self.write_bulk(encoder, data)?;
            }
        }
        let gather = if self.posted_since_call {
            GATHER_BYTES
        } else {
            FIRST_GATHER_BYTES
        };
        if self.gathered.len() >= gather {
            self.flush()?;
            self.posted_since_call = true;
        }
        Ok(id)
    }

    /// Sends a request and waits for its reply, and the reply's data if it streams any. A
    /// failed reply is [`ClientError::Failed`].
    pub fn call(&mut self, request: &Request) -> Result<(Reply, Vec<u8>), ClientError> {
        let mut data = Vec::new();
        let reply = self.call_into(request, &mut data)?;
        Ok((reply, data))
    }

    /// [`Channel::call`], the reply's data going to `sink` as it arrives.
    pub fn call_into(
        &mut self,
        request: &Request,
        sink: &mut dyn Sink,
    ) -> Result<Reply, ClientError> {
        self.usable()?;
        let id = self.start(request)?;
        encode(id, request, &mut self.gathered)?;
        // Only for calls whose replies come soon enough that this thread polls for them; the
        // flush that writes the call keeps the runtime awake for its reply.
        if self.spin.polls() {
            self.awake.call_out();
        }
        let replied = self.flush().and_then(|()| self.await_reply(id, sink));
        self.awake.call_back();
        self.posted_since_call = false;
        match replied? {
            Reply::Error { opcode, error } => Err(ClientError::Failed { opcode, error }),
            reply => Ok(reply),
        }
    }

    /// Sends a request whose data follows it (DEPLOY_PUSH, DEPLOY_RUN) and waits for its reply,
    /// and the reply's data if it streams any.
    pub fn call_with(
        &mut self,
        request: &Request,
        data: &[u8],
    ) -> Result<(Reply, Vec<u8>), ClientError> {
        let id = self.post(request, data)?;
        self.flush()?;
        let mut data = Vec::new();
        let reply = self.await_reply(id, &mut data)?;
        match reply {
            Reply::Error { opcode, error } => Err(ClientError::Failed { opcode, error }),
            reply => Ok((reply, data)),
        }
    }

    /// Takes `request`'s id from the tracker.
    fn start(&mut self, request: &Request) -> Result<RequestId, ClientError> {
        self.tracker
            .start(request)
            .map_err(|err| ClientError::Setup(format!("cannot send {}: {err}", request.opcode())))
    }

    fn usable(&self) -> Result<(), ClientError> {
        match &self.broken {
            None => Ok(()),
            Some(ClientError::Protocol(why)) => Err(ClientError::Protocol(why.clone())),
            Some(ClientError::DeadlinePassed) => Err(ClientError::DeadlinePassed),
            Some(err) => Err(ClientError::Disconnected(match err {
                ClientError::Disconnected(why) => why.clone(),
                other => other.to_string(),
            })),
        }
    }

    /// Writes the gathered pipelined frames.
    pub fn flush(&mut self) -> Result<(), ClientError> {
        if self.gathered.is_empty() {
            return Ok(());
        }
        if self.spin.polls() {
            self.awake.sent(&self.runtime);
        }
        let frames = std::mem::take(&mut self.gathered);
        let result = self.write(&frames);
        self.gathered = frames;
        self.gathered.clear();
        result
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        let Some(send) = self.send.as_mut() else {
            return Err(self.fail(ClientError::Disconnected(LOST_WRITE.into())));
        };
        let Some(written) = block_until(&self.runtime, self.deadline, send.write_all(bytes)) else {
            return Err(self.out_of_time());
        };
        tracing::trace!(name: "sent", target: crate::TIMELINE, "");
        written.map_err(|err| self.write_failed(err))
    }

    fn write_failed(&mut self, err: quinn::WriteError) -> ClientError {
        let error = match err {
            // In TLS 1.3 the node checks the client's certificate after the client's half of
            // the handshake is done, so its refusal can end the connection under the first
            // write as well as under a read: explained the same way wherever it surfaces.
            quinn::WriteError::ConnectionLost(lost_err) => {
                crate::connect::refusal_or_loss(&lost_err)
            }
            other => ClientError::Disconnected(other.to_string()),
        };
        self.fail(error)
    }

    /// Writes a request's large data as data frames: this thread copies each chunk, behind its
    /// header, into a frame of its own, and a task on the runtime's thread (where quinn's
    /// connection runs) puts the frames on the stream, so that the copying and the sending go on
    /// side by side, and the stream's flow control is waited on there rather than by waking this
    /// thread for every window's worth. At most [`WRITE_FRAMES`] frames wait.
    fn write_bulk(&mut self, encoder: &mut DataEncoder, data: &[u8]) -> Result<(), ClientError> {
        let Some(mut send) = self.send.take() else {
            return Err(self.fail(ClientError::Disconnected(LOST_WRITE.into())));
        };
        let (frames, mut queued) = tokio::sync::mpsc::channel::<Bytes>(WRITE_FRAMES);
        let mut task = self.runtime.spawn(async move {
            while let Some(frame) = queued.recv().await {
                if let Err(err) = send.write_chunk(frame).await {
                    return (send, Err(err));
                }
                tracing::trace!(name: "frame-sent", target: crate::TIMELINE, "");
            }
            (send, Ok(()))
        });
        let mut refused = None;
        for chunk in data.chunks(MAX_CHUNK as usize) {
            let frame = match data_frame(encoder, chunk) {
                Ok(frame) => frame,
                Err(err) => {
                    refused = Some(err);
                    break;
                }
            };
            tracing::trace!(name: "frame-copied", target: crate::TIMELINE, "");
            let Some(sent) = block_until(&self.runtime, self.deadline, frames.send(frame)) else {
                task.abort();
                return Err(self.out_of_time());
            };
            // The task ended early: its write failed, which joining it says.
            if sent.is_err() {
                break;
            }
        }
        drop(frames);
        let Some(joined) = block_until(&self.runtime, self.deadline, &mut task) else {
            task.abort();
            return Err(self.out_of_time());
        };
        let (send, written) = match joined {
            Ok(done) => done,
            Err(err) => {
                let why = format!("{LOST_WRITE}: {err}");
                return Err(self.fail(ClientError::Disconnected(why)));
            }
        };
        self.send = Some(send);
        if let Err(err) = written {
            return Err(self.write_failed(err));
        }
        match refused {
            None => Ok(()),
            Some(err) => Err(err),
        }
    }

    /// Reads until the reply to `id` and all of its data have come, the data into `sink`.
    fn await_reply(&mut self, id: RequestId, sink: &mut dyn Sink) -> Result<Reply, ClientError> {
        let mut reply: Option<Reply> = None;
        loop {
            while !self.pending.is_empty() {
                let (used, event) = match self.decoder.decode(&self.pending) {
                    Ok(decoded) => decoded,
                    Err(err) => return Err(self.protocol(err.to_string())),
                };
                let done = match event {
                    None => false,
                    Some(Event::Reply {
                        request_id,
                        reply: r,
                    }) => {
                        if let Err(err) = self.tracker.complete(request_id, &r) {
                            return Err(self.protocol(err.to_string()));
                        }
                        if request_id != id {
                            return Err(self.protocol(format!(
                                "a reply to request {request_id}, which was not awaited"
                            )));
                        }
                        let streamed = r.streamed().map_or(0, |(_, len)| len);
                        reply = Some(r);
                        if streamed > 0 {
                            if let Err(err) = sink.expect(streamed) {
                                return Err(self.fail(err));
                            }
                        }
                        if streamed > BULK_READ {
                            self.pending.advance(used);
                            self.read_bulk(sink)?;
                            return match reply.take() {
                                Some(reply) => Ok(reply),
                                None => Err(self.protocol("a reply lost its data".into())),
                            };
                        }
                        streamed == 0
                    }
                    Some(Event::Data {
                        bytes, remaining, ..
                    }) => {
                        if let Err(err) = sink.put(bytes) {
                            return Err(self.fail(err));
                        }
                        remaining == 0
                    }
                    Some(Event::GoAway(error)) => return Err(self.stopped(Stop::GoAway(error))),
                    Some(Event::Request { .. }) => {
                        return Err(self.protocol("a request sent to the client".into()));
                    }
                };
                self.pending.advance(used);
                if done {
                    if let Some(reply) = reply.take() {
                        return Ok(reply);
                    }
                }
            }
            let Some(recv) = self.recv.as_mut() else {
                return Err(self.fail(ClientError::Disconnected(LOST_READ.into())));
            };
            // Polled here for a while (see `spin`), then waited for on the runtime.
            let chunk = {
                let mut read = std::pin::pin!(recv.read_chunk(READ_CHUNK, true));
                let began = Instant::now();
                match self.spin.poll(&self.runtime, read.as_mut()) {
                    Some(chunk) => Some(chunk),
                    None => {
                        let chunk = block_until(&self.runtime, self.deadline, read);
                        self.spin.parked(began.elapsed());
                        chunk
                    }
                }
            };
            let Some(chunk) = chunk else {
                return Err(self.out_of_time());
            };
            match chunk {
                Ok(Some(chunk)) => {
                    tracing::trace!(name: "read", target: crate::TIMELINE, "");
                    self.pending = chunk.bytes
                }
                Ok(None) => return Err(self.stopped(Stop::Ended)),
                Err(err) => return Err(self.stopped(Stop::Read(err))),
            }
        }
    }

    /// Reads the rest of a reply's data into `sink`: a task on the runtime's thread reads and
    /// decodes it (see [`BULK_READ`]) and hands the data over in batches, which this thread copies
    /// into `sink` while the task reads on. What was read past the data stays pending.
    fn read_bulk(&mut self, sink: &mut dyn Sink) -> Result<(), ClientError> {
        let Some(recv) = self.recv.take() else {
            return Err(self.fail(ClientError::Disconnected(LOST_READ.into())));
        };
        let bulk = Bulk::new(
            recv,
            std::mem::replace(&mut self.decoder, client_decoder()),
            std::mem::take(&mut self.pending),
            0,
        );
        let (batches, mut handed) = tokio::sync::mpsc::channel(HAND_OVER_BATCHES);
        let mut task = self.runtime.spawn(bulk.run(batches));
        loop {
            let Some(batch) = block_until(&self.runtime, self.deadline, handed.recv()) else {
                // The stream goes with the task.
                task.abort();
                return Err(self.out_of_time());
            };
            // None: the task is done, and dropped its end. (A reply is handed over only by a
            // read begun before it.)
            let Some((_, Handed::Data(batch))) = batch else {
                break;
            };
            for piece in batch {
                if let Err(err) = sink.put(&piece) {
                    task.abort();
                    return Err(self.fail(err));
                }
            }
        }
        let Some(joined) = block_until(&self.runtime, self.deadline, &mut task) else {
            task.abort();
            return Err(self.out_of_time());
        };
        let (bulk, outcome) = match joined {
            Ok(done) => done,
            // The task panicked or the runtime is shutting down: the stream went with it.
            Err(err) => {
                let why = format!("{LOST_READ}: {err}");
                return Err(self.fail(ClientError::Disconnected(why)));
            }
        };
        self.recv = Some(bulk.recv);
        self.decoder = bulk.decoder;
        self.pending = bulk.pending;
        match outcome {
            Ok(()) => Ok(()),
            Err(stop) => Err(self.stopped(stop)),
        }
    }

    /// The error for a read that stopped, the channel marked broken by it.
    fn stopped(&mut self, stop: Stop) -> ClientError {
        match stop {
            Stop::Ended => {
                let why = "the node ended the stream".to_owned();
                self.fail(ClientError::Disconnected(why))
            }
            Stop::Read(quinn::ReadError::ConnectionLost(err)) => {
                self.fail(crate::connect::refusal_or_loss(&err))
            }
            Stop::Read(other) => self.fail(ClientError::Disconnected(other.to_string())),
            Stop::GoAway(error) => {
                let why = format!("the node closed the connection: {error}");
                self.fail(ClientError::Disconnected(why))
            }
            Stop::Protocol(why) => self.protocol(why),
        }
    }

    /// The node broke the protocol: the connection is closed, and every later call fails.
    fn protocol(&mut self, why: String) -> ClientError {
        self.connection.close(
            quinn::VarInt::from(tasklet_wire::ErrorCode::ProtocolError as u32),
            why.as_bytes(),
        );
        self.fail(ClientError::Protocol(why))
    }

    /// The deadline passed while waiting: the connection is closed (the node ends what it held
    /// for it), and every later call fails the same way.
    fn out_of_time(&mut self) -> ClientError {
        self.connection
            .close(0u32.into(), b"the client's deadline passed");
        self.fail(ClientError::DeadlinePassed)
    }

    /// Marks the channel broken by `error` (the first cause is kept), and returns the error.
    fn fail(&mut self, error: ClientError) -> ClientError {
        self.tracker.disconnect();
        let message = match &error {
            ClientError::Protocol(why) => ClientError::Protocol(why.clone()),
            ClientError::Disconnected(why) => ClientError::Disconnected(why.clone()),
            ClientError::Refused(why) => ClientError::Refused(why.clone()),
            ClientError::DeadlinePassed => ClientError::DeadlinePassed,
            other => ClientError::Disconnected(other.to_string()),
        };
        self.broken.get_or_insert(message);
        error
    }
}

/// Encodes `request` as `id` onto `out`; the encoder of its data, if it streams any.
fn encode(
    id: RequestId,
    request: &Request,
    out: &mut Vec<u8>,
) -> Result<Option<DataEncoder>, ClientError> {
    encode_request(id, request, out)
        .map_err(|err| ClientError::Setup(format!("cannot encode {}: {err}", request.opcode())))
}

/// A data frame: `chunk` (at most `MAX_CHUNK` bytes) behind its header, copied into a frame of
/// its own for the runtime's thread to write.
fn data_frame(encoder: &mut DataEncoder, chunk: &[u8]) -> Result<Bytes, ClientError> {
    let header = encoder
        .chunk_header(chunk.len())
        .map_err(|err| ClientError::Setup(err.to_string()))?;
    let mut frame = BytesMut::with_capacity(header.len() + chunk.len());
    frame.extend_from_slice(&header);
    frame.extend_from_slice(chunk);
    Ok(frame.freeze())
}

const LOST_READ: &str = "a read from the node was lost";
const LOST_WRITE: &str = "a write to the node was lost";

fn client_decoder() -> Decoder {
    Decoder::for_client(DecoderConfig {
        max_stream_bytes: MAX_REPLY_DATA,
    })
}

/// Why a read from the stream stopped before what it waited for came.
enum Stop {
    /// The node finished the stream.
    Ended,
    Read(quinn::ReadError),
    GoAway(tasklet_wire::ErrorReply),
    /// The node broke the protocol.
    Protocol(String),
}

/// The most pieces a bulk read takes from quinn at once. Each piece is what one packet carried,
/// and each take locks the connection's state, which its driver holds while it handles the next
/// packets: a piece at a time, a 256 MiB read takes that lock about 40,000 times.
const READ_BATCH: usize = 32;

/// The part of a channel a bulk read takes to the runtime's thread, and brings back.
struct Bulk {
    recv: quinn::RecvStream,
    decoder: Decoder,
    /// Bytes read and not yet decoded.
    pending: Bytes,
    /// Pieces taken from quinn after `pending`, not yet decoded: `pieces[next..taken]`.
    pieces: [Bytes; READ_BATCH],
    next: usize,
    taken: usize,
    /// Whether the reply itself is still to come (a branch's read, see `spread`), rather than
    /// only its data.
    awaiting_reply: bool,
    /// Which of several reads at once this is, as the calling thread is told.
    index: usize,
}

/// What a bulk read hands the calling thread: the reply, when the read began before it, and then
/// the data of the frames decoded, as slices of what quinn read (no copy on the runtime's
/// thread), in batches.
enum Handed {
    Reply(RequestId, Reply),
    Data(Vec<Bytes>),
}

impl Bulk {
    fn new(recv: quinn::RecvStream, decoder: Decoder, pending: Bytes, index: usize) -> Bulk {
        Bulk {
            recv,
            decoder,
            pending,
            pieces: Default::default(),
            next: 0,
            taken: 0,
            awaiting_reply: false,
            index,
        }
    }

    /// Decodes data frames (the reply before them, if it is awaited), handing what they carry
    /// over, until the reply's data has all come.
    async fn run(
        mut self,
        out: tokio::sync::mpsc::Sender<(usize, Handed)>,
    ) -> (Bulk, Result<(), Stop>) {
        let outcome = self.read(&out).await;
        // What came after the reply's data, for the channel's next reply: rarely more than the
        // rest of one piece.
        if self.next < self.taken {
            let mut rest = BytesMut::from(&self.pending[..]);
            for piece in &mut self.pieces[self.next..self.taken] {
                rest.extend_from_slice(&std::mem::take(piece));
            }
            self.pending = rest.freeze();
            self.next = self.taken;
        }
        (self, outcome)
    }

    async fn read(&mut self, out: &tokio::sync::mpsc::Sender<(usize, Handed)>) -> Result<(), Stop> {
        let mut batch = Vec::new();
        let mut batched = 0;
        loop {
            while !self.pending.is_empty() {
                let (used, event) = self
                    .decoder
                    .decode(&self.pending)
                    .map_err(|err| Stop::Protocol(err.to_string()))?;
                let done = match event {
                    None => false,
                    Some(Event::Reply { request_id, reply }) if self.awaiting_reply => {
                        self.awaiting_reply = false;
                        let streamed = reply.streamed().map_or(0, |(_, len)| len);
                        let reply = Handed::Reply(request_id, reply);
                        // The calling thread is gone only when the read was abandoned.
                        if out.send((self.index, reply)).await.is_err() {
                            return Ok(());
                        }
                        streamed == 0
                    }
                    Some(Event::Data {
                        bytes, remaining, ..
                    }) => {
                        // A data event borrows the start of what was fed: share it, not copy it.
                        let piece = if bytes.as_ptr() == self.pending.as_ptr() {
                            self.pending.slice(..bytes.len())
                        } else {
                            Bytes::copy_from_slice(bytes)
                        };
                        batched += piece.len();
                        batch.push(piece);
                        remaining == 0
                    }
                    Some(Event::GoAway(error)) => return Err(Stop::GoAway(error)),
                    // A reply's data is all data frames until its last byte.
                    Some(Event::Reply { .. } | Event::Request { .. }) => {
                        return Err(Stop::Protocol(
                            "a message in the middle of a reply's data".into(),
                        ))
                    }
                };
                self.pending.advance(used);
                if !batch.is_empty() && (done || batched >= HAND_OVER_BYTES) {
                    let data = Handed::Data(std::mem::take(&mut batch));
                    if out.send((self.index, data)).await.is_err() {
                        return Ok(());
                    }
                    batched = 0;
                }
                if done {
                    return Ok(());
                }
            }
            if self.next < self.taken {
                self.pending = std::mem::take(&mut self.pieces[self.next]);
                self.next += 1;
                continue;
            }
            match self.recv.read_chunks(&mut self.pieces).await {
                Ok(Some(taken)) => {
                    tracing::trace!(name: "read", target: crate::TIMELINE, "");
                    (self.next, self.taken) = (0, taken);
                }
                Ok(None) => return Err(Stop::Ended),
                Err(err) => return Err(Stop::Read(err)),
            }
        }
    }
}
