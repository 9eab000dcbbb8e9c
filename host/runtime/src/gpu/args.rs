//! A kernel's argument block, built from typed arguments: buffer arguments (and the relocations
//! of by-value bytes) become device addresses of the caller's own allocations, and every argument
//! must match its parameter's size, declared type and use (a parameter the kernel uses as a
//! global address takes only a buffer).

use super::types::{BufferId, KernelArg, Relocation, SubmitArg};
use crate::error::{invalid, out_of_bounds, quoted, GpuError};
use tasklet_worker::{KernelInfo, ParamInfo, ParamType, MAX_PARAM_BYTES};

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
            let named = || {
                format!(
                    "argument {i} ({}) of kernel {}",
                    quoted(&param.name),
                    quoted(&info.name)
                )
            };
            check_type(arg, param).map_err(|why| invalid(format!("{} {why}", named())))?;
            let scalar;
            let (bytes, relocations): (&[u8], &[Relocation]) = match *arg {
                KernelArg::Buffer { buffer: id, offset } => {
                    let (addr, size) =
                        buffer(id).map_err(|e| RelocationError::Buffer(e).in_argument(&named()))?;
                    if offset > size {
                        return Err(out_of_bounds(format!(
                            "argument {i}: offset {offset} is past the end of its {size}-byte buffer"
                        )));
                    }
                    scalar = (addr + offset).to_le_bytes();
                    (&scalar, &[])
                }
                KernelArg::I32(v) => (&v.to_le_bytes()[..], &[]),
                KernelArg::U32(v) => (&v.to_le_bytes()[..], &[]),
                KernelArg::I64(v) => (&v.to_le_bytes()[..], &[]),
                KernelArg::U64(v) => (&v.to_le_bytes()[..], &[]),
                KernelArg::F32(v) => (&v.to_le_bytes()[..], &[]),
                KernelArg::F64(v) => (&v.to_le_bytes()[..], &[]),
                KernelArg::Bytes(v) => (v, &[]),
                KernelArg::Relocated { bytes, relocations } => (bytes, relocations),
            };
            if bytes.len() != param.size as usize {
                return Err(invalid(format!(
                    "{} is {} bytes, the parameter takes {}",
                    named(),
                    bytes.len(),
                    param.size
                )));
            }
            let at = at as usize;
            let slot = block.get_mut(at..at + bytes.len()).ok_or_else(|| {
                invalid(format!(
                    "argument {i} falls outside kernel {}'s parameter space",
                    quoted(&info.name)
                ))
            })?;
            slot.copy_from_slice(bytes);
            relocate(slot, relocations, &mut buffer).map_err(|e| e.in_argument(&named()))?;
        }
        Ok(())
    }
}

/// Why `arg` cannot be passed for `param`, as the rest of a sentence naming the argument; `Ok`
/// when its kind fits the parameter's declared type and use. Sizes are checked apart.
///
/// A parameter the kernel uses as a global address takes only a buffer. Otherwise: integers of
/// the parameter's width, of either signedness (the same bits); floats only for a float of their
/// width; a buffer for a 64-bit integer; any of those of the width for untyped bits (`.b32`,
/// `.b64`); and bytes (plain or relocated) for anything, the escape hatch for types no case
/// names (`.u16`, `.f16`, a struct) and how GPU_SUBMIT's arguments arrive.
fn check_type(arg: &KernelArg<'_>, param: &ParamInfo) -> Result<(), String> {
    let bytes = matches!(arg, KernelArg::Bytes(_) | KernelArg::Relocated { .. });
    if param.used_as_address {
        if matches!(arg, KernelArg::Buffer { .. }) {
            return Ok(());
        }
        return Err(format!(
            "is {}, but the kernel uses the parameter as a global address: pass a buffer of this session \
             (an address as a number or as bytes is refused)",
            arg_kind(arg)
        ));
    }
    let size = param.size;
    let int = matches!(
        arg,
        KernelArg::I32(_) | KernelArg::U32(_) | KernelArg::I64(_) | KernelArg::U64(_)
    );
    let fits = match param.ty {
        _ if bytes => true,
        ParamType::Unsigned | ParamType::Signed => {
            int || size == 8 && matches!(arg, KernelArg::Buffer { .. })
        }
        ParamType::Float => matches!(arg, KernelArg::F32(_) | KernelArg::F64(_)),
        ParamType::Bits => !matches!(arg, KernelArg::Buffer { .. }) || size == 8,
        ParamType::Aggregate => false,
    };
    // A scalar of the right kind but the wrong width is left to the size check, which says
    // both sizes.
    if fits {
        return Ok(());
    }
    Err(format!(
        "is {}, but the parameter is declared {}: pass {}",
        arg_kind(arg),
        param.ty.ptx(size),
        what_fits(param)
    ))
}

/// An argument's kind, for messages: `an f32`, `a buffer`, `12 bytes`.
fn arg_kind(arg: &KernelArg<'_>) -> String {
    match arg {
        KernelArg::Buffer { .. } => "a buffer".into(),
        KernelArg::I32(_) => "an i32".into(),
        KernelArg::U32(_) => "a u32".into(),
        KernelArg::I64(_) => "an i64".into(),
        KernelArg::U64(_) => "a u64".into(),
        KernelArg::F32(_) => "an f32".into(),
        KernelArg::F64(_) => "an f64".into(),
        KernelArg::Bytes(b) => format!("{} bytes", b.len()),
        KernelArg::Relocated { bytes, relocations } => format!(
            "{} bytes with {} buffer relocation(s)",
            bytes.len(),
            relocations.len()
        ),
    }
}

/// What a parameter takes, for messages.
fn what_fits(param: &ParamInfo) -> String {
    let size = param.size;
    let typed = match (param.ty, size) {
        (ParamType::Unsigned | ParamType::Signed, 4) => "a u32 or an i32",
        (ParamType::Unsigned | ParamType::Signed, 8) => "a u64, an i64 or a buffer",
        (ParamType::Bits, 4) => "a u32, an i32 or an f32",
        (ParamType::Bits, 8) => "a u64, an i64, an f64 or a buffer",
        (ParamType::Float, 4) => "an f32",
        (ParamType::Float, 8) => "an f64",
        _ => return format!("its {size} bytes (plain, or with buffer relocations)"),
    };
    format!("{typed}, or its {size} bytes")
}

/// Why a relocation (or a buffer argument) was refused, before the argument is named.
enum RelocationError {
    /// Not where an address can go: `invalid-argument`.
    Misplaced(String),
    /// The buffer's own check failed (a foreign buffer), or the offset lies past it.
    Buffer(GpuError),
}

impl RelocationError {
    fn in_argument(self, named: &str) -> GpuError {
        match self {
            RelocationError::Misplaced(why) => invalid(format!("{named}: {why}")),
            RelocationError::Buffer(GpuError::OutOfBounds(why)) => {
                out_of_bounds(format!("{named}: {why}"))
            }
            RelocationError::Buffer(GpuError::InvalidArgument(why)) => {
                invalid(format!("{named}: {why}"))
            }
            RelocationError::Buffer(other) => other,
        }
    }
}

/// Writes each relocation's buffer address over `slot`, the argument's bytes in the argument
/// block. Each must lie within them, at a multiple of 8, no two at one place, and name one of
/// the session's buffers at an offset within it.
fn relocate(
    slot: &mut [u8],
    relocations: &[Relocation],
    buffer: &mut impl FnMut(BufferId) -> Result<(u64, u64), GpuError>,
) -> Result<(), RelocationError> {
    if relocations.is_empty() {
        return Ok(());
    }
    let places = slot.len() / 8;
    if relocations.len() > places {
        return Err(RelocationError::Misplaced(format!(
            "{} relocations cannot fit in {} bytes (8 bytes each)",
            relocations.len(),
            slot.len()
        )));
    }
    let mut taken = vec![false; places];
    for (r, reloc) in relocations.iter().enumerate() {
        let at = reloc.at as usize;
        if !at.is_multiple_of(8) || at + 8 > slot.len() {
            return Err(RelocationError::Misplaced(format!(
                "relocation {r} at byte {at} is not an 8-byte-aligned place within its {} bytes \
                 (an address goes at a multiple of 8, with 8 bytes before the end)",
                slot.len()
            )));
        }
        if std::mem::replace(&mut taken[at / 8], true) {
            return Err(RelocationError::Misplaced(format!(
                "relocation {r} at byte {at} is at the place of an earlier one"
            )));
        }
        let (addr, size) = buffer(reloc.buffer).map_err(RelocationError::Buffer)?;
        if reloc.offset > size {
            return Err(RelocationError::Buffer(out_of_bounds(format!(
                "relocation {r}: offset {} is past the end of its {size}-byte buffer",
                reloc.offset
            ))));
        }
        slot[at..at + 8].copy_from_slice(&(addr + reloc.offset).to_le_bytes());
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn param(name: &str, ty: ParamType, size: u32, used_as_address: bool) -> ParamInfo {
        ParamInfo {
            name: name.into(),
            size,
            align: size.clamp(1, 8),
            pointer_sized: size == 8 && matches!(ty, ParamType::Unsigned | ParamType::Bits),
            ty,
            used_as_address,
        }
    }

    /// `k(float* out, unsigned n, .b64 bits, unsigned long long count, struct {int*, int*} s)`.
    fn kernel() -> KernelEntry {
        KernelEntry::new(KernelInfo {
            name: "k".into(),
            params: vec![
                param("out", ParamType::Unsigned, 8, true),
                param("n", ParamType::Unsigned, 4, false),
                param("bits", ParamType::Bits, 8, false),
                param("count", ParamType::Unsigned, 8, false),
                param("s", ParamType::Aggregate, 16, false),
            ],
        })
    }

    const OWN: BufferId = BufferId(7);

    /// Builds `args` with buffer 7 at 0x1000 (256 bytes); any other buffer is foreign.
    fn build(args: &[KernelArg<'_>]) -> Result<Vec<u8>, GpuError> {
        let mut block = Vec::new();
        kernel()
            .argument_block(
                args,
                |id| {
                    if id == OWN {
                        Ok((0x1000, 256))
                    } else {
                        Err(invalid(format!("buffer {id} belongs to another session")))
                    }
                },
                &mut block,
            )
            .map(|()| block)
    }

    fn with(i: usize, arg: KernelArg<'_>) -> Vec<KernelArg<'_>> {
        let mut args = vec![
            KernelArg::Buffer {
                buffer: OWN,
                offset: 0,
            },
            KernelArg::U32(3),
            KernelArg::F64(1.0),
            KernelArg::U64(9),
            KernelArg::Bytes(&[0; 16]),
        ];
        args[i] = arg;
        args
    }

    #[track_caller]
    fn refused(args: &[KernelArg<'_>], name: &str, says: &str) {
        let e = build(args).expect_err("refused");
        assert_eq!(e.name(), name, "{e}");
        assert!(e.message().contains(says), "{says:?} not in: {e}");
    }

    #[test]
    fn scalars_are_checked_against_the_declared_type() {
        assert!(build(&with(1, KernelArg::I32(-1))).is_ok());
        refused(
            &with(1, KernelArg::F32(1.0)),
            "invalid-argument",
            "argument 1 (\"n\") of kernel \"k\" is an f32, but the parameter is declared .u32: pass a u32 or an i32, or its 4 bytes",
        );
        // Untyped bits take any 8-byte scalar, a buffer too; a 64-bit count a u64 or a buffer.
        for arg in [
            KernelArg::U64(1),
            KernelArg::I64(-1),
            KernelArg::Buffer {
                buffer: OWN,
                offset: 8,
            },
        ] {
            assert!(build(&with(2, arg)).is_ok(), "{arg:?}");
            assert!(build(&with(3, arg)).is_ok(), "{arg:?}");
        }
        refused(
            &with(3, KernelArg::F64(1.0)),
            "invalid-argument",
            "declared .u64",
        );
        // The right kind at the wrong width is a size error.
        refused(
            &with(3, KernelArg::U32(1)),
            "invalid-argument",
            "is 4 bytes, the parameter takes 8",
        );
        // A struct takes bytes only.
        refused(
            &with(4, KernelArg::U64(1)),
            "invalid-argument",
            "declared .b8[16]: pass its 16 bytes",
        );
        // Bytes are the escape hatch for any non-pointer parameter.
        assert!(build(&with(1, KernelArg::Bytes(&[1, 0, 0, 0]))).is_ok());
    }

    #[test]
    fn an_address_parameter_takes_only_a_buffer() {
        for arg in [
            KernelArg::U64(0x1000),
            KernelArg::Bytes(&[0; 8]),
            KernelArg::I64(1),
        ] {
            refused(
                &with(0, arg),
                "invalid-argument",
                "uses the parameter as a global address",
            );
        }
        refused(
            &with(
                0,
                KernelArg::Buffer {
                    buffer: BufferId(8),
                    offset: 0,
                },
            ),
            "invalid-argument",
            "another session",
        );
        let block = build(&with(
            0,
            KernelArg::Buffer {
                buffer: OWN,
                offset: 16,
            },
        ))
        .unwrap();
        assert_eq!(&block[0..8], &0x1010u64.to_le_bytes());
    }

    #[test]
    fn relocations_place_buffer_addresses_in_by_value_bytes() {
        let relocs = [
            Relocation {
                at: 8,
                buffer: OWN,
                offset: 4,
            },
            Relocation {
                at: 0,
                buffer: OWN,
                offset: 256,
            },
        ];
        let bytes = [0xAAu8; 16];
        let block = build(&with(
            4,
            KernelArg::Relocated {
                bytes: &bytes,
                relocations: &relocs,
            },
        ))
        .unwrap();
        // Struct `s` is at 32: out 0..8, n 8..12, bits 16..24, count 24..32.
        assert_eq!(&block[32..40], &0x1100u64.to_le_bytes());
        assert_eq!(&block[40..48], &0x1004u64.to_le_bytes());
    }

    #[test]
    fn misplaced_foreign_or_out_of_bounds_relocations_are_refused() {
        let bytes = [0u8; 16];
        let one = |at, buffer, offset| [Relocation { at, buffer, offset }];
        let cases = [
            (
                one(4, OWN, 0),
                "invalid-argument",
                "relocation 0 at byte 4 is not an 8-byte-aligned place",
            ),
            (one(16, OWN, 0), "invalid-argument", "within its 16 bytes"),
            (
                one(u32::MAX, OWN, 0),
                "invalid-argument",
                "not an 8-byte-aligned place",
            ),
            (
                one(0, BufferId(8), 0),
                "invalid-argument",
                "another session",
            ),
            (
                one(8, OWN, 257),
                "out-of-bounds",
                "relocation 0: offset 257 is past the end of its 256-byte buffer",
            ),
        ];
        for (relocs, name, says) in &cases {
            let args = with(
                4,
                KernelArg::Relocated {
                    bytes: &bytes,
                    relocations: relocs,
                },
            );
            refused(&args, name, says);
            refused(&args, name, "argument 4 (\"s\") of kernel \"k\"");
        }
        let twice = [one(8, OWN, 0)[0], one(8, OWN, 8)[0]];
        let args = with(
            4,
            KernelArg::Relocated {
                bytes: &bytes,
                relocations: &twice,
            },
        );
        refused(&args, "invalid-argument", "at the place of an earlier one");
        let many = [one(0, OWN, 0)[0]; 3];
        let args = with(
            4,
            KernelArg::Relocated {
                bytes: &bytes,
                relocations: &many,
            },
        );
        refused(
            &args,
            "invalid-argument",
            "3 relocations cannot fit in 16 bytes",
        );
    }
}
