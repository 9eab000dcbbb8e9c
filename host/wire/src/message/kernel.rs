//! Kernels as messages see them: the typed arguments of a LAUNCH and the kernel list a module
//! load replies with.

use crate::codec::{Reader, Writer};
use crate::error::{DecodeError, EncodeError};
use crate::ids::BufferId;
use crate::ids::ModuleId;
use crate::limits::{
    MAX_ARG_BYTES, MAX_KERNELS, MAX_KERNEL_PARAMS, MAX_LAUNCH_ARGS, MAX_NAME, MAX_PTX_TYPE,
};

/// The fewest bytes each list item takes on the wire (empty strings, the shortest variant).
const ARG_MIN_BYTES: usize = 1 + 4;
const KERNEL_MIN_BYTES: usize = 4 + 4;
const PARAM_MIN_BYTES: usize = 4 + 4 + 4 + 1 + 1;

/// One argument of a LAUNCH. The node builds the kernel's argument block from these itself: a
/// device pointer is only ever a `Buffer` of the launching session, resolved by the node, never
/// an address the client supplies.
#[derive(Debug, Clone)]
pub enum KernelArg {
    /// Tag 0: the device address of `offset` bytes into a buffer of the session.
    Buffer { buffer: BufferId, offset: u64 },
    /// Tag 1.
    I32(i32),
    /// Tag 2.
    U32(u32),
    /// Tag 3.
    I64(i64),
    /// Tag 4.
    U64(u64),
    /// Tag 5: IEEE 754 bits, passed as they are (NaN payloads included).
    F32(f32),
    /// Tag 6: IEEE 754 bits, passed as they are.
    F64(f64),
    /// Tag 7: a by-value parameter (a struct), at most [`MAX_ARG_BYTES`].
    Bytes(Vec<u8>),
    /// Tag 8: a by-value parameter holding device pointers: its bytes (at most
    /// [`MAX_ARG_BYTES`]), and where the node writes each buffer's address into them (at most
    /// [`MAX_RELOCATIONS`]).
    Relocated {
        bytes: Vec<u8>,
        relocations: Vec<Relocation>,
    },
}

/// The most relocations one argument carries: one per 8 bytes of the largest argument.
pub const MAX_RELOCATIONS: usize = MAX_ARG_BYTES / 8;

/// One relocation of a [`KernelArg::Relocated`]: the device address of `offset` bytes into a
/// buffer of the session, written as 8 little-endian bytes at byte `at` of the argument. The
/// node checks the place (a multiple of 8, within the bytes), the buffer and the offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relocation {
    pub at: u32,
    pub buffer: BufferId,
    pub offset: u64,
}

/// `at`, `buffer`, `offset`.
const RELOCATION_BYTES: usize = 4 + 8 + 8;

/// Equality is of what goes on the wire, so floats compare by their bits (NaN equals itself).
impl PartialEq for KernelArg {
    fn eq(&self, other: &KernelArg) -> bool {
        use KernelArg::*;
        match (self, other) {
            (
                Buffer {
                    buffer: b1,
                    offset: o1,
                },
                Buffer {
                    buffer: b2,
                    offset: o2,
                },
            ) => b1 == b2 && o1 == o2,
            (I32(a), I32(b)) => a == b,
            (U32(a), U32(b)) => a == b,
            (I64(a), I64(b)) => a == b,
            (U64(a), U64(b)) => a == b,
            (F32(a), F32(b)) => a.to_bits() == b.to_bits(),
            (F64(a), F64(b)) => a.to_bits() == b.to_bits(),
            (Bytes(a), Bytes(b)) => a == b,
            (
                Relocated {
                    bytes: b1,
                    relocations: r1,
                },
                Relocated {
                    bytes: b2,
                    relocations: r2,
                },
            ) => b1 == b2 && r1 == r2,
            _ => false,
        }
    }
}

impl Eq for KernelArg {}

impl KernelArg {
    pub(crate) fn encode(&self, w: &mut Writer) -> Result<(), EncodeError> {
        match self {
            KernelArg::Buffer { buffer, offset } => {
                w.u8(0);
                w.u64(buffer.0);
                w.u64(*offset);
            }
            KernelArg::I32(v) => {
                w.u8(1);
                w.i32(*v);
            }
            KernelArg::U32(v) => {
                w.u8(2);
                w.u32(*v);
            }
            KernelArg::I64(v) => {
                w.u8(3);
                w.i64(*v);
            }
            KernelArg::U64(v) => {
                w.u8(4);
                w.u64(*v);
            }
            KernelArg::F32(v) => {
                w.u8(5);
                w.u32(v.to_bits());
            }
            KernelArg::F64(v) => {
                w.u8(6);
                w.u64(v.to_bits());
            }
            KernelArg::Bytes(bytes) => {
                w.u8(7);
                w.bytes("args[].bytes", bytes, MAX_ARG_BYTES)?;
            }
            KernelArg::Relocated { bytes, relocations } => {
                w.u8(8);
                w.bytes("args[].bytes", bytes, MAX_ARG_BYTES)?;
                w.count("args[].relocations", relocations.len(), MAX_RELOCATIONS)?;
                for r in relocations {
                    w.u32(r.at);
                    w.u64(r.buffer.0);
                    w.u64(r.offset);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<KernelArg, DecodeError> {
        Ok(match r.u8("args[].tag")? {
            0 => KernelArg::Buffer {
                buffer: BufferId(r.u64("args[].buffer")?),
                offset: r.u64("args[].offset")?,
            },
            1 => KernelArg::I32(r.i32("args[].i32")?),
            2 => KernelArg::U32(r.u32("args[].u32")?),
            3 => KernelArg::I64(r.i64("args[].i64")?),
            4 => KernelArg::U64(r.u64("args[].u64")?),
            5 => KernelArg::F32(f32::from_bits(r.u32("args[].f32")?)),
            6 => KernelArg::F64(f64::from_bits(r.u64("args[].f64")?)),
            7 => KernelArg::Bytes(r.bytes("args[].bytes", MAX_ARG_BYTES)?.to_vec()),
            8 => {
                let bytes = r.bytes("args[].bytes", MAX_ARG_BYTES)?.to_vec();
                let count = r.count("args[].relocations", MAX_RELOCATIONS, RELOCATION_BYTES)?;
                let mut relocations = Vec::with_capacity(count);
                for _ in 0..count {
                    relocations.push(Relocation {
                        at: r.u32("relocations[].at")?,
                        buffer: BufferId(r.u64("relocations[].buffer")?),
                        offset: r.u64("relocations[].offset")?,
                    });
                }
                KernelArg::Relocated { bytes, relocations }
            }
            tag => {
                return Err(DecodeError::InvalidValue {
                    field: "args[].tag",
                    value: tag.into(),
                })
            }
        })
    }
}

/// A kernel parameter as the module declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelParam {
    pub name: String,
    /// Bytes.
    pub size: u32,
    /// Alignment in bytes.
    pub align: u32,
    /// The PTX type (`.u64`, `.f32`, `.b8`), when the node knows it.
    pub ptx_type: Option<String>,
    /// The kernel uses the parameter as a global memory address (as the node's worker reads the
    /// module): LAUNCH must pass a buffer of the session there, never a number.
    pub pointer: bool,
}

/// A kernel (entry) of a loaded module; LAUNCH names it by its index in the module's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    pub name: String,
    pub params: Vec<KernelParam>,
}

/// MODULE_LOAD's and MODULE_LOAD_SOURCE's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedModule {
    pub module: ModuleId,
    pub kernels: Vec<Kernel>,
}

impl LoadedModule {
    pub(crate) fn encode(&self, w: &mut Writer) -> Result<(), EncodeError> {
        w.u64(self.module.0);
        w.count("kernels", self.kernels.len(), MAX_KERNELS)?;
        for kernel in &self.kernels {
            w.string("kernels[].name", &kernel.name, MAX_NAME)?;
            w.count("kernels[].params", kernel.params.len(), MAX_KERNEL_PARAMS)?;
            for param in &kernel.params {
                w.string("params[].name", &param.name, MAX_NAME)?;
                w.u32(param.size);
                w.u32(param.align);
                match &param.ptx_type {
                    None => w.bool(false),
                    Some(ty) => {
                        w.bool(true);
                        w.string("params[].ptx_type", ty, MAX_PTX_TYPE)?;
                    }
                }
                w.bool(param.pointer);
            }
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<LoadedModule, DecodeError> {
        let module = ModuleId(r.u64("module")?);
        let count = r.count("kernels", MAX_KERNELS, KERNEL_MIN_BYTES)?;
        let mut kernels = Vec::with_capacity(count);
        for _ in 0..count {
            let name = r.string("kernels[].name", MAX_NAME)?;
            let param_count = r.count("kernels[].params", MAX_KERNEL_PARAMS, PARAM_MIN_BYTES)?;
            let mut params = Vec::with_capacity(param_count);
            for _ in 0..param_count {
                let name = r.string("params[].name", MAX_NAME)?;
                let size = r.u32("params[].size")?;
                let align = r.u32("params[].align")?;
                let ptx_type = if r.present("params[].ptx_type")? {
                    Some(r.string("params[].ptx_type", MAX_PTX_TYPE)?)
                } else {
                    None
                };
                let pointer = r.bool("params[].pointer")?;
                params.push(KernelParam {
                    name,
                    size,
                    align,
                    ptx_type,
                    pointer,
                });
            }
            kernels.push(Kernel { name, params });
        }
        Ok(LoadedModule { module, kernels })
    }
}

/// A LAUNCH's argument list: a `u32` count, then each argument as its tag byte and value.
pub(crate) fn encode_args(args: &[KernelArg], w: &mut Writer) -> Result<(), EncodeError> {
    w.count("args", args.len(), MAX_LAUNCH_ARGS)?;
    args.iter().try_for_each(|arg| arg.encode(w))
}

pub(crate) fn decode_args(r: &mut Reader) -> Result<Vec<KernelArg>, DecodeError> {
    let count = r.count("args", MAX_LAUNCH_ARGS, ARG_MIN_BYTES)?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        args.push(KernelArg::decode(r)?);
    }
    Ok(args)
}
