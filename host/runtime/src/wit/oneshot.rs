//! `tasklet:gpu/oneshot` (contract 0.2): a submission becomes one [`GpuService::submit`], which a
//! service whose GPU is on a node sends as one request.
//!
//! [`GpuService::submit`]: crate::gpu::GpuService::submit

use super::bindings::v02::tasklet::gpu::oneshot::{Host, ModuleSource, Submission, SubmitArg};
use super::{GpuResult, GpuState};
use crate::gpu;

impl Host for GpuState<'_> {
    fn submit(&mut self, call: Submission) -> GpuResult<Vec<u8>> {
        let args: Vec<gpu::SubmitArg<'_>> = call
            .args
            .iter()
            .map(|a| match a {
                SubmitArg::Region(offset) => gpu::SubmitArg::Region { offset: *offset },
                SubmitArg::I32(v) => gpu::SubmitArg::Value(gpu::KernelArg::I32(*v)),
                SubmitArg::U32(v) => gpu::SubmitArg::Value(gpu::KernelArg::U32(*v)),
                SubmitArg::I64(v) => gpu::SubmitArg::Value(gpu::KernelArg::I64(*v)),
                SubmitArg::U64(v) => gpu::SubmitArg::Value(gpu::KernelArg::U64(*v)),
                SubmitArg::F32(v) => gpu::SubmitArg::Value(gpu::KernelArg::F32(*v)),
                SubmitArg::F64(v) => gpu::SubmitArg::Value(gpu::KernelArg::F64(*v)),
                SubmitArg::Bytes(v) => gpu::SubmitArg::Value(gpu::KernelArg::Bytes(v)),
            })
            .collect();
        let module = match &call.module {
            ModuleSource::Ptx(ptx) => gpu::ModuleSource::Ptx(ptx),
            ModuleSource::Cuda(c) => gpu::ModuleSource::Cuda {
                source: &c.source,
                options: &c.options,
            },
        };
        let (g, b) = (call.config.grid, call.config.block);
        let submit = gpu::Submit {
            lease: gpu::LeaseRequest {
                min_vram: call.lease.min_vram,
                secs: call.lease.secs,
                device: call.lease.device,
            },
            module,
            kernel: &call.kernel,
            config: gpu::LaunchConfig {
                grid: [g.0, g.1, g.2],
                block: [b.0, b.1, b.2],
                shared_mem_bytes: call.config.shared_mem_bytes,
            },
            args: &args,
            input: &call.input,
            output_offset: call.output_offset,
            output_size: call.output_size,
        };
        Ok(self.service.submit(&submit)?)
    }
}
