//! The one-shot [`Submit`] as a sequence of a service's own operations: acquire, session, alloc,
//! write, load, launch, sync, read, and the lease's end. Every step is the operation of the same
//! name, so it is checked exactly as a tasklet's own session would be, and a service whose GPU is
//! elsewhere can run a one-shot it cannot send whole the same way.

use super::types::{BufferId, KernelArg, ModuleSource, SessionId, Submit, SubmitArg};
use super::GpuService;
use crate::error::{invalid, out_of_bounds, GpuError};

/// A one-shot's span that lies outside its region (see [`check_region_spans`]).
#[derive(Debug)]
pub enum OutsideRegion {
    /// Its input, written at the region's start.
    Input(GpuError),
    /// Its output, read back after the kernel.
    Output(GpuError),
}

/// Checks a one-shot's input and output spans against its region of `region_bytes` before
/// anything is written or launched, so that a call that could not return its output changes
/// nothing and spends no GPU time. Both a local one-shot and a node's GPU_SUBMIT check here, in
/// the same words.
pub fn check_region_spans(
    region_bytes: u64,
    input_len: u64,
    output_offset: u64,
    output_size: u64,
) -> Result<(), OutsideRegion> {
    if input_len > region_bytes {
        return Err(OutsideRegion::Input(out_of_bounds(format!(
            "input bytes 0..{input_len} are outside the lease's {region_bytes}-byte region; nothing was launched"
        ))));
    }
    if output_offset
        .checked_add(output_size)
        .is_none_or(|end| end > region_bytes)
    {
        return Err(OutsideRegion::Output(out_of_bounds(format!(
            "output bytes {output_offset}..{} are outside the lease's {region_bytes}-byte region; nothing was launched",
            output_offset as u128 + output_size as u128
        ))));
    }
    Ok(())
}

/// Runs `call` through `gpu`'s session operations. The lease acquired for it is ended before
/// this returns, whether the call succeeded or not.
pub fn submit_in_session<G: GpuService + ?Sized>(
    gpu: &mut G,
    call: &Submit<'_>,
) -> Result<Vec<u8>, GpuError> {
    // Refused before a lease is taken: a buffer argument names a session a one-shot does not have.
    if call.args.iter().any(|a| match a {
        SubmitArg::Value(KernelArg::Buffer { .. }) => true,
        SubmitArg::Value(KernelArg::Relocated { relocations, .. }) => !relocations.is_empty(),
        _ => false,
    }) {
        return Err(invalid(
            "a one-shot's pointer arguments point into its region; a buffer of a session cannot be passed",
        ));
    }
    let lease = gpu.lease_acquire(call.lease)?;
    let result = in_lease(gpu, lease, call);
    gpu.lease_drop(lease);
    result
}

fn in_lease<G: GpuService + ?Sized>(
    gpu: &mut G,
    lease: super::LeaseId,
    call: &Submit<'_>,
) -> Result<Vec<u8>, GpuError> {
    // The region is all of the lease's memory, as GPU_SUBMIT defines it on a node.
    let region_bytes = gpu.lease_info(lease)?.granted_bytes;
    check_region_spans(
        region_bytes,
        call.input.len() as u64,
        call.output_offset,
        call.output_size,
    )
    .map_err(|(OutsideRegion::Input(err) | OutsideRegion::Output(err))| err)?;
    let session = gpu.session_open(lease)?;
    let result = in_session(gpu, session, region_bytes, call);
    gpu.session_drop(session);
    result
}

fn in_session<G: GpuService + ?Sized>(
    gpu: &mut G,
    session: SessionId,
    region_bytes: u64,
    call: &Submit<'_>,
) -> Result<Vec<u8>, GpuError> {
    let region = gpu.mem_alloc(session, region_bytes)?;
    if !call.input.is_empty() {
        gpu.mem_write(session, region, 0, call.input)?;
    }
    let module = match call.module {
        ModuleSource::Ptx(ptx) => gpu.module_load(session, ptx)?,
        ModuleSource::Cuda { source, options } => {
            gpu.module_load_source(session, source, options)?
        }
    };
    let args = launch_args(call.args, region);
    gpu.launch(session, module, call.kernel, &call.config, &args)?;
    // A read waits for the kernel, and reports its faults.
    gpu.mem_read(session, region, call.output_offset, call.output_size)
}

/// The one-shot's arguments as a launch in a session takes them: region pointers become the
/// region's buffer.
fn launch_args<'a>(args: &[SubmitArg<'a>], region: BufferId) -> Vec<KernelArg<'a>> {
    args.iter()
        .map(|a| match *a {
            SubmitArg::Region { offset } => KernelArg::Buffer {
                buffer: region,
                offset,
            },
            SubmitArg::Value(v) => v,
        })
        .collect()
}
