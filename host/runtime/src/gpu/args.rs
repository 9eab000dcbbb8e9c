//! A kernel's argument block, built from typed arguments: buffer arguments become device addresses
//! of the caller's own allocations, and every argument must match its parameter's size.

use super::types::{BufferId, KernelArg, SubmitArg};
use crate::error::{invalid, out_of_bounds, quoted, GpuError};
use tasklet_worker::{KernelInfo, MAX_PARAM_BYTES};

/// A kernel as launches need it: its declaration and its argument layout, worked out once when
/// its module is loaded rather than at every launch.
pub(super) struct KernelEntry {
    pub info: KernelInfo,
    /// Each parameter's offset in the argument block and the block's size; `None` when the
    /// parameters do not fit CUDA's parameter space (such a kernel cannot be launched).
    layout: Option<(Vec<u32>, u32)>,
}

impl KernelEntry {
    pub fn new(info: KernelInfo) -> KernelEntry {
        KernelEntry {
            layout: info.checked_param_layout(MAX_PARAM_BYTES),
            info,
        }
    }

    /// Builds the argument block for `args` into `block`. `buffer` resolves a buffer argument to
    /// its device address and size, failing for a buffer the caller may not use.
    pub fn argument_block(
        &self,
        args: &[KernelArg<'_>],
        mut buffer: impl FnMut(BufferId) -> Result<(u64, u64), GpuError>,
        block: &mut Vec<u8>,
    ) -> Result<(), GpuError> {
        let info = &self.info;
        if args.len() != info.params.len() {
            return Err(invalid(format!(
                "kernel {} takes {} argument(s), {} given",
                quoted(&info.name),
                info.params.len(),
                args.len()
            )));
        }
        // The parameter list comes from the worker: its layout was worked out with checked
        // arithmetic and within CUDA's limit on a kernel's parameter space when the module was
        // loaded, so no module can make the host panic or allocate without bound here.
        let Some((offsets, total)) = &self.layout else {
            return Err(invalid(format!(
                "kernel {} declares more than {MAX_PARAM_BYTES} bytes of parameters",
                quoted(&info.name)
            )));
        };
        block.clear();
        block.resize(*total as usize, 0);
        for (i, ((arg, param), &at)) in args.iter().zip(&info.params).zip(offsets).enumerate() {
            let scalar;
            let bytes: &[u8] = match *arg {
                KernelArg::Buffer { buffer: id, offset } => {
                    let (addr, size) = buffer(id)?;
                    if offset > size {
                        return Err(out_of_bounds(format!(
                            "argument {i}: offset {offset} is past the end of its {size}-byte buffer"
                        )));
                    }
                    scalar = (addr + offset).to_le_bytes();
                    &scalar
                }
                KernelArg::I32(v) => &v.to_le_bytes()[..],
                KernelArg::U32(v) => &v.to_le_bytes()[..],
                KernelArg::I64(v) => &v.to_le_bytes()[..],
                KernelArg::U64(v) => &v.to_le_bytes()[..],
                KernelArg::F32(v) => &v.to_le_bytes()[..],
                KernelArg::F64(v) => &v.to_le_bytes()[..],
                KernelArg::Bytes(v) => v,
            };
            if bytes.len() != param.size as usize {
                return Err(invalid(format!(
                    "argument {i} ({}) of kernel {} is {} bytes, the parameter takes {}",
                    quoted(&param.name),
                    quoted(&info.name),
                    bytes.len(),
                    param.size
                )));
            }
            let at = at as usize;
            block
                .get_mut(at..at + bytes.len())
                .ok_or_else(|| {
                    invalid(format!(
                        "argument {i} falls outside kernel {}'s parameter space",
                        quoted(&info.name)
                    ))
                })?
                .copy_from_slice(bytes);
        }
        Ok(())
    }
}

/// GPU_SUBMIT's `args` for a one-shot of `kernel`: its argument block for `args` less the first
/// 8 bytes, where a node puts the region's address. `args` must start with
/// [`SubmitArg::Region`] at offset 0 and hold no other region pointer (the caller checks; only
/// the first parameter can be the region on the wire). Checked as a launch's arguments are:
/// count, and each argument's size against its parameter.
pub fn submit_args_after_region(
    kernel: &KernelInfo,
    args: &[SubmitArg<'_>],
) -> Result<Vec<u8>, GpuError> {
    let lifted: Vec<KernelArg<'_>> = args
        .iter()
        .map(|a| match *a {
            // Any buffer id will do: the resolver below gives every one address 0, and the node
            // writes the real address over the first 8 bytes.
            SubmitArg::Region { offset } => KernelArg::Buffer {
                buffer: BufferId(0),
                offset,
            },
            SubmitArg::Value(v) => v,
        })
        .collect();
    let mut block = Vec::new();
    KernelEntry::new(kernel.clone()).argument_block(&lifted, |_| Ok((0, u64::MAX)), &mut block)?;
    let starts_with_pointer = kernel.params.first().is_some_and(|p| p.size == 8);
    if !starts_with_pointer || block.len() < 8 {
        return Err(invalid(format!(
            "kernel {} must take the region's address (a 64-bit pointer) as its first parameter",
            quoted(&kernel.name)
        )));
    }
    block.drain(..8);
    Ok(block)
}
