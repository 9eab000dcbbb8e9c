//! One bidirectional stream of a connection: its requests decoded in order and queued for the
//! GPU thread (deploy requests for the stream's deploy lane), MEM_WRITE data cut into pieces as
//! it arrives, replies written back.
//!
//! Malformed bytes end the connection: the stream's writer sends GOAWAY (`PROTOCOL_ERROR`, naming
//! the cause) and closes it. So does a client that stops in the middle of a frame for longer than
//! the stall timeout.

use super::deploy::{self, DeployRequest, Intake, Lane};
use super::forks::{self, Forks};
use super::hot::{ConnectionHot, Hot};
use super::{QUEUE_BYTES, STAGING_PIECE};
use crate::caller::Caller;
use crate::job::{Batch, Job, ReplyTo, Work, WritePiece};
use crate::metrics::PerOp;
use crate::outlet::outlet;
use crate::reply_budget::ReplyBudget;
use crate::shared::{Phase, Shared, Unanswered};
use bytes::Bytes;
use prometheus::IntCounter;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tasklet_wire::{
    BufferId, Decoder, DecoderConfig, ErrorCode, ErrorReply, Event, Opcode, Request, RequestId,
    SessionId,
};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// The most pieces of the stream taken from quinn at once. Each piece is what one packet carried
/// (up to a datagram's worth), and each take locks the connection's state, which its driver
/// holds while it handles the next packets: a bulk transfer read a piece at a time takes that
/// lock about 40,000 times for 256 MiB.
const READ_BATCH: usize = 32;

/// MEM_WRITE data is handed to the GPU thread in pieces of this size (the last one shorter):
/// large enough that a piece costs the worker one copy, small enough that a transfer streams.
const WRITE_PIECE: usize = STAGING_PIECE;

pub(crate) struct Stream {
    pub shared: Arc<Shared>,
    pub caller: Arc<Caller>,
    pub connection: quinn::Connection,
    pub send: quinn::SendStream,
    pub recv: quinn::RecvStream,
    pub jobs: mpsc::Sender<Batch>,
    pub budget: Arc<Semaphore>,
    /// The connection's queued reply bytes (see `reply_budget`).
    pub replies: Arc<ReplyBudget>,
    /// Set once the connection is condemned: its GPU thread then serves nothing more.
    pub closed: Arc<AtomicBool>,
    /// Whether one of the connection's streams keeps a runtime thread awake (see `hot`).
    pub hot: ConnectionHot,
    /// The connection's forks (see `forks`).
    pub forks: Arc<Forks>,
}

/// A MEM_WRITE (or STREAM_WRITE) whose data is arriving.
struct Writing {
    request_id: RequestId,
    /// STREAM_WRITE's stream; `None` for a MEM_WRITE.
    stream: Option<u64>,
    session: SessionId,
    buffer: BufferId,
    /// Where the next piece goes in the buffer.
    offset: u64,
    /// The write's bytes from `offset` on, this piece's among them.
    rest: u64,
    /// Shared with its pieces (see `WritePiece::refused`).
    refused: Arc<AtomicBool>,
    /// The piece being gathered: its bytes as read, and their length.
    chunks: Vec<Bytes>,
    piece_len: usize,
    first: bool,
}

pub(crate) async fn serve(stream: Stream) {
    let Stream {
        shared,
        caller,
        connection,
        send,
        mut recv,
        jobs,
        budget,
        replies,
        closed,
        hot,
        forks,
    } = stream;
    let hot = Hot::new(hot);
    let (reply, writer) = outlet(connection.clone(), send, Arc::clone(&hot.written), replies);
    let writer = tokio::spawn(writer.run());
    let mut reader = Reader {
        shared: Arc::clone(&shared),
        caller: Arc::clone(&caller),
        connection: connection.clone(),
        decoder: Decoder::for_node(DecoderConfig {
            max_stream_bytes: shared.limits.max_stream_bytes,
        }),
        jobs,
        batch: Vec::new(),
        unanswered: None,
        budget,
        reply: reply.clone(),
        writing: None,
        intake: None,
        lane: None,
        requests: PerOp::new(),
        hot,
        calls: false,
        gathering: None,
        forks,
        branch: None,
    };
    let mut phase = shared.phase();
    // A stopping node reads no more requests: the stream's writer then sends what was answered,
    // finishes the stream and waits for the client to have it (`outlet`), before the connection
    // is closed.
    let read = tokio::select! {
        read = reader.read_all(&mut recv) => read,
        _ = phase.wait_for(|p| *p == Phase::Stopping) => Ok(()),
    };
    if let Err(error) = read {
        // Nothing later on the connection is trusted: its queued and later requests, on every
        // stream, are dropped from here, not served in the close's grace.
        closed.store(true, Ordering::Release);
        caller.metrics.protocol_errors.inc();
        tracing::warn!(remote = %connection.remote_address(), "closing a connection: {}", error.message);
        reply.close_async(error).await;
    }
    drop(reader);
    drop(reply);
    let _ = writer.await;
}

struct Reader {
    shared: Arc<Shared>,
    caller: Arc<Caller>,
    connection: quinn::Connection,
    decoder: Decoder,
    jobs: mpsc::Sender<Batch>,
    /// Jobs decoded from the current read, not yet handed to the GPU thread.
    batch: Vec<Job>,
    /// Counts the batch's requests as unanswered from the moment each is taken.
    unanswered: Option<Unanswered>,
    budget: Arc<Semaphore>,
    reply: ReplyTo,
    writing: Option<Writing>,
    /// A deploy request whose data is arriving.
    intake: Option<Intake>,
    /// The stream's deploy lane, started by its first deploy request.
    lane: Option<Lane>,
    requests: PerOp<IntCounter>,
    /// Keeps a runtime thread awake for the reply to a call (see `hot`).
    hot: Hot,
    /// Whether the batch holds a request that is answered (anything but a pipelined op: LAUNCH,
    /// MEM_WRITE and their stream forms).
    calls: bool,
    /// The queue budget a frame body the decoder is gathering holds, from its first read to the
    /// read that completes it: the decoder keeps those bytes until the frame is whole, so a
    /// client that starts large frames on many streams and never ends them cannot make the node
    /// hold more than the budget.
    gathering: Option<OwnedSemaphorePermit>,
    forks: Arc<Forks>,
    /// The fork whose branch this stream is carrying, between its BRANCH and BRANCH_END.
    branch: Option<u64>,
}

impl Reader {
    /// Reads until the stream or the connection ends; a protocol error is returned, to be sent
    /// as GOAWAY. A connection that is gone is no error here.
    async fn read_all(&mut self, recv: &mut quinn::RecvStream) -> Result<(), ErrorReply> {
        let stall = self.shared.limits.stall_timeout;
        let mut pieces: [Bytes; READ_BATCH] = Default::default();
        loop {
            // Between frames a client may be quiet as long as it likes (QUIC's idle timeout
            // watches the connection); inside one, only for the stall timeout.
            let mid_frame = self.decoder.finish().is_err();
            let read = recv.read_chunks(&mut pieces);
            let taken = if mid_frame {
                match tokio::time::timeout(stall, read).await {
                    Ok(read) => read,
                    Err(_) => {
                        return Err(protocol_error(format!(
                            "the client stopped in the middle of a frame for {}s",
                            stall.as_secs_f64()
                        )))
                    }
                }
            } else {
                read.await
            };
            match taken {
                Ok(Some(count)) => {
                    tracing::trace!(name: "read", target: crate::TIMELINE, "");
                    self.feed(&mut pieces[..count]).await?
                }
                // A branch left open would hold its FORK's stream for the connection's life.
                Ok(None) | Err(quinn::ReadError::Reset(_)) if self.branch.is_some() => {
                    return Err(protocol_error(format!(
                        "the stream ended inside a branch of fork {}",
                        self.branch.unwrap_or_default()
                    )))
                }
                Ok(None) => {
                    return self
                        .decoder
                        .finish()
                        .map_err(|err| protocol_error(err.to_string()))
                }
                // A stream the client reset between frames is gone: nothing to answer. Reset
                // inside a frame, or with a message's data still due, it is malformed as a
                // stream that ends there is: a pipelined op cut short must not pass for done
                // at the next barrier.
                Err(quinn::ReadError::Reset(code)) => {
                    return self.decoder.finish().map_err(|err| {
                        protocol_error(format!("{err} (the client reset it, code {code})"))
                    })
                }
                // The connection is gone: nothing to answer.
                Err(_) => return Ok(()),
            }
        }
    }

    /// Decodes one read's pieces, handing the GPU thread what each held as a batch of its own
    /// (it starts on the first of a thousand pipelined launches while the reader decodes the
    /// rest; a piece that completes no request hands over nothing). The pieces are taken, each
    /// share of quinn's buffers let go as soon as it is decoded.
    async fn feed(&mut self, pieces: &mut [Bytes]) -> Result<(), ErrorReply> {
        for piece in pieces {
            let piece = std::mem::take(piece);
            let fed = self.decode(&piece).await;
            // What came before a malformed frame is served, as it would have been frame by
            // frame.
            self.hand_over().await;
            fed?;
        }
        Ok(())
    }

    async fn decode(&mut self, bytes: &Bytes) -> Result<(), ErrorReply> {
        let mut input = &bytes[..];
        while !input.is_empty() {
            let (used, event) = self
                .decoder
                .decode(input)
                .map_err(|err| protocol_error(err.to_string()))?;
            input = &input[used..];
            match event {
                None => {
                    if let (None, Some(len)) = (&self.gathering, self.decoder.body_pending()) {
                        self.gathering = self.take_budget(len as usize).await;
                    }
                }
                Some(Event::Request {
                    request_id,
                    request,
                }) => {
                    // The request now holds its bytes itself (see `queue`).
                    self.gathering = None;
                    self.request(request_id, request).await?
                }
                Some(Event::Data {
                    bytes: data,
                    remaining,
                    ..
                }) => self.data(shared(bytes, data), remaining).await?,
                // A node's decoder yields requests and their data only.
                Some(Event::Reply { .. } | Event::GoAway(_)) => {
                    return Err(protocol_error("a reply sent to the node".into()))
                }
            }
        }
        Ok(())
    }

    async fn request(&mut self, request_id: RequestId, request: Request) -> Result<(), ErrorReply> {
        let opcode = request.opcode();
        let (shared, tenant) = (&self.shared, self.caller.tenant.as_str());
        self.requests
            .get(opcode, || shared.metrics.requests(tenant, opcode))
            .inc();
        if opcode.is_fork_marker() {
            return self.fork_marker(request).await;
        }
        let request = match DeployRequest::try_from(request) {
            Ok(deploy) => return self.deploy(request_id, opcode, deploy).await,
            Err(request) => request,
        };
        let stream = match &request {
            Request::StreamWrite { stream, .. } => Some(*stream),
            _ => None,
        };
        match (&request, request.streamed()) {
            (
                Request::MemWrite {
                    session,
                    buffer,
                    offset,
                    len,
                }
                | Request::StreamWrite {
                    session,
                    buffer,
                    offset,
                    len,
                    ..
                },
                Some((_, streamed)),
            ) if streamed > 0 => {
                self.writing = Some(Writing {
                    request_id,
                    stream,
                    session: *session,
                    buffer: *buffer,
                    offset: *offset,
                    rest: *len,
                    chunks: Vec::new(),
                    piece_len: 0,
                    first: true,
                    refused: Arc::default(),
                });
                Ok(())
            }
            _ => {
                let bytes = payload_bytes(&request);
                self.queue(request_id, Work::Request(request), bytes).await
            }
        }
    }

    /// FORK, BRANCH or BRANCH_END (see `forks`): what this stream read before goes to the GPU
    /// thread first; then a FORK waits for its branches, a BRANCH for its FORK.
    async fn fork_marker(&mut self, request: Request) -> Result<(), ErrorReply> {
        self.greeted_before(request.opcode())?;
        self.hand_over().await;
        let waited = match (request, self.branch) {
            (Request::Fork { .. }, Some(open)) => {
                return Err(protocol_error(format!(
                    "FORK inside a branch of fork {open}"
                )))
            }
            (Request::Fork { fork, branches }, None) => {
                self.forks.fork(fork, branches, &self.connection).await
            }
            (Request::Branch { .. }, Some(open)) => {
                return Err(protocol_error(format!(
                    "BRANCH inside a branch of fork {open}"
                )))
            }
            (Request::Branch { fork }, None) => {
                let waited = self.forks.branch(fork, &self.connection).await;
                self.branch = Some(fork);
                waited
            }
            (Request::BranchEnd { fork }, Some(open)) if open == fork => {
                self.forks.branch_end(fork);
                self.branch = None;
                Ok(())
            }
            (Request::BranchEnd { fork }, open) => {
                let inside = match open {
                    Some(open) => format!("inside a branch of fork {open}"),
                    None => "outside any branch".into(),
                };
                return Err(protocol_error(format!(
                    "BRANCH_END of fork {fork} {inside}"
                )));
            }
            (other, _) => {
                return Err(protocol_error(format!(
                    "{} is not a fork marker",
                    other.opcode()
                )))
            }
        };
        match waited {
            Ok(()) => Ok(()),
            Err(forks::Stop::Broken(why)) => Err(protocol_error(why)),
            // Nothing more is served; the stream ends with its connection.
            Err(forks::Stop::Closed) => Ok(()),
        }
    }

    /// Nothing but HELLO may come before HELLO's reply. The GPU thread checks the requests it
    /// serves; the stream checks those it serves itself (deploy requests, fork markers).
    fn greeted_before(&self, opcode: Opcode) -> Result<(), ErrorReply> {
        if self.caller.greeted() {
            return Ok(());
        }
        Err(protocol_error(format!(
            "{opcode} before HELLO's reply: HELLO is the first request of a connection"
        )))
    }

    /// Hands a deploy request to the stream's deploy lane (started by the first).
    async fn deploy(
        &mut self,
        request_id: RequestId,
        opcode: Opcode,
        request: DeployRequest,
    ) -> Result<(), ErrorReply> {
        // The GPU thread's jobs and the deploy lane's are not ordered with each other; what
        // came before on this stream is on its way to the GPU thread before this goes.
        self.hand_over().await;
        self.greeted_before(opcode)?;
        let (shared, caller) = (&self.shared, &self.caller);
        let connection = &self.connection;
        let lane = self.lane.get_or_insert_with(|| {
            Lane::start(Arc::clone(shared), Arc::clone(caller), connection.clone())
        });
        self.intake = deploy::accept(
            shared,
            caller,
            connection,
            lane,
            &self.budget,
            &self.reply,
            request_id,
            request,
        )
        .await;
        Ok(())
    }

    async fn data(&mut self, bytes: Bytes, remaining: u64) -> Result<(), ErrorReply> {
        if let Some(intake) = self.intake.as_mut() {
            intake.feed(&bytes).await;
            if remaining == 0 {
                if let (Some(intake), Some(lane)) = (self.intake.take(), self.lane.as_ref()) {
                    intake.finish(lane).await;
                }
            }
            return Ok(());
        }
        let mut rest = bytes;
        while !rest.is_empty() {
            // The decoder only yields data a request announced, and only MEM_WRITE's and
            // STREAM_WRITE's reach here (a deploy request's go to its intake).
            let Some(writing) = self.writing.as_mut() else {
                return Err(protocol_error("data without a request".into()));
            };
            let part = rest.split_to((WRITE_PIECE - writing.piece_len).min(rest.len()));
            writing.piece_len += part.len();
            writing.chunks.push(part);
            let last = remaining == 0 && rest.is_empty();
            if writing.piece_len < WRITE_PIECE && !last {
                continue;
            }
            let piece = WritePiece {
                stream: writing.stream,
                session: writing.session,
                buffer: writing.buffer,
                offset: writing.offset,
                rest: writing.rest,
                first: writing.first,
                refused: Arc::clone(&writing.refused),
                chunks: std::mem::take(&mut writing.chunks),
                len: std::mem::take(&mut writing.piece_len),
            };
            let (request_id, len) = (writing.request_id, piece.len);
            // A write whose end would pass the largest offset is refused at its first piece,
            // before anything is written: the later pieces' offsets are never used.
            writing.offset = writing.offset.wrapping_add(len as u64);
            writing.rest -= len as u64;
            writing.first = false;
            if last {
                self.writing = None;
            }
            self.queue(request_id, Work::WritePiece(piece), len).await?;
        }
        Ok(())
    }

    /// Adds a job to the batch for the GPU thread, first taking `bytes` of the connection's
    /// queue budget (so a client cannot queue more than that much payload however fast it
    /// sends).
    async fn queue(
        &mut self,
        request_id: RequestId,
        work: Work,
        bytes: usize,
    ) -> Result<(), ErrorReply> {
        let budget = match bytes {
            0 => None,
            // `None` only when the connection is being torn down: nothing more is served.
            _ => match self.take_budget(bytes).await {
                Some(permit) => Some(permit),
                None => return Ok(()),
            },
        };
        if let Work::Request(request) = &work {
            self.calls |= !request.opcode().is_pipelined();
        }
        match self.unanswered.as_mut() {
            Some(unanswered) => unanswered.one_more(),
            None => self.unanswered = Some(self.shared.taken()),
        }
        self.batch.push(Job {
            request_id,
            work,
            _budget: budget,
        });
        Ok(())
    }

    /// Takes `bytes` (at most the whole) of the connection's queue budget, waiting for it to
    /// come back where it is spent; `None` once the connection is closed.
    async fn take_budget(&mut self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let permits = u32::try_from(bytes.min(QUEUE_BYTES)).unwrap_or(u32::MAX);
        match Arc::clone(&self.budget).try_acquire_many_owned(permits) {
            Ok(permit) => Some(permit),
            Err(TryAcquireError::NoPermits) => {
                // The budget comes back as the GPU thread finishes jobs, this batch's among
                // them: it goes before waiting. A stalled client's frames that hold the rest
                // end the connection at the stall timeout.
                self.hand_over().await;
                tracing::trace!(name: "budget-wait", target: crate::TIMELINE, "");
                let connection = self.connection.clone();
                let permit = tokio::select! {
                    permit = Arc::clone(&self.budget).acquire_many_owned(permits) => permit.ok(),
                    // A closed connection's streams wait for nothing more.
                    _ = connection.closed() => None,
                };
                tracing::trace!(name: "budget-got", target: crate::TIMELINE, "");
                permit
            }
            Err(TryAcquireError::Closed) => None,
        }
    }

    /// Hands the batch to the GPU thread.
    async fn hand_over(&mut self) {
        let Some(unanswered) = self.unanswered.take() else {
            return;
        };
        let batch = Batch {
            jobs: std::mem::take(&mut self.batch),
            reply: self.reply.clone(),
            _unanswered: unanswered,
            branch: self.branch.is_some(),
        };
        let mark = self.hot.mark();
        // The GPU thread is gone only when the connection is.
        let _ = self.jobs.send(batch).await;
        tracing::trace!(name: "handed", target: crate::TIMELINE, "");
        if std::mem::take(&mut self.calls) {
            self.hot.keep_awake(mark, &self.reply);
        } else {
            self.hot.linger(&self.reply);
        }
    }
}

/// `part`, which the decoder borrowed from `whole`, as a share of `whole` rather than a copy.
fn shared(whole: &Bytes, part: &[u8]) -> Bytes {
    let start = (part.as_ptr() as usize).wrapping_sub(whole.as_ptr() as usize);
    match start.checked_add(part.len()) {
        Some(end) if start <= whole.len() && end <= whole.len() => whole.slice(start..end),
        _ => Bytes::copy_from_slice(part),
    }
}

/// Bytes a request carries beyond its fixed fields, counted against the connection's queue
/// budget: every request that holds a tenant's by-value arguments counts them in full, so that
/// pipelined launches, bursts and graph recordings cannot queue more than the budget between
/// them.
fn payload_bytes(request: &Request) -> usize {
    use tasklet_wire::{GraphArg, GraphOp};
    let graph_args = |args: &[GraphArg]| -> usize {
        args.iter()
            .map(|arg| match arg {
                GraphArg::Arg(arg) => arg_bytes(arg),
                GraphArg::Scalar(_) => FIXED_ARG_BYTES,
            })
            .sum()
    };
    match request {
        Request::ModuleLoad { ptx, .. } => ptx.len(),
        Request::GpuSubmit(submit) => submit.ptx.len() + submit.args.len(),
        Request::ModuleLoadSource { source, .. } => source.len(),
        Request::LaunchBurst(burst) => {
            burst.args.iter().map(arg_bytes).sum::<usize>()
                + burst
                    .changes
                    .iter()
                    .map(|(_, arg)| 4 + arg_bytes(arg))
                    .sum::<usize>()
                + 4 * burst.counts.len()
        }
        Request::Launch(launch) | Request::StreamLaunch { launch, .. } => {
            launch.args.iter().map(arg_bytes).sum()
        }
        Request::Graph(graph) => match &graph.op {
            GraphOp::Launch { args, .. } | GraphOp::SetArgs { args, .. } => graph_args(args),
            _ => 0,
        },
        _ => 0,
    }
}

/// What a fixed-size kernel argument counts: its value and tag, rounded up.
const FIXED_ARG_BYTES: usize = 16;

/// The bytes one kernel argument holds once decoded.
fn arg_bytes(arg: &tasklet_wire::KernelArg) -> usize {
    match arg {
        tasklet_wire::KernelArg::Bytes(bytes) => bytes.len(),
        tasklet_wire::KernelArg::Relocated { bytes, relocations } => {
            bytes.len() + std::mem::size_of_val(relocations.as_slice())
        }
        _ => FIXED_ARG_BYTES,
    }
}

fn protocol_error(message: String) -> ErrorReply {
    ErrorReply::new(ErrorCode::ProtocolError, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tasklet_wire::{
        Graph, GraphArg, GraphOp, KernelArg, Launch, LaunchBurst, ModuleId, SessionId,
    };

    const BIG: usize = 32 << 10;

    fn big() -> KernelArg {
        KernelArg::Bytes(vec![7; BIG])
    }

    fn graph(op: GraphOp) -> Request {
        Request::Graph(Graph {
            session: SessionId(1),
            graph: 2,
            op,
        })
    }

    /// Every request that carries by-value arguments counts them in full: a burst's changes and
    /// a graph's recorded launches as a launch's arguments do.
    #[test]
    fn by_value_arguments_count_in_full_wherever_they_come() {
        let launch = Request::Launch(Launch {
            session: SessionId(1),
            module: ModuleId(1),
            kernel: 0,
            grid: [1; 3],
            block: [1; 3],
            shared_mem_bytes: 0,
            args: vec![big(), KernelArg::U32(1)],
        });
        assert!(payload_bytes(&launch) >= BIG);

        let burst = Request::LaunchBurst(LaunchBurst {
            session: SessionId(1),
            module: ModuleId(1),
            kernel: 0,
            grid: [1; 3],
            block: [1; 3],
            shared_mem_bytes: 0,
            args: vec![KernelArg::U32(0)],
            changes: (0..100).map(|_| (0, big())).collect(),
            counts: vec![1; 100],
        });
        assert!(
            payload_bytes(&burst) >= 100 * BIG,
            "{}",
            payload_bytes(&burst)
        );

        let recorded = graph(GraphOp::Launch {
            module: ModuleId(1),
            kernel: 0,
            grid: [1; 3],
            block: [1; 3],
            shared_mem_bytes: 0,
            args: vec![GraphArg::Arg(big()), GraphArg::Scalar(0)],
        });
        assert!(payload_bytes(&recorded) >= BIG);
        let replaced = graph(GraphOp::SetArgs {
            node: 0,
            args: vec![GraphArg::Arg(big()), GraphArg::Arg(big())],
        });
        assert!(payload_bytes(&replaced) >= 2 * BIG);
        assert_eq!(payload_bytes(&graph(GraphOp::Replay { times: 3 })), 0);
    }
}
