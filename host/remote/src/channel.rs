//! One stream to a node, driven synchronously: requests go out (pipelined ones gathered and sent
//! together), replies and their data come back, the wire crate's tracker matching the two.
//!
//! The calling thread does the I/O itself, inside the client's runtime (`block_on`); the
//! runtime's own thread keeps the connection alive (keep-alives, acknowledgements) between calls.

use crate::connect::lost;
use crate::error::ClientError;
use bytes::{Buf, Bytes};
use std::sync::Arc;
use tasklet_wire::limits::MAX_CHUNK;
use tasklet_wire::tracker::MAX_TRACKED;
use tasklet_wire::{
    encode_request, ClientTracker, Decoder, DecoderConfig, Event, Reply, Request, RequestId,
};
use tokio::runtime::Runtime;

/// Pipelined frames wait in the client until this many bytes of them are gathered, or a request
/// that needs an answer goes out: many launches then cost one write.
const GATHER_BYTES: usize = 64 << 10;

/// The most a reply may stream (a read into a 4 GiB linear memory).
const MAX_REPLY_DATA: u64 = 1 << 32;

/// The most bytes read from the stream at once.
const READ_CHUNK: usize = 1 << 20;

pub(crate) struct Channel {
    runtime: Arc<Runtime>,
    connection: quinn::Connection,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    decoder: Decoder,
    /// Bytes read and not yet decoded.
    pending: Bytes,
    tracker: ClientTracker,
    /// Pipelined frames not yet written.
    gathered: Vec<u8>,
    /// Why the channel can no longer be used, once it cannot.
    broken: Option<ClientError>,
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
            send,
            recv,
            decoder: Decoder::for_client(DecoderConfig {
                max_stream_bytes: MAX_REPLY_DATA,
            }),
            pending: Bytes::new(),
            tracker: ClientTracker::new(MAX_TRACKED),
            gathered: Vec::new(),
            broken: None,
        }
    }

    pub fn connection(&self) -> &quinn::Connection {
        &self.connection
    }

    /// Sends a pipelined request (LAUNCH, or a MEM_WRITE with `data`); it gets no reply.
    pub fn post(&mut self, request: &Request, data: &[u8]) -> Result<RequestId, ClientError> {
        self.usable()?;
        let id = self.tracker.start(request).map_err(|err| {
            ClientError::Setup(format!("cannot send {}: {err}", request.opcode()))
        })?;
        // An op that cannot be encoded was never sent; the id it took is settled by the
        // session's next barrier like any other.
        let mut data_encoder = encode_request(id, request, &mut self.gathered).map_err(|err| {
            ClientError::Setup(format!("cannot encode {}: {err}", request.opcode()))
        })?;
        if let Some(encoder) = data_encoder.as_mut() {
            if data.len() + self.gathered.len() <= GATHER_BYTES {
                encoder
                    .encode(data, &mut self.gathered)
                    .map_err(|err| ClientError::Setup(err.to_string()))?;
            } else {
                // Large data goes straight to the stream, a header before each chunk.
                self.flush()?;
                for chunk in data.chunks(MAX_CHUNK as usize) {
                    let header = encoder
                        .chunk_header(chunk.len())
                        .map_err(|err| ClientError::Setup(err.to_string()))?;
                    self.write(&header)?;
                    self.write(chunk)?;
                }
            }
        }
        if self.gathered.len() >= GATHER_BYTES {
            self.flush()?;
        }
        Ok(id)
    }

    /// Sends a request and waits for its reply, and the reply's data if it streams any. A
    /// failed reply is [`ClientError::Failed`].
    pub fn call(&mut self, request: &Request) -> Result<(Reply, Vec<u8>), ClientError> {
        self.usable()?;
        let id = self.tracker.start(request).map_err(|err| {
            ClientError::Setup(format!("cannot send {}: {err}", request.opcode()))
        })?;
        if let Err(err) = encode_request(id, request, &mut self.gathered) {
            return Err(ClientError::Setup(format!(
                "cannot encode {}: {err}",
                request.opcode()
            )));
        }
        self.flush()?;
        let (reply, data) = self.await_reply(id)?;
        match reply {
            Reply::Error { opcode, error } => Err(ClientError::Failed { opcode, error }),
            reply => Ok((reply, data)),
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
        let (reply, data) = self.await_reply(id)?;
        match reply {
            Reply::Error { opcode, error } => Err(ClientError::Failed { opcode, error }),
            reply => Ok((reply, data)),
        }
    }

    fn usable(&self) -> Result<(), ClientError> {
        match &self.broken {
            None => Ok(()),
            Some(ClientError::Protocol(why)) => Err(ClientError::Protocol(why.clone())),
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
        let frames = std::mem::take(&mut self.gathered);
        let result = self.write(&frames);
        self.gathered = frames;
        self.gathered.clear();
        result
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        let written = self.runtime.block_on(self.send.write_all(bytes));
        written.map_err(|err| {
            let why = match err {
                quinn::WriteError::ConnectionLost(lost_err) => lost(&lost_err),
                other => other.to_string(),
            };
            self.fail(ClientError::Disconnected(why))
        })
    }

    /// Reads until the reply to `id` and all of its data have come.
    fn await_reply(&mut self, id: RequestId) -> Result<(Reply, Vec<u8>), ClientError> {
        let mut reply: Option<Reply> = None;
        let mut data = Vec::new();
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
                            data.reserve_exact(usize::try_from(streamed).unwrap_or(0));
                        }
                        streamed == 0
                    }
                    Some(Event::Data {
                        bytes, remaining, ..
                    }) => {
                        data.extend_from_slice(bytes);
                        remaining == 0
                    }
                    Some(Event::GoAway(error)) => {
                        let why = format!("the node closed the connection: {error}");
                        return Err(self.fail(ClientError::Disconnected(why)));
                    }
                    Some(Event::Request { .. }) => {
                        return Err(self.protocol("a request sent to the client".into()));
                    }
                };
                self.pending.advance(used);
                if done {
                    if let Some(reply) = reply.take() {
                        return Ok((reply, data));
                    }
                }
            }
            let chunk = self
                .runtime
                .block_on(self.recv.read_chunk(READ_CHUNK, true));
            match chunk {
                Ok(Some(chunk)) => self.pending = chunk.bytes,
                Ok(None) => {
                    let why = "the node ended the stream".to_owned();
                    return Err(self.fail(ClientError::Disconnected(why)));
                }
                Err(err) => {
                    let why = match err {
                        quinn::ReadError::ConnectionLost(err) => {
                            return Err(self.fail(crate::connect::refusal_or_loss(&err)))
                        }
                        other => other.to_string(),
                    };
                    return Err(self.fail(ClientError::Disconnected(why)));
                }
            }
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

    /// Marks the channel broken by `error` (the first cause is kept), and returns the error.
    fn fail(&mut self, error: ClientError) -> ClientError {
        self.tracker.disconnect();
        let message = match &error {
            ClientError::Protocol(why) => ClientError::Protocol(why.clone()),
            ClientError::Disconnected(why) => ClientError::Disconnected(why.clone()),
            ClientError::Refused(why) => ClientError::Refused(why.clone()),
            other => ClientError::Disconnected(other.to_string()),
        };
        self.broken.get_or_insert(message);
        error
    }
}
