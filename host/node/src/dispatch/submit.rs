//! GPU_SUBMIT: one kernel on a lease's memory, for clients that do not run sessions.
//!
//! A lease's first submission opens a session on it and allocates all of the lease's memory as
//! one zeroed *region*, which every later submission on the lease sees again (so one submission
//! can prepare what the next reads) until MEM_FREE. The submission's `input`, if any, is written
//! at the start of the region before the launch. The region's device address is the kernel's
//! first argument; the client's `args` are the rest of the argument block, byte for byte from
//! the end of that 8-byte pointer, and are split into the kernel's parameters by the module's
//! own signature. Each step fails with its own status: UNAUTHORIZED (not this connection's
//! lease, or a right the grant lacks), LOAD_FAILED, LAUNCH_FAILED (refused, faulted or past its
//! deadline), READ_FAILED (an output range outside the region, refused before anything runs,
//! with OUT_OF_BOUNDS as its cause); LEASE_EXPIRED when the lease has ended; an input that does
//! not fit the region is OUT_OF_BOUNDS, also before anything runs, and a grant without the
//! `write` right keeps the host's own status (UNAUTHORIZED). A step's failure that has a status of its own (a kernel that faulted:
//! KERNEL_FAULT) sends that as the reply's `cause`, so a client reports it as a session would.

use super::book::{Region, SubmitModule};
use super::errors::code_of;
use super::reads::{Read, READ_PIECE};
use super::{convert, Dispatcher};
use crate::job::ReplyTo;
use crate::reply::{fail, send_piece, start_reply, Failure};
use tasklet_runtime::gpu::{self, GpuService, KernelArg, LaunchConfig};
use tasklet_runtime::GpuError;
use tasklet_wire::{ErrorCode, GpuSubmit, Opcode, Reply, RequestId};

/// The step a submission failed in, which decides its status.
#[derive(Clone, Copy)]
enum Step {
    Load,
    Launch,
    Read,
}

impl Step {
    fn code(self) -> ErrorCode {
        match self {
            Step::Load => ErrorCode::LoadFailed,
            Step::Launch => ErrorCode::LaunchFailed,
            Step::Read => ErrorCode::ReadFailed,
        }
    }
}

/// A host error in `step`: refusals of identity and ended leases keep their own status, the
/// rest take the step's, with their own status as the cause when it is another.
fn failed(step: Step, err: GpuError) -> Failure {
    match err {
        GpuError::Unauthorized(m) => Failure::new(ErrorCode::Unauthorized, m),
        GpuError::LeaseExpired(m) => Failure::new(ErrorCode::LeaseExpired, m),
        other => {
            let precise = code_of(&other);
            let mut failure = Failure::new(step.code(), other.into_message());
            failure.0.cause = (precise != step.code()).then_some(precise);
            failure
        }
    }
}

impl Dispatcher {
    pub(super) fn submit(&mut self, to: &ReplyTo, request_id: RequestId, submit: GpuSubmit) {
        match self.submit_steps(to, request_id, &submit) {
            Ok(output) => self.caller.metrics.gpu_submit(true, output),
            Err(failure) => {
                self.caller.metrics.gpu_submit(false, 0);
                fail(to, request_id, Opcode::GpuSubmit, failure);
            }
        }
    }

    /// Runs the submission and streams its output; the bytes sent, or why it failed before its
    /// reply began.
    fn submit_steps(
        &mut self,
        to: &ReplyTo,
        request_id: RequestId,
        submit: &GpuSubmit,
    ) -> Result<u64, Failure> {
        let lease = convert::lease(submit.lease);
        if !self.book.leases.contains_key(&lease) {
            return Err(Failure::new(
                ErrorCode::Unauthorized,
                format!("lease {lease} is not one of this connection's"),
            ));
        }
        // Both spans are checked before anything is made, written or launched: a submission
        // that cannot return its output changes nothing (not even the region a lease's first
        // submission allocates) and spends none of the lease's GPU time.
        let size = match self.book.leases.get(&lease).and_then(|e| e.region.as_ref()) {
            Some(region) => region.size,
            None => {
                self.gpu()
                    .lease_info(lease)
                    .map_err(|err| failed(Step::Load, err))?
                    .granted_bytes
            }
        };
        let (offset, len) = (submit.output_offset, submit.output_size);
        gpu::check_region_spans(size, submit.input.len() as u64, offset, len).map_err(
            |outside| match outside {
                gpu::OutsideRegion::Input(err) => Failure::from(err),
                gpu::OutsideRegion::Output(err) => failed(Step::Read, err),
            },
        )?;
        let (session, buffer, _) = self.region(lease)?;
        let kernel = self.submit_module(lease, session, submit)?;
        let params = &kernel.params;
        // The first parameter is the region's address: a pointer, 8 bytes.
        let Some(first) = params.first().filter(|p| p.size == 8) else {
            return Err(Failure::new(
                ErrorCode::LaunchFailed,
                format!("kernel {} must take the region's address (a 64-bit pointer) as its first parameter", kernel.name),
            ));
        };
        let _ = first;
        let (offsets, total) = kernel.param_layout();
        let rest = total.saturating_sub(8) as usize;
        if submit.args.len() != rest {
            return Err(Failure::new(
                ErrorCode::LaunchFailed,
                format!(
                    "args holds {} bytes; kernel {} takes {rest} after its first (pointer) parameter",
                    submit.args.len(),
                    kernel.name
                ),
            ));
        }
        let mut args = vec![KernelArg::Buffer { buffer, offset: 0 }];
        for (param, &at) in params.iter().zip(&offsets).skip(1) {
            let from = at as usize - 8;
            args.push(KernelArg::Bytes(
                &submit.args[from..from + param.size as usize],
            ));
        }
        if !submit.input.is_empty() {
            self.gpu()
                .mem_write(session, buffer, 0, &submit.input)
                .map_err(Failure::from)?;
        }
        let config = LaunchConfig {
            grid: submit.grid,
            block: submit.block,
            shared_mem_bytes: 0,
        };
        let module = self
            .region_module(lease)
            .ok_or_else(|| Failure::new(ErrorCode::Internal, "the submission's module vanished"))?;
        let gpu = self.gpu();
        gpu.launch(session, module, &kernel.name, &config, &args)
            .and_then(|()| gpu.sync(session))
            .map_err(|err| failed(Step::Launch, err))?;
        let first_len = len.min(READ_PIECE);
        let output = Read {
            stream: None,
            session,
            buffer,
            offset,
            len,
        };
        let first = self
            .read_piece(&output, 0, first_len)
            .map_err(|err| failed(Step::Read, err))?;
        let Some(mut data) = start_reply(to, request_id, &Reply::GpuSubmit { output_len: len })
        else {
            return Ok(len);
        };
        send_piece(to, &mut data, first);
        Ok(self.stream_rest(to, &mut data, &output, first_len))
    }

    /// The lease's region, made at its first submission.
    fn region(
        &mut self,
        lease: gpu::LeaseId,
    ) -> Result<(gpu::SessionId, gpu::BufferId, u64), Failure> {
        if let Some(Some(r)) = self.book.leases.get(&lease).map(|e| e.region.as_ref()) {
            return Ok((r.session, r.buffer, r.size));
        }
        let gpu = self.gpu();
        let granted = gpu
            .lease_info(lease)
            .map_err(|err| failed(Step::Load, err))?
            .granted_bytes;
        let session = gpu
            .session_open(lease)
            .map_err(|err| failed(Step::Load, err))?;
        let buffer = match gpu.mem_alloc(session, granted) {
            Ok(buffer) => buffer,
            Err(err) => {
                gpu.session_drop(session);
                return Err(match err {
                    GpuError::QuotaExceeded(m) => Failure::new(
                        ErrorCode::QuotaExceeded,
                        format!("GPU_SUBMIT takes all of a lease's memory as its region, and sessions already hold some of it: {m}"),
                    ),
                    other => failed(Step::Load, other),
                });
            }
        };
        if let Some(entry) = self.book.leases.get_mut(&lease) {
            entry.region = Some(Region {
                session,
                buffer,
                size: granted,
                module: None,
            });
        }
        Ok((session, buffer, granted))
    }

    fn region_module(&self, lease: gpu::LeaseId) -> Option<gpu::ModuleId> {
        self.book
            .leases
            .get(&lease)?
            .region
            .as_ref()?
            .module
            .as_ref()
            .map(|m| m.id)
    }

    /// The submission's module in the lease's region (loaded unless it is the last one's), and
    /// the signature of the kernel it names.
    fn submit_module(
        &mut self,
        lease: gpu::LeaseId,
        session: gpu::SessionId,
        submit: &GpuSubmit,
    ) -> Result<tasklet_ptx::KernelInfo, Failure> {
        let cached = self
            .book
            .leases
            .get(&lease)
            .and_then(|e| e.region.as_ref())
            .and_then(|r| r.module.as_ref());
        let mut kernels = match cached {
            Some(m) if m.ptx == submit.ptx => m.kernels.clone(),
            _ => {
                let text = std::str::from_utf8(&submit.ptx).map_err(|err| {
                    Failure::new(
                        ErrorCode::LoadFailed,
                        format!("the module is not UTF-8 text: {err}"),
                    )
                })?;
                let kernels = tasklet_ptx::entry_signatures(text)
                    .map_err(|err| Failure::new(ErrorCode::LoadFailed, err.to_string()))?;
                let gpu = self.gpu();
                let id = gpu
                    .module_load(session, text)
                    .map_err(|err| failed(Step::Load, err))?;
                let region = self
                    .book
                    .leases
                    .get_mut(&lease)
                    .and_then(|e| e.region.as_mut());
                if let Some(region) = region {
                    let old = region.module.replace(SubmitModule {
                        ptx: submit.ptx.clone(),
                        id,
                        kernels: kernels.clone(),
                    });
                    if let Some(old) = old {
                        if let Some(gpu) = self.gpu.as_mut() {
                            gpu.module_unload(session, old.id);
                        }
                    }
                }
                kernels
            }
        };
        match kernels.iter().position(|k| k.name == submit.kernel) {
            Some(found) => Ok(kernels.swap_remove(found)),
            // The names are gathered only for the refusal, not on every submission.
            None => {
                let asked = format!(
                    "no kernel named {}",
                    tasklet_runtime::error::quoted(&submit.kernel)
                );
                let names: Vec<&str> = kernels.iter().map(|k| k.name.as_str()).collect();
                Err(Failure::from(tasklet_runtime::error::no_such_kernel(
                    &asked, &names,
                )))
            }
        }
    }
}
