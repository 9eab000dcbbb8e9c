//! The client's book of requests in flight: it picks request ids, matches each reply to its
//! request, and knows which pipelined ops (LAUNCH, MEM_WRITE) are still waiting for a barrier
//! (SYNC, MEM_READ) to report on them.
//!
//! Pipelined ops get no reply. Each is held per session until the session's next barrier is sent;
//! that barrier then *covers* them, and its reply settles them all: an OK reply means they all
//! succeeded, a failed one may name the one that failed (ops after it may not have run). A
//! SESSION_CLOSE covers them too, but reports nothing about them.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use crate::ids::SessionId;
use crate::message::{Reply, Request};
use crate::opcode::Opcode;
use crate::status::FailedOp;
use crate::RequestId;

/// The most ids a [`ClientTracker`] keeps in use at once, whatever it is asked for: far fewer
/// than there are ids, so a free one is always near.
pub const MAX_TRACKED: usize = 1 << 20;

/// Hashes the tracker's keys: request ids it picked itself (one after another) and session ids
/// (the node's, one per session the client opened). A multiply by the golden ratio rather than
/// SipHash: the peer cannot make the tracker insert keys of its choosing beyond the sessions the
/// client asked for, so it needs no defence against chosen keys, and every pipelined op inserts
/// and removes an id (SipHash made that a third of a pipelined launch's time in the client).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(byte));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type Ids = BuildHasherDefault<IdHasher>;

/// A pipelined op sent and not yet settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PostedOp {
    pub request_id: RequestId,
    pub opcode: Opcode,
    pub session: SessionId,
}

/// A reply that does not fit what was sent: the peer is broken, and the connection should close.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrackError {
    #[error("{limit} requests are already in flight")]
    TooManyOutstanding { limit: usize },
    #[error("{opcode} has no session")]
    NoSession { opcode: Opcode },
    #[error("reply to request {request_id}, which is not awaiting a reply")]
    UnknownRequest { request_id: RequestId },
    #[error("reply to request {request_id} is for {got}, but the request was {expected}")]
    OpcodeMismatch {
        request_id: RequestId,
        expected: Opcode,
        got: Opcode,
    },
    #[error("reply to request {request_id} announces {got} bytes, but {expected} were asked for")]
    LengthMismatch {
        request_id: RequestId,
        expected: u64,
        got: u64,
    },
    #[error("reply to request {request_id} names request {} as failed, which it does not cover", failed.request_id)]
    UnknownFailedOp {
        request_id: RequestId,
        failed: FailedOp,
    },
}

/// What a reply settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The opcode of the request answered.
    pub opcode: Opcode,
    /// The pipelined ops this reply settles, in the order they were sent (a barrier's or a
    /// SESSION_CLOSE's reply; empty otherwise).
    pub settled: Vec<PostedOp>,
    /// The one of `settled` the reply names as failed.
    pub failed: Option<PostedOp>,
}

#[derive(Debug)]
struct Call {
    opcode: Opcode,
    /// Bytes the reply must announce, where the request fixed them.
    expected_len: Option<u64>,
    covers: Vec<PostedOp>,
}

/// Request ids and replies of one connection, client side. No I/O and no clocks: deadlines are
/// the caller's, who ends calls that take too long by dropping the connection ([`ClientTracker::disconnect`]).
#[derive(Debug)]
pub struct ClientTracker {
    limit: usize,
    last_id: RequestId,
    calls: HashMap<RequestId, Call, Ids>,
    unsynced: HashMap<SessionId, Vec<PostedOp>, Ids>,
    /// Every id a reply or a barrier may still name: those of `calls`, of `unsynced` and of the
    /// ops the calls cover. Never reused while in here.
    in_use: HashSet<RequestId, Ids>,
}

impl ClientTracker {
    /// A tracker allowing at most `limit` ids in use at once: calls awaiting a reply plus
    /// pipelined ops not yet settled.
    /// `limit` is capped at [`MAX_TRACKED`].
    pub fn new(limit: usize) -> ClientTracker {
        ClientTracker {
            limit: limit.min(MAX_TRACKED),
            last_id: 0,
            calls: HashMap::default(),
            unsynced: HashMap::default(),
            in_use: HashSet::default(),
        }
    }

    /// Records `request` as sent and returns the id to send it with. Ids start at 1, go up, skip
    /// 0 (GOAWAY's) and any still in use.
    pub fn start(&mut self, request: &Request) -> Result<RequestId, TrackError> {
        if self.in_use.len() >= self.limit {
            return Err(TrackError::TooManyOutstanding { limit: self.limit });
        }
        let opcode = request.opcode();
        let session = request.session();
        if opcode.is_pipelined() && session.is_none() {
            return Err(TrackError::NoSession { opcode });
        }
        let request_id = self
            .next_free_id()
            .ok_or(TrackError::TooManyOutstanding { limit: self.limit })?;
        // A fork marker is never answered nor named by a reply: its id is free again at once.
        if opcode.is_fork_marker() {
            return Ok(request_id);
        }
        self.in_use.insert(request_id);
        if opcode.is_pipelined() {
            if let Some(session) = session {
                self.unsynced.entry(session).or_default().push(PostedOp {
                    request_id,
                    opcode,
                    session,
                });
            }
            return Ok(request_id);
        }
        let covers = match (
            opcode.is_barrier() || opcode == Opcode::SessionClose,
            session,
        ) {
            (true, Some(session)) => self.unsynced.remove(&session).unwrap_or_default(),
            _ => Vec::new(),
        };
        let expected_len = match request {
            Request::MemRead { len, .. } | Request::StreamRead { len, .. } => Some(*len),
            Request::GpuSubmit(submit) => Some(submit.output_size),
            _ => None,
        };
        self.calls.insert(
            request_id,
            Call {
                opcode,
                expected_len,
                covers,
            },
        );
        Ok(request_id)
    }

    /// Matches `reply` to request `request_id`. On error nothing changes.
    pub fn complete(
        &mut self,
        request_id: RequestId,
        reply: &Reply,
    ) -> Result<Completion, TrackError> {
        let call = self
            .calls
            .get(&request_id)
            .ok_or(TrackError::UnknownRequest { request_id })?;
        let got = reply.opcode();
        if got != call.opcode {
            return Err(TrackError::OpcodeMismatch {
                request_id,
                expected: call.opcode,
                got,
            });
        }
        if let (Some(expected), Some((_, got))) = (call.expected_len, reply.streamed()) {
            if expected != got {
                return Err(TrackError::LengthMismatch {
                    request_id,
                    expected,
                    got,
                });
            }
        }
        let failed = match reply {
            Reply::Error { error, .. } => error.failed_op,
            _ => None,
        };
        let failed = match failed {
            None => None,
            Some(named) => {
                let covered = call
                    .covers
                    .iter()
                    .find(|op| op.request_id == named.request_id && op.opcode == named.opcode);
                Some(*covered.ok_or(TrackError::UnknownFailedOp {
                    request_id,
                    failed: named,
                })?)
            }
        };
        let Some(call) = self.calls.remove(&request_id) else {
            return Err(TrackError::UnknownRequest { request_id });
        };
        self.in_use.remove(&request_id);
        for op in &call.covers {
            self.in_use.remove(&op.request_id);
        }
        Ok(Completion {
            opcode: call.opcode,
            settled: call.covers,
            failed,
        })
    }

    /// Calls awaiting a reply.
    pub fn awaiting_reply(&self) -> usize {
        self.calls.len()
    }

    /// The pipelined ops of `session` that no barrier covers yet, in the order they were sent.
    pub fn unsynced(&self, session: SessionId) -> &[PostedOp] {
        self.unsynced.get(&session).map_or(&[], Vec::as_slice)
    }

    /// Drops the unsynced ops of a session that ended without a barrier (e.g. its lease was
    /// released), returning them: nothing will report on them.
    pub fn forget_session(&mut self, session: SessionId) -> Vec<PostedOp> {
        let ops = self.unsynced.remove(&session).unwrap_or_default();
        for op in &ops {
            self.in_use.remove(&op.request_id);
        }
        ops
    }

    /// The connection is gone: every call awaiting a reply and every unsettled pipelined op
    /// failed with *disconnected*. Returns their ids, ascending; the tracker is empty after.
    pub fn disconnect(&mut self) -> Vec<RequestId> {
        let mut ids: Vec<RequestId> = self.in_use.drain().collect();
        ids.sort_unstable();
        self.calls.clear();
        self.unsynced.clear();
        ids
    }

    fn next_free_id(&mut self) -> Option<RequestId> {
        // Among `in_use.len() + 2` consecutive candidates at most one is 0 and at most
        // `in_use.len()` are taken, so one is free (`limit` keeps in_use far below 2^32).
        for _ in 0..self.in_use.len() + 2 {
            self.last_id = self.last_id.wrapping_add(1);
            if self.last_id != 0 && !self.in_use.contains(&self.last_id) {
                return Some(self.last_id);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_wrap_past_0_and_skip_those_in_use() {
        let mut tracker = ClientTracker::new(8);
        tracker.last_id = u32::MAX - 1;
        tracker.in_use.extend([u32::MAX, 1, 2]);
        assert_eq!(tracker.next_free_id(), Some(3));
    }

    #[test]
    fn the_limit_is_capped() {
        assert_eq!(ClientTracker::new(usize::MAX).limit, MAX_TRACKED);
    }
}
