//! Deployments on a stream: DEPLOY_PUSH's component and DEPLOY_RUN's input taken in as their
//! data frames arrive, then each deploy request served on a blocking thread, one after another
//! in the order the stream carried them (so a run sent right behind its push finds it).
//!
//! Deploy requests never go to the connection's GPU thread: a run takes as long as its tasklet,
//! and the connection's sessions go on meanwhile. A run's own GPU work goes to a `LocalGpu` of
//! its own (see `crate::deploy`).
//!
//! The data a request announces is held whole (a component is compiled whole, a tasklet gets
//! its input whole), within the connection's queue budget: a client cannot make the node hold
//! more of its bytes at once than the budget, whatever it announces.

use super::QUEUE_BYTES;
use crate::caller::Caller;
use crate::deploy::{exit_code, exit_message, failure, from_wire, to_wire, StartedPush};
use crate::job::ReplyTo;
use crate::reply::{fail, send, send_piece, start_reply, Failure};
use crate::shared::{Shared, Unanswered};
use crate::tenant_slots::TenantSlot;
use std::sync::Arc;
use tasklet_runtime::RunStop;
use tasklet_store::Digest;
use tasklet_wire::{ErrorCode, Opcode, Reply, Request, RequestId};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// Deploy requests queued on one stream before its reader waits.
const LANE_QUEUE: usize = 16;

/// The most bytes of input a run takes: held whole until the run starts, so within what one
/// connection may queue.
pub(crate) const MAX_RUN_INPUT: u64 = QUEUE_BYTES as u64;

/// A deploy request ready to be served.
pub(crate) struct Queued {
    request_id: RequestId,
    work: Work,
    reply: ReplyTo,
    /// The connection's queue budget the request's data holds until it is served.
    _budget: Option<OwnedSemaphorePermit>,
    /// Counts the request as unanswered until it has been served.
    _unanswered: Unanswered,
}

enum Work {
    Push(Result<StartedPush, Failure>),
    Has(Digest),
    Run {
        digest: Digest,
        input: Result<Vec<u8>, Failure>,
    },
}

impl Work {
    fn opcode(&self) -> Opcode {
        match self {
            Work::Push(_) => Opcode::DeployPush,
            Work::Has(_) => Opcode::DeployHas,
            Work::Run { .. } => Opcode::DeployRun,
        }
    }
}

/// A stream's deploy requests, served in order by a task of their own.
pub(crate) struct Lane {
    jobs: mpsc::Sender<Queued>,
}

impl Lane {
    pub fn start(shared: Arc<Shared>, caller: Arc<Caller>, connection: quinn::Connection) -> Lane {
        let (jobs, queue) = mpsc::channel(LANE_QUEUE);
        tokio::spawn(drive(shared, caller, connection, queue));
        Lane { jobs }
    }

    async fn queue(&self, job: Queued) {
        // The lane's task ends only with the stream, after this sender is dropped.
        let _ = self.jobs.send(job).await;
    }
}

/// Serves a stream's deploy requests, each on a blocking thread, until the stream's reader lets
/// go of the lane. A closed connection's queued requests are dropped, not served, and its run
/// under way is stopped: nobody is left to read its output.
async fn drive(
    shared: Arc<Shared>,
    caller: Arc<Caller>,
    connection: quinn::Connection,
    mut queue: mpsc::Receiver<Queued>,
) {
    let stop = RunStop::new();
    let watch = {
        let (stop, connection) = (stop.clone(), connection.clone());
        tokio::spawn(async move {
            connection.closed().await;
            stop.stop();
        })
    };
    while let Some(job) = queue.recv().await {
        if connection.close_reason().is_some() {
            continue;
        }
        // A request that failed as it came in is answered its own failure, not a full node's.
        let failed = matches!(
            job.work,
            Work::Push(Err(_)) | Work::Run { input: Err(_), .. }
        );
        let held = match (!failed).then(|| take_deploy_job(&shared, &caller)) {
            None => None,
            Some(Ok(held)) => Some(held),
            Some(Err(failure)) => {
                tracing::info!(connection = caller.connection, tenant = %caller.tenant, "deploy request refused: {}", failure.0.message);
                fail(&job.reply, job.request_id, job.work.opcode(), failure);
                continue;
            }
        };
        let (shared, caller, stop) = (Arc::clone(&shared), Arc::clone(&caller), stop.clone());
        let _ = tokio::task::spawn_blocking(move || {
            let _held = held;
            serve(&shared, &caller, job, &stop)
        })
        .await;
    }
    watch.abort();
}

/// A place among the deploy requests being served: one of the tenant's, one of the node's.
/// Refused at once, `CAPACITY_EXCEEDED` (a placed run moves to another node), when either is
/// taken: each holds a blocking thread of the node's runtime until it is answered.
fn take_deploy_job(
    shared: &Shared,
    caller: &Caller,
) -> Result<(TenantSlot, OwnedSemaphorePermit), Failure> {
    let tenant = caller.tenant.as_str();
    let max = shared.limits.max_tenant_deploy_jobs;
    let slot = shared.tenant_deploy_jobs.take(tenant, max).ok_or_else(|| {
        Failure::new(
            ErrorCode::CapacityExceeded,
            format!(
                "tenant `{tenant}` has {max} deploy requests (pushes, checks, runs) being served on this node at once, its \
                 most; wait for one to end, or use another node"
            ),
        )
    })?;
    let permit = Arc::clone(&shared.deploy_jobs)
        .try_acquire_owned()
        .map_err(|_| {
            Failure::new(
                ErrorCode::CapacityExceeded,
                format!(
                    "this node serves {} deploy requests at once, its most over every tenant: try again later or \
                     another node",
                    shared.limits.max_deploy_jobs
                ),
            )
        })?;
    Ok((slot, permit))
}

/// A deploy request, as the reader hands it over.
pub(crate) enum DeployRequest {
    Push {
        manifest: Vec<u8>,
        component_len: u64,
    },
    Has {
        digest: tasklet_wire::Digest,
    },
    Run {
        digest: tasklet_wire::Digest,
        input_len: u64,
    },
}

impl TryFrom<Request> for DeployRequest {
    /// Any other request, given back.
    type Error = Request;

    fn try_from(request: Request) -> Result<DeployRequest, Request> {
        match request {
            Request::DeployPush {
                manifest,
                component_len,
            } => Ok(DeployRequest::Push {
                manifest,
                component_len,
            }),
            Request::DeployHas { digest } => Ok(DeployRequest::Has { digest }),
            Request::DeployRun { digest, input_len } => {
                Ok(DeployRequest::Run { digest, input_len })
            }
            other => Err(other),
        }
    }
}

/// Takes a deploy request in. When no data follows it is queued (or answered) at once, and
/// `None` returned; otherwise the intake its data is to be fed to, which queues it once the data
/// has arrived. A request that fails a check is answered after its data has been read (and
/// dropped), so the stream stays in step.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn accept(
    shared: &Shared,
    caller: &Caller,
    connection: &quinn::Connection,
    lane: &Lane,
    budget: &Arc<Semaphore>,
    reply: &ReplyTo,
    request_id: RequestId,
    request: DeployRequest,
) -> Option<Intake> {
    let (work, streamed) = match request {
        DeployRequest::Push {
            manifest,
            component_len,
        } => {
            let push = gate(shared, caller, Opcode::DeployPush)
                .and_then(|deployments| deployments.start_push(caller, &manifest));
            (Work::Push(push), component_len)
        }
        DeployRequest::Has { digest } => (Work::Has(from_wire(&digest)), 0),
        DeployRequest::Run { digest, input_len } => {
            let input = gate(shared, caller, Opcode::DeployRun).and_then(|_| {
                if input_len > MAX_RUN_INPUT {
                    return Err(Failure::new(
                        ErrorCode::QuotaExceeded,
                        format!("a run's input is at most {MAX_RUN_INPUT} bytes on this node; this one is {input_len}"),
                    ));
                }
                Ok(Vec::new())
            });
            let digest = from_wire(&digest);
            (Work::Run { digest, input }, input_len)
        }
    };
    let intake = Intake {
        request_id,
        work,
        reply: reply.clone(),
        connection: connection.clone(),
        budget: Arc::clone(budget),
        permit: None,
        held: 0,
        unanswered: shared.taken(),
    };
    if streamed == 0 {
        lane.queue(intake.into_job()).await;
        None
    } else {
        Some(intake)
    }
}

/// The deployments, if `caller` may use them for `opcode` now.
fn gate<'a>(
    shared: &'a Shared,
    caller: &Caller,
    opcode: Opcode,
) -> Result<&'a crate::deploy::Deployments, Failure> {
    let deployments = shared.deployments.as_ref().ok_or_else(no_store)?;
    if let Err(why) = &caller.deploy {
        return Err(Failure::new(ErrorCode::Unauthorized, why.clone()));
    }
    if shared.draining() {
        return Err(Failure::new(
            ErrorCode::Draining,
            format!(
                "the node is shutting down and takes no new {}; use another node",
                opcode.name()
            ),
        ));
    }
    Ok(deployments)
}

fn no_store() -> Failure {
    Failure::new(
        ErrorCode::Unsupported,
        "this node serves no deployments: it was started without a store (NodeBuilder::store)",
    )
}

/// A deploy request whose data is arriving.
pub(crate) struct Intake {
    request_id: RequestId,
    work: Work,
    reply: ReplyTo,
    /// Watched while the data waits for budget: a closed connection's upload is dropped.
    connection: quinn::Connection,
    budget: Arc<Semaphore>,
    permit: Option<OwnedSemaphorePermit>,
    /// Bytes of budget `permit` holds.
    held: usize,
    unanswered: Unanswered,
}

impl Intake {
    /// Takes the next bytes of the request's data, within the connection's queue budget.
    pub async fn feed(&mut self, bytes: &[u8]) {
        if self.failed() {
            return;
        }
        let want = bytes.len().min(QUEUE_BYTES - self.held);
        if want > 0 {
            let permits = u32::try_from(want).unwrap_or(u32::MAX);
            let taken = tokio::select! {
                permit = Arc::clone(&self.budget).acquire_many_owned(permits) => permit.ok(),
                // The budget may be held by this connection's other unfinished uploads, which
                // no one will finish now: what this one holds goes, and the stream's reader
                // (which fed it) finds the connection gone at its next read.
                _ = self.connection.closed() => None,
            };
            let Some(permit) = taken else {
                self.abandon();
                return;
            };
            self.held += want;
            match self.permit.as_mut() {
                Some(held) => held.merge(permit),
                None => self.permit = Some(permit),
            }
        }
        let refused = match &mut self.work {
            Work::Push(Ok(started)) => started.push.write_chunk(bytes).err(),
            Work::Run {
                input: Ok(input), ..
            } => {
                input.extend_from_slice(bytes);
                None
            }
            _ => None,
        };
        if let Some(err) = refused {
            self.work = Work::Push(Err(failure(err)));
            // What was held is let go: the rest of the data is only read past.
            self.permit = None;
            self.held = 0;
        }
    }

    /// Lets the request go: what it holds is freed, and the rest of its data is only read past.
    fn abandon(&mut self) {
        self.permit = None;
        self.held = 0;
        let gone = || Failure::new(ErrorCode::Internal, "the connection closed mid-request");
        self.work = match self.work {
            Work::Run { digest, .. } => Work::Run {
                digest,
                input: Err(gone()),
            },
            _ => Work::Push(Err(gone())),
        };
    }

    fn failed(&self) -> bool {
        matches!(
            self.work,
            Work::Push(Err(_)) | Work::Run { input: Err(_), .. }
        )
    }

    /// Queues the request, its data complete.
    pub async fn finish(self, lane: &Lane) {
        lane.queue(self.into_job()).await;
    }

    fn into_job(self) -> Queued {
        Queued {
            request_id: self.request_id,
            work: self.work,
            reply: self.reply,
            _budget: self.permit,
            _unanswered: self.unanswered,
        }
    }
}

/// Serves one deploy request, on a blocking thread; a run stops early once `stop` is.
fn serve(shared: &Shared, caller: &Caller, job: Queued, stop: &RunStop) {
    let Queued {
        request_id,
        work,
        reply,
        ..
    } = job;
    let opcode = work.opcode();
    let tenant = caller.tenant.as_str();
    let Some(deployments) = shared.deployments.as_ref() else {
        // A push or a run was refused at `accept` for this very reason, which it carries.
        let failure = match work {
            Work::Push(Err(failure))
            | Work::Run {
                input: Err(failure),
                ..
            } => failure,
            _ => no_store(),
        };
        return fail(&reply, request_id, opcode, failure);
    };
    match work {
        Work::Push(push) => {
            let pushed = push.and_then(|push| deployments.finish_push(&caller.tenant, push));
            match pushed {
                Ok(pushed) => {
                    let result = match (pushed.already_present, pushed.restored) {
                        (true, _) => "present",
                        (false, true) => "restored",
                        (false, false) => "stored",
                    };
                    shared.metrics.deploy_pushed(tenant, result);
                    tracing::info!(
                        connection = caller.connection,
                        tenant,
                        digest = %pushed.digest,
                        result,
                        compiled = pushed.compiled,
                        "deployment pushed"
                    );
                    send(
                        &reply,
                        request_id,
                        &Reply::DeployPush {
                            digest: to_wire(&pushed.digest),
                            already_present: pushed.already_present,
                        },
                    );
                }
                Err(failure) => {
                    shared.metrics.deploy_pushed(tenant, "refused");
                    tracing::info!(
                        connection = caller.connection,
                        tenant,
                        "push refused: {}",
                        failure.0.message
                    );
                    fail(&reply, request_id, opcode, failure);
                }
            }
        }
        Work::Has(digest) => match deployments.has(&caller.tenant, &digest) {
            Ok(present) => send(&reply, request_id, &Reply::DeployHas { present }),
            Err(failure) => fail(&reply, request_id, opcode, failure),
        },
        Work::Run { digest, input } => {
            let outcome = input.and_then(|input| {
                // Checked again: the node may have begun draining while the input arrived.
                if shared.draining() {
                    return Err(Failure::new(
                        ErrorCode::Draining,
                        "the node is shutting down and takes no new DEPLOY_RUN; use another node",
                    ));
                }
                let max = caller.totals.runs.map_or(u64::MAX, u64::from);
                let Some(slot) = shared.tenant_runs.take(tenant, max) else {
                    return Err(Failure::new(
                        ErrorCode::QuotaExceeded,
                        format!(
                            "tenant `{tenant}` already has {max} deployed run(s) under way on this node, the most its \
                             policy allows (tenant-max-runs); wait for one to end"
                        ),
                    ));
                };
                let _active = shared.metrics.deploy_run_started();
                let (outcome, teardown) =
                    deployments.run(&shared.host, caller, &digest, &input, stop)?;
                Ok((outcome, teardown, slot))
            });
            let (outcome, teardown, slot) = match outcome {
                Ok(ran) => ran,
                Err(failure) => {
                    shared.metrics.deploy_ran(tenant, "refused", None);
                    tracing::info!(connection = caller.connection, tenant, %digest, "run refused: {}", failure.0.message);
                    return fail(&reply, request_id, opcode, failure);
                }
            };
            let status = outcome.status.as_str();
            let load = outcome.load.as_str();
            shared.metrics.deploy_ran(
                tenant,
                status,
                Some((load, outcome.load_time, outcome.elapsed)),
            );
            let run_id = wire_run_id(&outcome.run_id);
            tracing::info!(
                connection = caller.connection,
                tenant,
                run = %outcome.run_id,
                %digest,
                status,
                load,
                load_us = outcome.load_time.as_micros() as u64,
                elapsed_us = outcome.elapsed.as_micros() as u64,
                "deployment ran"
            );
            log_printed(shared, caller, &outcome);
            let output = match outcome.status.is_ok() {
                true => outcome.output,
                false => exit_message(&outcome.status).into_bytes(),
            };
            let answer = Reply::DeployRun {
                run_id,
                exit_status: exit_code(&outcome.status),
                elapsed_us: u64::try_from(outcome.elapsed.as_micros()).unwrap_or(u64::MAX),
                output_len: output.len() as u64,
            };
            if let Some(mut data) = start_reply(&reply, request_id, &answer) {
                send_piece(&reply, &mut data, output);
            }
            // After the answer, so that the client does not wait for the instance's memory to
            // be scrubbed; the stream's lane takes its next request once this is done. The run
            // counts against the tenant's runs until its instance is gone: a client that does
            // not read its answer holds a slot, not memory beside it.
            drop(teardown);
            drop(slot);
        }
    }
}

/// What a run printed, in the node's log as one line: the tenant's bytes escaped (`{:?}`), so
/// that they can neither forge a line nor break a JSON log; at most 20 such lines a second,
/// the next one saying how many were left out.
fn log_printed(shared: &Shared, caller: &Caller, outcome: &tasklet_deploy::RunOutcome) {
    let printed = &outcome.printed;
    if printed.bytes.is_empty() {
        return;
    }
    let Some(left_out) = shared.printed_log.admit() else {
        return;
    };
    tracing::info!(
        connection = caller.connection,
        tenant = caller.tenant.as_str(),
        run = %outcome.run_id,
        dropped_bytes = printed.dropped,
        lines_left_out = left_out,
        "tasklet printed: {:?}",
        String::from_utf8_lossy(&printed.bytes)
    );
}

/// The run's id as DEPLOY_RUN's reply carries it: all 128 of its random bits, the first byte
/// highest (so that it prints as `RunId` displays it, the spelling of the node's log).
fn wire_run_id(id: &tasklet_deploy::RunId) -> u128 {
    u128::from_be_bytes(*id.as_bytes())
}
