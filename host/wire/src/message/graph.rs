//! GRAPH: a session's recorded graph, one operation per request (contract 0.2's `graph`
//! resource over the fabric). The node's GPU service checks each operation as it checks the
//! session operation of the same name; ids are the node's, checked against the connection.

use super::kernel::KernelArg;
use crate::codec::{Reader, Writer};
use crate::error::{DecodeError, EncodeError};
use crate::ids::{BufferId, ModuleId, SessionId};
use crate::limits::MAX_LAUNCH_ARGS;

/// One argument of a launch recorded in a graph: a LAUNCH's argument (tag 0, then the
/// argument), or the device address of one of the graph's device scalars (tag 1, its index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphArg {
    Arg(KernelArg),
    Scalar(u32),
}

/// What a GRAPH request does to graph `graph` of `session` (for `Create`, `graph` is 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphOp {
    /// Tag 0: a new graph; the reply's value is its id.
    Create,
    /// Tag 1: record a launch; the reply's value is its node's index.
    Launch {
        module: ModuleId,
        kernel: u32,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        args: Vec<GraphArg>,
    },
    /// Tag 2: record a copy; the reply's value is its node's index.
    Copy {
        dst: BufferId,
        dst_offset: u64,
        src: BufferId,
        src_offset: u64,
        len: u64,
    },
    /// Tag 3: record a fill; the reply's value is its node's index.
    Fill {
        dst: BufferId,
        offset: u64,
        len: u64,
        value: u32,
    },
    /// Tag 4: a new device scalar; the reply's value is its index.
    Scalar { value: u64 },
    /// Tag 5: set a device scalar for the next replays.
    SetScalar { index: u32, value: u64 },
    /// Tag 6: replace a recorded launch's arguments for the next replays.
    SetArgs { node: u32, args: Vec<GraphArg> },
    /// Tag 7: replay the graph `times` times (the reply comes once the replays are queued).
    Replay { times: u32 },
    /// Tag 8: drop the graph.
    Drop,
}

/// GRAPH's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Graph {
    pub session: SessionId,
    pub graph: u64,
    pub op: GraphOp,
}

/// The fewest bytes a graph argument takes: its tag and a 4-byte value.
const GRAPH_ARG_MIN_BYTES: usize = 1 + 4;

fn encode_graph_args(args: &[GraphArg], w: &mut Writer) -> Result<(), EncodeError> {
    w.count("args", args.len(), MAX_LAUNCH_ARGS)?;
    for arg in args {
        match arg {
            GraphArg::Arg(a) => {
                w.u8(0);
                a.encode(w)?;
            }
            GraphArg::Scalar(index) => {
                w.u8(1);
                w.u32(*index);
            }
        }
    }
    Ok(())
}

fn decode_graph_args(r: &mut Reader) -> Result<Vec<GraphArg>, DecodeError> {
    let n = r.count("args", MAX_LAUNCH_ARGS, GRAPH_ARG_MIN_BYTES)?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        args.push(match r.u8("graph arg tag")? {
            0 => GraphArg::Arg(KernelArg::decode(r)?),
            1 => GraphArg::Scalar(r.u32("scalar")?),
            tag => {
                return Err(DecodeError::InvalidValue {
                    field: "args[].tag",
                    value: tag.into(),
                })
            }
        });
    }
    Ok(args)
}

fn dims(w: &mut Writer, d: [u32; 3]) {
    d.into_iter().for_each(|v| w.u32(v));
}

fn read_dims(r: &mut Reader, field: &'static str) -> Result<[u32; 3], DecodeError> {
    Ok([r.u32(field)?, r.u32(field)?, r.u32(field)?])
}

impl Graph {
    pub(crate) fn encode(&self, w: &mut Writer) -> Result<(), EncodeError> {
        w.u64(self.session.0);
        w.u64(self.graph);
        match &self.op {
            GraphOp::Create => w.u8(0),
            GraphOp::Launch {
                module,
                kernel,
                grid,
                block,
                shared_mem_bytes,
                args,
            } => {
                w.u8(1);
                w.u64(module.0);
                w.u32(*kernel);
                dims(w, *grid);
                dims(w, *block);
                w.u32(*shared_mem_bytes);
                encode_graph_args(args, w)?;
            }
            GraphOp::Copy {
                dst,
                dst_offset,
                src,
                src_offset,
                len,
            } => {
                w.u8(2);
                w.u64(dst.0);
                w.u64(*dst_offset);
                w.u64(src.0);
                w.u64(*src_offset);
                w.u64(*len);
            }
            GraphOp::Fill {
                dst,
                offset,
                len,
                value,
            } => {
                w.u8(3);
                w.u64(dst.0);
                w.u64(*offset);
                w.u64(*len);
                w.u32(*value);
            }
            GraphOp::Scalar { value } => {
                w.u8(4);
                w.u64(*value);
            }
            GraphOp::SetScalar { index, value } => {
                w.u8(5);
                w.u32(*index);
                w.u64(*value);
            }
            GraphOp::SetArgs { node, args } => {
                w.u8(6);
                w.u32(*node);
                encode_graph_args(args, w)?;
            }
            GraphOp::Replay { times } => {
                w.u8(7);
                w.u32(*times);
            }
            GraphOp::Drop => w.u8(8),
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Graph, DecodeError> {
        let session = SessionId(r.u64("session")?);
        let graph = r.u64("graph")?;
        let op = match r.u8("graph op")? {
            0 => GraphOp::Create,
            1 => GraphOp::Launch {
                module: ModuleId(r.u64("module")?),
                kernel: r.u32("kernel")?,
                grid: read_dims(r, "grid")?,
                block: read_dims(r, "block")?,
                shared_mem_bytes: r.u32("shared_mem_bytes")?,
                args: decode_graph_args(r)?,
            },
            2 => GraphOp::Copy {
                dst: BufferId(r.u64("dst")?),
                dst_offset: r.u64("dst_offset")?,
                src: BufferId(r.u64("src")?),
                src_offset: r.u64("src_offset")?,
                len: r.u64("len")?,
            },
            3 => GraphOp::Fill {
                dst: BufferId(r.u64("dst")?),
                offset: r.u64("offset")?,
                len: r.u64("len")?,
                value: r.u32("value")?,
            },
            4 => GraphOp::Scalar {
                value: r.u64("value")?,
            },
            5 => GraphOp::SetScalar {
                index: r.u32("index")?,
                value: r.u64("value")?,
            },
            6 => GraphOp::SetArgs {
                node: r.u32("node")?,
                args: decode_graph_args(r)?,
            },
            7 => GraphOp::Replay {
                times: r.u32("times")?,
            },
            8 => GraphOp::Drop,
            tag => {
                return Err(DecodeError::InvalidValue {
                    field: "op",
                    value: tag.into(),
                })
            }
        };
        Ok(Graph { session, graph, op })
    }
}
