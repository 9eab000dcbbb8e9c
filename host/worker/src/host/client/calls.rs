//! One request out and its answer back: the ring, the deadlines that queued kernels stretch, the
//! liveness checks, and what becomes of a worker whose answer does not come or cannot be right.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Worker;
use crate::contract::channel::{Answer, HostEnd, SendError, WaitError};
use crate::contract::codec::{decode_response, encode_request};
use crate::contract::{BackendKind, ErrorKind, Request, Response};
use crate::host::error::WorkerError;

/// How long past a kernel's deadline the host waits for the emulator to report the kernel's end
/// before it kills the worker: well inside the promise that a deadline ends a wait within 250 ms.
pub(super) const EMU_REPORT_SLACK: Duration = Duration::from_millis(100);

impl Worker {
    /// Posts the encoded frame: at once where the ring has room, without reading the clock; only a
    /// full ring, which must be waited on, needs a deadline.
    pub(super) fn post_frame(&mut self, op: &str) -> Result<(), WorkerError> {
        self.update_linger();
        let (posted, timeout) = match self.chan.try_post(&self.frame) {
            Ok(true) => return Ok(()),
            Ok(false) => {
                let now = Instant::now();
                let timeout = self.op_timeout.saturating_add(self.queued_for(now));
                // A full ring on the emulator past the queued kernels' bound: one of them overran.
                let (first, _) = self.first_deadline(self.limited(later(now, timeout)));
                let proc = &self.proc;
                (
                    self.chan.post(&self.frame, first, &mut || proc.poll()),
                    timeout,
                )
            }
            Err(e) => (Err(e), self.op_timeout),
        };
        match posted {
            Ok(()) => Ok(()),
            Err(SendError::TooLarge(e)) => Err(WorkerError::op(
                ErrorKind::InvalidArgument,
                format!("{op} request too large: {e}"),
            )),
            Err(SendError::Wait(w)) => Err(self.wait_failed(op, w, timeout)),
        }
    }

    /// How long one queued kernel may legitimately keep the worker busy.
    pub(super) fn launch_bound(&self, deadline: Duration) -> Duration {
        match self.backend {
            // The emulator's step limit only approximates the deadline (it assumes a speed,
            // `EMU_LANE_INSTRUCTIONS_PER_SECOND`, that a slow or busy machine does not reach), so
            // the host keeps the deadline itself, with a little room for the emulator to say so
            // first.
            BackendKind::Emu => deadline.saturating_add(EMU_REPORT_SLACK),
            BackendKind::Cuda => deadline,
        }
    }

    /// How much longer than `op_timeout` an op sent at `now` may legitimately take.
    pub(super) fn queued_for(&self, now: Instant) -> Duration {
        self.pending_until
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(now))
    }

    /// Whether the worker's answer to `req` means every launch before it has finished. On CUDA
    /// only for the requests the backend serves after waiting for the queued kernels: it answers
    /// a ping, an info, an attach or detach of guest memory at once, and may answer a module
    /// load or unload from its module cache without touching the device.
    pub(super) fn drains(&self, req: &Request<'_>) -> bool {
        match self.backend {
            BackendKind::Emu => true,
            // A copy told which launches it follows (`after`) waits for those alone.
            BackendKind::Cuda => matches!(
                req,
                Request::Sync
                    | Request::Alloc { .. }
                    | Request::Free { .. }
                    | Request::Write { after: None, .. }
                    | Request::Read { after: None, .. }
                    | Request::WriteFrom { after: None, .. }
                    | Request::ReadInto { after: None, .. }
                    | Request::Copy { .. }
                    | Request::Reset
            ),
        }
    }

    /// Whether the worker's answer to `req` means everything sent before it has run on the
    /// device and reported how it went: a sync, a reset, or a read that waited for the whole
    /// queue (the worker's stream is idle once it has copied the bytes back). A `sync` right
    /// after such an answer has nothing left to wait for (see [`Worker::sync`]). An empty read
    /// copies nothing, so its stream is not waited for: it settles nothing.
    fn settles(req: &Request<'_>) -> bool {
        match req {
            Request::Sync | Request::Reset => true,
            Request::Read {
                after: None, len, ..
            }
            | Request::ReadInto {
                after: None, len, ..
            } => *len > 0,
            _ => false,
        }
    }

    pub(super) fn call_ok(&mut self, req: &Request<'_>) -> Result<(), WorkerError> {
        match self.call(req, self.op_timeout)? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected(req.name(), &other)),
        }
    }

    /// One call with `timeout`, extended by the time queued kernels may still legitimately take
    /// (the call waits behind them in the ring, and most calls wait for them on the device).
    pub(super) fn call(
        &mut self,
        req: &Request<'_>,
        timeout: Duration,
    ) -> Result<Response, WorkerError> {
        self.call_answered(req, timeout, false)
            .map(|(resp, _)| resp)
    }

    /// [`Worker::call`], where `signalled` lets the completion word answer (then the response is
    /// `Ok`, not decoded from any frame).
    pub(super) fn call_answered(
        &mut self,
        req: &Request<'_>,
        timeout: Duration,
        signalled: bool,
    ) -> Result<(Response, Answer), WorkerError> {
        self.usable()?;
        self.update_linger();
        let now = Instant::now();
        let timeout = timeout.saturating_add(self.queued_for(now));
        let deadline = self.limited(later(now, timeout));
        let nothing_posted = self.nothing_posted;
        let id = self.encode(req);
        let (first, mark) = self.first_deadline(deadline);
        let proc = &self.proc;
        let seq = match self.chan.send(&self.frame, first, &mut || proc.poll()) {
            Ok(seq) => seq,
            Err(SendError::TooLarge(e)) => {
                return Err(WorkerError::op(
                    ErrorKind::InvalidArgument,
                    format!("{} request too large: {e}", req.name()),
                ))
            }
            Err(SendError::Wait(w)) => return Err(self.wait_failed(req.name(), w, timeout)),
        };
        let answered = self.receive(
            seq,
            id,
            (first, mark, deadline),
            req.name(),
            timeout,
            signalled,
        )?;
        if self.drains(req) {
            self.pending_until = None;
            self.busy_since = None;
        }
        self.settled = Self::settles(req);
        // A free is performed beside a held failure and leaves it for the next call, and a ping
        // or info is answered beside a persistent kernel's fault: their answers report none, so
        // they leave the flag as they found it.
        self.nothing_posted = match req {
            Request::Free { .. } | Request::Ping | Request::Info => nothing_posted,
            _ => true,
        };
        Ok(answered)
    }

    /// `deadline`, or the wait limit where that comes first.
    fn limited(&self, deadline: Instant) -> Instant {
        match self.wait_limit {
            Some(limit) if limit < deadline => limit,
            _ => deadline,
        }
    }

    /// Encodes `req` with a fresh id into `self.frame`; returns the id.
    pub(super) fn encode(&mut self, req: &Request<'_>) -> u64 {
        self.next_id += 1;
        self.settled = false;
        self.nothing_posted = false;
        self.frame.clear();
        encode_request(self.next_id, req, &mut self.frame);
        self.next_id
    }

    /// On the emulator with kernels queued, the worker runs them one by one before it takes the
    /// next request: silence past their bound while it is still on them means one ran past its
    /// deadline, however long `op_timeout` is. So a wait first ends when they are due; returns
    /// that (or `deadline` where it does not apply) and the ring position that tells whether the
    /// worker has got past them.
    pub(super) fn first_deadline(&self, deadline: Instant) -> (Instant, Option<u32>) {
        match (self.backend, self.pending_until) {
            (BackendKind::Emu, Some(due)) if due < deadline => (due, Some(self.chan.mark())),
            _ => (deadline, None),
        }
    }

    /// Waits for the response to the call sent as (`seq`, `id`) and decodes it: until `first`,
    /// and on to `deadline` only if the worker has served everything before `mark` by then (see
    /// [`Worker::first_deadline`]).
    pub(super) fn receive(
        &mut self,
        seq: u32,
        id: u64,
        (first, mark, deadline): (Instant, Option<u32>, Instant),
        op: &str,
        timeout: Duration,
        signalled: bool,
    ) -> Result<(Response, Answer), WorkerError> {
        let proc = &self.proc;
        let holder_gone = self.holder_gone.as_deref();
        // Alive while the process is and someone still waits for the answer.
        let alive = || {
            if holder_gone.is_some_and(|gone| gone.load(Ordering::Acquire)) {
                return Some("given up: no one waits for its answer any more".to_owned());
            }
            proc.poll()
        };
        let wait = |chan: &mut HostEnd, resp: &mut Vec<u8>, until: Instant| {
            if signalled {
                chan.wait_signalled(seq, until, &mut || alive(), resp)
            } else {
                chan.wait(seq, until, &mut || alive(), resp)
                    .map(|()| Answer::Response)
            }
        };
        let mut waited = wait(&mut self.chan, &mut self.resp, first);
        if waited == Err(WaitError::Timeout) && mark.is_some_and(|m| self.chan.served_past(m)) {
            waited = wait(&mut self.chan, &mut self.resp, deadline);
        }
        let answer = match waited {
            Ok(a) => a,
            Err(w) => return Err(self.wait_failed(op, w, timeout)),
        };
        if answer == Answer::Signalled {
            return Ok((Response::Ok, answer));
        }
        let (rid, resp) = match decode_response(&self.resp) {
            Ok(r) => r,
            Err(e) => {
                return Err(self.lose(format!("protocol violation: undecodable response: {e}")))
            }
        };
        if rid != id {
            return Err(self.lose(format!(
                "protocol violation: response to request {rid}, expected {id}"
            )));
        }
        if let Response::Error { kind, message } = resp {
            if kind.poisons_worker() {
                self.poisoned = Some((kind, message.clone()));
            }
            return Err(WorkerError::Op { kind, message });
        }
        Ok((resp, Answer::Response))
    }

    /// The error for a wait on the channel (for room, or for an answer) that ended badly; the
    /// worker is lost (killed) in every case, and reaped here unless the wait was given up (its
    /// caller's limit, or its holder gone), where the pool's reaper does it.
    pub(super) fn wait_failed(&mut self, op: &str, w: WaitError, timeout: Duration) -> WorkerError {
        match w {
            // The caller's limit came before the op's own deadline (which `timeout` measures).
            WaitError::Timeout if self.wait_limit.is_some_and(|l| Instant::now() >= l) => {
                self.give_up(op)
            }
            WaitError::Timeout if self.pending_until.is_some() => {
                // Said without the wait's length: on the emulator the wait ends when the queued
                // kernels are due, well before `timeout`.
                let msg = format!(
                    "no answer to {op} by the time every queued kernel was due: a kernel (the last one launched \
                     was launch #{}, of {}) ran past its deadline and its worker did not report it; the worker was \
                     killed",
                    self.launches,
                    self.kernel_named(self.last_launch)
                );
                self.lose(msg.clone());
                WorkerError::op(ErrorKind::DeadlineExceeded, msg)
            }
            WaitError::Timeout => self.lose(format!("no answer to {op} within {timeout:?}")),
            WaitError::Dead(how) => {
                // No one waits for the answer any more, and the process still runs (a kernel,
                // most likely): killed and left to the pool's reaper, as at a wait limit. A
                // process with a device context can take a second to end, and the caller is
                // the connection's one thread, which has a lease to give back.
                let gone = self
                    .holder_gone
                    .as_deref()
                    .is_some_and(|gone| gone.load(Ordering::Acquire));
                if gone && self.proc.poll().is_none() {
                    let why = format!("worker process {how}");
                    self.abandon(why.clone());
                    return WorkerError::Lost(why);
                }
                let lost = self.lose(format!("worker process {how}"));
                if self.proc.ended_by_watchdog() {
                    return WorkerError::op(
                        ErrorKind::DeadlineExceeded,
                        format!(
                            "a kernel (the last one launched was launch #{}, of {}) ran past its deadline with no sync \
                             waiting, and its worker process {how}",
                            self.launches,
                            self.kernel_named(self.last_launch)
                        ),
                    );
                }
                lost
            }
            WaitError::Protocol(m) | WaitError::Failed(m) => {
                self.lose(format!("protocol violation: {m}"))
            }
        }
    }

    /// The worker did not answer `op` by the wait limit: it is given up, not waited for, whatever
    /// it is doing (a kernel still running, most likely).
    fn give_up(&mut self, op: &str) -> WorkerError {
        let busy = if self.pending_until.is_some() {
            format!(
                " while kernels it was given still ran (the last one launched was launch #{}, of {})",
                self.launches,
                self.kernel_named(self.last_launch)
            )
        } else {
            String::new()
        };
        let msg = format!(
            "no answer to {op} by the caller's time limit{busy}; the worker was given up (killed), not waited for"
        );
        self.gave_up = true;
        self.abandon(msg.clone());
        WorkerError::op(ErrorKind::DeadlineExceeded, msg)
    }

    pub(super) fn unexpected(&mut self, op: &str, resp: &Response) -> WorkerError {
        self.lose(format!("protocol violation: {op} answered with {resp:?}"))
    }
}

/// `t + d`, saturating at a century from `t` (an absurd configured deadline must not panic).
pub(super) fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d)
        .unwrap_or_else(|| t + Duration::from_secs(100 * 365 * 86_400))
}
