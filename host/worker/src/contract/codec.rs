//! The host/worker wire format: a sans-IO codec, no transport in sight.
//!
//! Every frame is hand-encoded little-endian so that its layout is fixed by this file alone (no
//! serializer version can change it) and so that decoding bytes written by an untrusted worker is
//! a bounds-checked walk that returns a [`DecodeError`], never a panic or an unbounded allocation.
//!
//! Frame layout: `tag: u8, id: varint, fields…`. Integers are little-endian; `str` and `bytes` are a
//! `u32` length then the bytes; lists are a `u32` count then the items. A frame must be consumed
//! exactly: trailing bytes are an error. Bulk data (write payloads, read results) does not travel
//! in frames but in the channel's data region; frames only carry its length.
//!
//! The id and a launch's fields are LEB128 varints instead (lengths included), because a launch is
//! the one frame on a hot path whose size matters: the ring carries it in whole cache lines, each a
//! transfer between the host's core and the worker's, and with varints a launch whose arguments
//! are a few pointers and sizes is one line ([`super::channel::ring`]). The kernel goes as its
//! index in the module, not its name: the host has resolved the name already. A varint longer
//! than its type allows is a [`DecodeError::InvalidValue`].
//!
//! `id` lets a response name its request, so posted (asynchronous) ops need no change to the
//! framing; the host queues launches (which get no response) and has one call at a time
//! outstanding, whose echo it checks.

use std::time::Duration;

use super::messages::{Compiled, GraphOp, LoadedModule, Request, Response, WorkerInfo};
use super::ErrorKind;
use super::{Launch, LaunchLimits};
use tasklet_ptx::{KernelInfo, ParamInfo, ParamType};

/// Messages longer than this are cut (at a char boundary) when encoded: an error message is for
/// people and must not be able to crowd out the message area.
pub const MAX_ERROR_MESSAGE: usize = 8 * 1024;

/// Why a frame did not decode. Offsets are into the frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("frame truncated: {what} needs {need} bytes at offset {at}, frame has {len}")]
    Truncated {
        what: &'static str,
        at: usize,
        need: u64,
        len: usize,
    },
    #[error("unknown {what} tag {tag}")]
    UnknownTag { what: &'static str, tag: u8 },
    #[error("{what} at offset {at} is not valid UTF-8")]
    InvalidUtf8 { what: &'static str, at: usize },
    #[error("invalid {what}: {value}")]
    InvalidValue { what: &'static str, value: u64 },
    #[error("{extra} trailing bytes after a complete frame")]
    TrailingBytes { extra: usize },
}

const REQ_PING: u8 = 1;
const REQ_ALLOC: u8 = 2;
const REQ_FREE: u8 = 3;
const REQ_WRITE: u8 = 4;
const REQ_READ: u8 = 5;
const REQ_COPY: u8 = 6;
const REQ_LOAD_MODULE: u8 = 7;
const REQ_LOAD_SOURCE: u8 = 8;
const REQ_UNLOAD_MODULE: u8 = 9;
const REQ_LAUNCH: u8 = 10;
const REQ_SYNC: u8 = 11;
const REQ_RESET: u8 = 12;
const REQ_INFO: u8 = 13;
const REQ_ATTACH_MEMORY: u8 = 14;
const REQ_DETACH_MEMORY: u8 = 15;
const REQ_WRITE_FROM: u8 = 16;
const REQ_READ_INTO: u8 = 17;
const REQ_GRAPH_CREATE: u8 = 18;
const REQ_GRAPH_SET_ARGS: u8 = 19;
const REQ_GRAPH_REPLAY: u8 = 20;
const REQ_GRAPH_DESTROY: u8 = 21;
const REQ_MAP_DEVICE: u8 = 22;
const REQ_UNMAP_DEVICE: u8 = 23;
const REQ_LAUNCH_PERSISTENT: u8 = 24;
const REQ_ALLOC_SHAREABLE: u8 = 25;
const REQ_EXPORT: u8 = 26;
const REQ_COPY_FROM_PEER: u8 = 27;
const REQ_LOAD_MODULE_CACHED: u8 = 28;
const REQ_LOAD_SOURCE_CACHED: u8 = 29;
const REQ_WRITE_INLINE: u8 = 30;
const REQ_RECORD_MARK: u8 = 31;
const REQ_MARK_ELAPSED: u8 = 32;
const REQ_QUERY_MARK: u8 = 33;
const REQ_WAIT_MARK: u8 = 34;

const OP_LAUNCH: u8 = 1;
const OP_COPY: u8 = 2;
const OP_FILL: u8 = 3;

const RESP_OK: u8 = 1;
const RESP_ALLOCATED: u8 = 2;
const RESP_MODULE: u8 = 3;
const RESP_INFO: u8 = 4;
const RESP_ERROR: u8 = 5;
const RESP_GRAPH: u8 = 6;
const RESP_EXPORTED: u8 = 7;
const RESP_CACHED_MODULE: u8 = 8;
const RESP_ELAPSED: u8 = 9;
const RESP_MARK_DONE: u8 = 10;

/// Appends the encoding of `req` (with request id `id`) to `out`.
pub fn encode_request(id: u64, req: &Request<'_>, out: &mut Vec<u8>) {
    let mut w = Writer(out);
    match req {
        Request::Ping => w.head(REQ_PING, id),
        Request::Alloc { bytes } => {
            w.head(REQ_ALLOC, id);
            w.u64(*bytes);
        }
        Request::AllocShareable { bytes } => {
            w.head(REQ_ALLOC_SHAREABLE, id);
            w.u64(*bytes);
        }
        Request::Export { addr } => {
            w.head(REQ_EXPORT, id);
            w.u64(*addr);
        }
        Request::CopyFromPeer {
            dst,
            handle,
            offset,
            len,
        } => {
            w.head(REQ_COPY_FROM_PEER, id);
            w.u64(*dst);
            w.var_bytes(handle);
            w.u64(*offset);
            w.u64(*len);
        }
        Request::Free { addr } => {
            w.head(REQ_FREE, id);
            w.u64(*addr);
        }
        Request::Write { addr, len, after } => {
            w.head(REQ_WRITE, id);
            w.u64(*addr);
            w.u64(*len);
            w.after(*after);
        }
        Request::WriteInline { addr, data, after } => {
            w.head(REQ_WRITE_INLINE, id);
            w.u64(*addr);
            w.after(*after);
            w.bytes(data);
        }
        Request::Read { addr, len, after } => {
            w.head(REQ_READ, id);
            w.u64(*addr);
            w.u64(*len);
            w.after(*after);
        }
        Request::Copy { dst, src, len } => {
            w.head(REQ_COPY, id);
            w.u64(*dst);
            w.u64(*src);
            w.u64(*len);
        }
        Request::LoadModule { ptx } => {
            w.head(REQ_LOAD_MODULE, id);
            w.bytes(ptx.as_bytes());
        }
        Request::LoadSource { source, options } => {
            w.head(REQ_LOAD_SOURCE, id);
            w.bytes(source.as_bytes());
            w.options(options);
        }
        Request::LoadModuleCached { ptx, image } => {
            w.head(REQ_LOAD_MODULE_CACHED, id);
            w.bytes(ptx.as_bytes());
            w.bytes(image);
        }
        Request::LoadSourceCached { source, options } => {
            w.head(REQ_LOAD_SOURCE_CACHED, id);
            w.bytes(source.as_bytes());
            w.options(options);
        }
        Request::UnloadModule { id: module } => {
            w.head(REQ_UNLOAD_MODULE, id);
            w.u32(*module);
        }
        Request::Launch(l) => {
            w.head(REQ_LAUNCH, id);
            w.launch(l);
        }
        Request::GraphCreate { ops } => {
            w.head(REQ_GRAPH_CREATE, id);
            w.u32(len_u32(ops.len()));
            for op in ops {
                match op {
                    GraphOp::Launch(l) => {
                        w.u8(OP_LAUNCH);
                        w.launch(l);
                    }
                    GraphOp::Copy { dst, src, len } => {
                        w.u8(OP_COPY);
                        w.u64(*dst);
                        w.u64(*src);
                        w.u64(*len);
                    }
                    GraphOp::Fill { addr, len, value } => {
                        w.u8(OP_FILL);
                        w.u64(*addr);
                        w.u64(*len);
                        w.u32(*value);
                    }
                }
            }
        }
        Request::GraphSetArgs { graph, node, args } => {
            w.head(REQ_GRAPH_SET_ARGS, id);
            w.u32(*graph);
            w.u32(*node);
            w.var_bytes(args);
        }
        Request::GraphReplay {
            graph,
            times,
            writes,
        } => {
            w.head(REQ_GRAPH_REPLAY, id);
            w.u32(*graph);
            w.u32(*times);
            w.var_bytes(writes);
        }
        Request::GraphDestroy { graph } => {
            w.head(REQ_GRAPH_DESTROY, id);
            w.u32(*graph);
        }
        Request::MapDevice {
            memory,
            offset,
            len,
        } => {
            w.head(REQ_MAP_DEVICE, id);
            w.u64(*memory);
            w.u64(*offset);
            w.u64(*len);
        }
        Request::UnmapDevice { addr } => {
            w.head(REQ_UNMAP_DEVICE, id);
            w.u64(*addr);
        }
        Request::LaunchPersistent {
            launch,
            memory,
            control,
            status_memory,
            status,
        } => {
            w.head(REQ_LAUNCH_PERSISTENT, id);
            w.u64(*memory);
            w.u64(*control);
            w.u64(*status_memory);
            w.u64(*status);
            w.launch(launch);
        }
        Request::Sync => w.head(REQ_SYNC, id),
        Request::Reset => w.head(REQ_RESET, id),
        Request::Info => w.head(REQ_INFO, id),
        Request::AttachMemory {
            id: memory,
            capacity,
        } => {
            w.head(REQ_ATTACH_MEMORY, id);
            w.u64(*memory);
            w.u64(*capacity);
        }
        Request::DetachMemory { id: memory } => {
            w.head(REQ_DETACH_MEMORY, id);
            w.u64(*memory);
        }
        Request::WriteFrom {
            addr,
            memory,
            offset,
            len,
            after,
        } => {
            w.head(REQ_WRITE_FROM, id);
            w.u64(*addr);
            w.u64(*memory);
            w.u64(*offset);
            w.u64(*len);
            w.after(*after);
        }
        Request::ReadInto {
            addr,
            memory,
            offset,
            len,
            after,
        } => {
            w.head(REQ_READ_INTO, id);
            w.u64(*addr);
            w.u64(*memory);
            w.u64(*offset);
            w.u64(*len);
            w.after(*after);
        }
        Request::RecordMark { mark } => {
            w.head(REQ_RECORD_MARK, id);
            w.u32(*mark);
        }
        Request::MarkElapsed { start, end } => {
            w.head(REQ_MARK_ELAPSED, id);
            w.u32(*start);
            w.u32(*end);
        }
        Request::QueryMark { mark } => {
            w.head(REQ_QUERY_MARK, id);
            w.u32(*mark);
        }
        Request::WaitMark { mark } => {
            w.head(REQ_WAIT_MARK, id);
            w.u32(*mark);
        }
    }
}

/// Decodes one whole request frame; returns its id and the request, borrowing from `frame`.
pub fn decode_request(frame: &[u8]) -> Result<(u64, Request<'_>), DecodeError> {
    let mut r = Reader::new(frame);
    let tag = r.u8("request tag")?;
    let id = r.var("request id")?;
    let req = match tag {
        REQ_PING => Request::Ping,
        REQ_ALLOC => Request::Alloc {
            bytes: r.u64("alloc size")?,
        },
        REQ_FREE => Request::Free {
            addr: r.u64("free address")?,
        },
        REQ_WRITE => Request::Write {
            addr: r.u64("write address")?,
            len: r.u64("write length")?,
            after: r.after()?,
        },
        REQ_WRITE_INLINE => Request::WriteInline {
            addr: r.u64("write address")?,
            after: r.after()?,
            data: r.bytes("write data")?,
        },
        REQ_READ => Request::Read {
            addr: r.u64("read address")?,
            len: r.u64("read length")?,
            after: r.after()?,
        },
        REQ_COPY => Request::Copy {
            dst: r.u64("copy destination")?,
            src: r.u64("copy source")?,
            len: r.u64("copy length")?,
        },
        REQ_LOAD_MODULE => Request::LoadModule { ptx: r.str("ptx")? },
        REQ_LOAD_SOURCE => Request::LoadSource {
            source: r.str("source")?,
            options: r.options()?,
        },
        REQ_LOAD_MODULE_CACHED => Request::LoadModuleCached {
            ptx: r.str("ptx")?,
            image: r.bytes("module image")?,
        },
        REQ_LOAD_SOURCE_CACHED => Request::LoadSourceCached {
            source: r.str("source")?,
            options: r.options()?,
        },
        REQ_UNLOAD_MODULE => Request::UnloadModule {
            id: r.u32("module id")?,
        },
        REQ_LAUNCH => Request::Launch(r.launch()?),
        REQ_GRAPH_CREATE => {
            // An op is at least its tag and, for a launch, nine one-byte varints and its block's
            // length.
            let n = r.count("graph op count", 11)?;
            let mut ops = Vec::with_capacity(n);
            for _ in 0..n {
                ops.push(match r.u8("graph op tag")? {
                    OP_LAUNCH => GraphOp::Launch(r.launch()?),
                    OP_COPY => GraphOp::Copy {
                        dst: r.u64("copy destination")?,
                        src: r.u64("copy source")?,
                        len: r.u64("copy length")?,
                    },
                    OP_FILL => GraphOp::Fill {
                        addr: r.u64("fill address")?,
                        len: r.u64("fill length")?,
                        value: r.u32("fill value")?,
                    },
                    tag => {
                        return Err(DecodeError::UnknownTag {
                            what: "graph op",
                            tag,
                        })
                    }
                });
            }
            Request::GraphCreate { ops }
        }
        REQ_GRAPH_SET_ARGS => Request::GraphSetArgs {
            graph: r.u32("graph id")?,
            node: r.u32("graph node")?,
            args: r.var_bytes("argument block")?,
        },
        REQ_GRAPH_REPLAY => Request::GraphReplay {
            graph: r.u32("graph id")?,
            times: r.u32("replay count")?,
            writes: r.var_bytes("scalar writes")?,
        },
        REQ_GRAPH_DESTROY => Request::GraphDestroy {
            graph: r.u32("graph id")?,
        },
        REQ_MAP_DEVICE => Request::MapDevice {
            memory: r.u64("memory id")?,
            offset: r.u64("memory offset")?,
            len: r.u64("mapping length")?,
        },
        REQ_UNMAP_DEVICE => Request::UnmapDevice {
            addr: r.u64("device address")?,
        },
        REQ_RECORD_MARK => Request::RecordMark {
            mark: r.u32("mark")?,
        },
        REQ_MARK_ELAPSED => Request::MarkElapsed {
            start: r.u32("start mark")?,
            end: r.u32("end mark")?,
        },
        REQ_QUERY_MARK => Request::QueryMark {
            mark: r.u32("mark")?,
        },
        REQ_WAIT_MARK => Request::WaitMark {
            mark: r.u32("mark")?,
        },
        REQ_ALLOC_SHAREABLE => Request::AllocShareable {
            bytes: r.u64("allocation size")?,
        },
        REQ_EXPORT => Request::Export {
            addr: r.u64("device address")?,
        },
        REQ_COPY_FROM_PEER => Request::CopyFromPeer {
            dst: r.u64("destination address")?,
            handle: r.var_bytes("export handle")?,
            offset: r.u64("source offset")?,
            len: r.u64("copy length")?,
        },
        REQ_LAUNCH_PERSISTENT => {
            let memory = r.u64("memory id")?;
            let control = r.u64("control block offset")?;
            let status_memory = r.u64("status memory id")?;
            let status = r.u64("status block offset")?;
            Request::LaunchPersistent {
                launch: r.launch()?,
                memory,
                control,
                status_memory,
                status,
            }
        }
        REQ_SYNC => Request::Sync,
        REQ_RESET => Request::Reset,
        REQ_INFO => Request::Info,
        REQ_ATTACH_MEMORY => Request::AttachMemory {
            id: r.u64("memory id")?,
            capacity: r.u64("memory capacity")?,
        },
        REQ_DETACH_MEMORY => Request::DetachMemory {
            id: r.u64("memory id")?,
        },
        REQ_WRITE_FROM => Request::WriteFrom {
            addr: r.u64("write address")?,
            memory: r.u64("memory id")?,
            offset: r.u64("memory offset")?,
            len: r.u64("write length")?,
            after: r.after()?,
        },
        REQ_READ_INTO => Request::ReadInto {
            addr: r.u64("read address")?,
            memory: r.u64("memory id")?,
            offset: r.u64("memory offset")?,
            len: r.u64("read length")?,
            after: r.after()?,
        },
        tag => {
            return Err(DecodeError::UnknownTag {
                what: "request",
                tag,
            })
        }
    };
    r.finish()?;
    Ok((id, req))
}

/// Appends the encoding of `resp` (answering request `id`) to `out`.
pub fn encode_response(id: u64, resp: &Response, out: &mut Vec<u8>) {
    let mut w = Writer(out);
    match resp {
        Response::Ok => w.head(RESP_OK, id),
        Response::Allocated { addr } => {
            w.head(RESP_ALLOCATED, id);
            w.u64(*addr);
        }
        Response::Graph { id: graph } => {
            w.head(RESP_GRAPH, id);
            w.u32(*graph);
        }
        Response::Exported { handle } => {
            w.head(RESP_EXPORTED, id);
            w.var_bytes(handle);
        }
        Response::Elapsed { nanos } => {
            w.head(RESP_ELAPSED, id);
            w.u64(*nanos);
        }
        Response::MarkDone { done } => {
            w.head(RESP_MARK_DONE, id);
            w.u8(*done as u8);
        }
        Response::Module(module) => {
            w.head(RESP_MODULE, id);
            w.module(module);
        }
        Response::CachedModule { module, compiled } => {
            w.head(RESP_CACHED_MODULE, id);
            w.module(module);
            w.bytes(compiled.ptx.as_bytes());
            w.bytes(&compiled.image);
            w.u8(compiled.image_refused as u8);
        }
        Response::Info(i) => {
            w.head(RESP_INFO, id);
            w.bytes(i.backend.as_bytes());
            w.bytes(i.device.as_bytes());
            w.u64(i.memory_total);
            w.u64(i.memory_used);
            w.u32(i.allocations);
            w.u32(i.modules);
            w.u64(i.memory_requested);
            w.u64(i.device_memory);
            w.u32(i.compute_capability.0);
            w.u32(i.compute_capability.1);
            w.bytes(i.uuid.as_bytes());
            w.u32(i.driver_version);
            w.u8(i.pinned_data as u8);
            let l = &i.launch_limits;
            w.u32(l.max_threads_per_block);
            for d in l.max_block.iter().chain(l.max_grid.iter()) {
                w.u32(*d);
            }
            w.u32(l.max_shared_per_block);
            w.u32(l.max_param_bytes);
        }
        Response::Error { kind, message } => {
            w.head(RESP_ERROR, id);
            w.u8(kind.to_wire());
            w.bytes(truncate_utf8(message, MAX_ERROR_MESSAGE).as_bytes());
        }
    }
}

/// A parameter's flags byte: bit 0 `pointer_sized`, bit 1 `used_as_address`, bits 4-6 its
/// type's kind.
fn param_flags(p: &ParamInfo) -> u8 {
    let ty = match p.ty {
        ParamType::Unsigned => 0,
        ParamType::Signed => 1,
        ParamType::Bits => 2,
        ParamType::Float => 3,
        ParamType::Aggregate => 4,
    };
    p.pointer_sized as u8 | (p.used_as_address as u8) << 1 | ty << 4
}

/// [`param_flags`] read back; `None` for a byte no parameter encodes to.
fn decode_param_flags(flags: u8) -> Option<(bool, ParamType, bool)> {
    let ty = match flags >> 4 {
        0 => ParamType::Unsigned,
        1 => ParamType::Signed,
        2 => ParamType::Bits,
        3 => ParamType::Float,
        4 => ParamType::Aggregate,
        _ => return None,
    };
    if flags & 0b1100 != 0 {
        return None;
    }
    Some((flags & 1 != 0, ty, flags & 2 != 0))
}

/// Decodes one whole response frame. The bytes come from an untrusted process: every length is
/// checked against what is left of the frame before anything is allocated.
pub fn decode_response(frame: &[u8]) -> Result<(u64, Response), DecodeError> {
    let mut r = Reader::new(frame);
    let tag = r.u8("response tag")?;
    let id = r.var("response id")?;
    let resp = match tag {
        RESP_OK => Response::Ok,
        RESP_ALLOCATED => Response::Allocated {
            addr: r.u64("device address")?,
        },
        RESP_GRAPH => Response::Graph {
            id: r.u32("graph id")?,
        },
        RESP_EXPORTED => Response::Exported {
            handle: r.var_bytes("export handle")?.to_vec(),
        },
        RESP_ELAPSED => Response::Elapsed {
            nanos: r.u64("elapsed nanoseconds")?,
        },
        RESP_MARK_DONE => Response::MarkDone {
            done: match r.u8("mark done flag")? {
                0 => false,
                1 => true,
                v => {
                    return Err(DecodeError::InvalidValue {
                        what: "mark done flag",
                        value: v as u64,
                    })
                }
            },
        },
        RESP_MODULE => Response::Module(r.module()?),
        RESP_CACHED_MODULE => Response::CachedModule {
            module: r.module()?,
            compiled: Compiled {
                ptx: r.str("compiled ptx")?.to_owned(),
                image: r.bytes("module image")?.to_vec(),
                image_refused: match r.u8("image refused flag")? {
                    0 => false,
                    1 => true,
                    v => {
                        return Err(DecodeError::InvalidValue {
                            what: "image refused flag",
                            value: v as u64,
                        })
                    }
                },
            },
        },
        RESP_INFO => Response::Info(WorkerInfo {
            backend: r.str("backend name")?.to_owned(),
            device: r.str("device name")?.to_owned(),
            memory_total: r.u64("memory total")?,
            memory_used: r.u64("memory used")?,
            allocations: r.u32("allocation count")?,
            modules: r.u32("module count")?,
            memory_requested: r.u64("memory requested")?,
            device_memory: r.u64("device memory")?,
            compute_capability: (
                r.u32("compute capability major")?,
                r.u32("compute capability minor")?,
            ),
            uuid: r.str("device uuid")?.to_owned(),
            driver_version: r.u32("driver version")?,
            pinned_data: match r.u8("pinned flag")? {
                0 => false,
                1 => true,
                v => {
                    return Err(DecodeError::InvalidValue {
                        what: "pinned flag",
                        value: v as u64,
                    })
                }
            },
            launch_limits: LaunchLimits {
                max_threads_per_block: r.u32("max threads per block")?,
                max_block: [
                    r.u32("max block dimension x")?,
                    r.u32("max block dimension y")?,
                    r.u32("max block dimension z")?,
                ],
                max_grid: [
                    r.u32("max grid dimension x")?,
                    r.u32("max grid dimension y")?,
                    r.u32("max grid dimension z")?,
                ],
                max_shared_per_block: r.u32("max shared memory per block")?,
                max_param_bytes: r.u32("max parameter bytes")?,
            },
        }),
        RESP_ERROR => {
            let k = r.u8("error kind")?;
            let kind = ErrorKind::from_wire(k).ok_or(DecodeError::UnknownTag {
                what: "error kind",
                tag: k,
            })?;
            Response::Error {
                kind,
                message: r.str("error message")?.to_owned(),
            }
        }
        tag => {
            return Err(DecodeError::UnknownTag {
                what: "response",
                tag,
            })
        }
    };
    r.finish()?;
    Ok((id, resp))
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn len_u32(n: usize) -> u32 {
    // Frames are bounded by the channel (far below 4 GiB); saturating keeps the encoder total
    // and makes an impossible length fail at decode instead of wrapping silently.
    u32::try_from(n).unwrap_or(u32::MAX)
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn head(&mut self, tag: u8, id: u64) {
        self.u8(tag);
        self.var(id);
    }
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(len_u32(b.len()));
        self.0.extend_from_slice(b);
    }
    /// LEB128: seven bits a byte, low first, the top bit set on all but the last.
    fn var(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    /// A launch's fields (after its request's head, or a graph op's tag).
    fn launch(&mut self, l: &Launch<'_>) {
        self.var(l.module.into());
        self.var(l.kernel.into());
        for d in l.grid.iter().chain(l.block.iter()) {
            self.var((*d).into());
        }
        self.var(l.shared_mem_bytes.into());
        self.var_bytes(l.args);
        // In nanoseconds; a deadline past what 64 bits of them hold goes as the most they do.
        self.var(u64::try_from(l.deadline.as_nanos()).unwrap_or(u64::MAX));
    }

    fn var_bytes(&mut self, b: &[u8]) {
        self.var(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    /// A load-source's compiler options.
    fn options(&mut self, options: &[&str]) {
        self.u32(len_u32(options.len()));
        for o in options {
            self.bytes(o.as_bytes());
        }
    }

    /// A loaded module: its id, its variables' bytes, its text's bytes, its kernels.
    fn module(&mut self, module: &LoadedModule) {
        self.u32(module.id);
        self.u64(module.variable_bytes);
        self.u64(module.text_bytes);
        self.kernels(&module.kernels);
    }

    /// A loaded module's kernels, with their parameters.
    fn kernels(&mut self, kernels: &[KernelInfo]) {
        self.u32(len_u32(kernels.len()));
        for k in kernels {
            self.bytes(k.name.as_bytes());
            self.u32(len_u32(k.params.len()));
            for p in &k.params {
                self.bytes(p.name.as_bytes());
                self.u32(p.size);
                self.u32(p.align);
                self.u8(param_flags(p));
            }
        }
    }

    /// A copy's `after`: 0 for none (every queued launch), else 1 and the ordinal.
    fn after(&mut self, after: Option<u64>) {
        match after {
            None => self.u8(0),
            Some(n) => {
                self.u8(1);
                self.u64(n);
            }
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, at: 0 }
    }

    fn take(&mut self, what: &'static str, n: u64) -> Result<&'a [u8], DecodeError> {
        let left = (self.buf.len() - self.at) as u64;
        if n > left {
            return Err(DecodeError::Truncated {
                what,
                at: self.at,
                need: n,
                len: self.buf.len(),
            });
        }
        let n = n as usize;
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.take(what, 1)?[0])
    }

    /// [`Writer::after`]'s encoding; any other flag is invalid.
    fn after(&mut self) -> Result<Option<u64>, DecodeError> {
        match self.u8("copy order")? {
            0 => Ok(None),
            1 => Ok(Some(self.u64("copy order's last launch")?)),
            flag => Err(DecodeError::InvalidValue {
                what: "copy order flag",
                value: flag.into(),
            }),
        }
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let b = self.take(what, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let b = self.take(what, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let n = self.u32(what)?;
        self.take(what, n as u64)
    }

    fn str(&mut self, what: &'static str) -> Result<&'a str, DecodeError> {
        let at = self.at + 4;
        let b = self.bytes(what)?;
        std::str::from_utf8(b).map_err(|_| DecodeError::InvalidUtf8 { what, at })
    }

    /// A LEB128 varint (see [`Writer::var`]); more than 64 bits of value is `InvalidValue`.
    fn var(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8(what)?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(DecodeError::InvalidValue { what, value: bits });
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::InvalidValue { what, value: v })
    }

    fn var_u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let v = self.var(what)?;
        u32::try_from(v).map_err(|_| DecodeError::InvalidValue { what, value: v })
    }

    /// A launch's fields, as [`Writer::launch`] wrote them.
    fn launch(&mut self) -> Result<Launch<'a>, DecodeError> {
        let module = self.var_u32("module id")?;
        let kernel = self.var_u32("kernel index")?;
        let mut dims = [0u32; 6];
        for d in &mut dims {
            *d = self.var_u32("launch dimension")?;
        }
        let shared_mem_bytes = self.var_u32("shared memory size")?;
        let args = self.var_bytes("argument block")?;
        let deadline = Duration::from_nanos(self.var("deadline")?);
        Ok(Launch {
            module,
            kernel,
            grid: [dims[0], dims[1], dims[2]],
            block: [dims[3], dims[4], dims[5]],
            shared_mem_bytes,
            args,
            deadline,
        })
    }

    fn var_bytes(&mut self, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let n = self.var(what)?;
        self.take(what, n)
    }

    /// [`Writer::options`] read back.
    fn options(&mut self) -> Result<Vec<&'a str>, DecodeError> {
        // Each option costs at least its 4-byte length, which bounds the count by the frame.
        let n = self.count("option count", 4)?;
        let mut options = Vec::with_capacity(n);
        for _ in 0..n {
            options.push(self.str("option")?);
        }
        Ok(options)
    }

    /// [`Writer::module`] read back.
    fn module(&mut self) -> Result<LoadedModule, DecodeError> {
        Ok(LoadedModule {
            id: self.u32("module id")?,
            variable_bytes: self.u64("module variable bytes")?,
            text_bytes: self.u64("module text bytes")?,
            kernels: self.kernels()?.into(),
        })
    }

    /// [`Writer::kernels`] read back.
    fn kernels(&mut self) -> Result<Vec<KernelInfo>, DecodeError> {
        // A kernel is at least a name length and a param count.
        let n = self.count("kernel count", 8)?;
        let mut kernels = Vec::with_capacity(n);
        for _ in 0..n {
            let name = self.str("kernel name")?.to_owned();
            // A param is at least a name length, size, align and flag.
            let np = self.count("param count", 13)?;
            let mut params = Vec::with_capacity(np);
            for _ in 0..np {
                let name = self.str("param name")?.to_owned();
                let size = self.u32("param size")?;
                let align = self.u32("param align")?;
                let flags = self.u8("param flags")?;
                let (pointer_sized, ty, used_as_address) =
                    decode_param_flags(flags).ok_or(DecodeError::InvalidValue {
                        what: "param flags",
                        value: flags as u64,
                    })?;
                params.push(ParamInfo {
                    name,
                    size,
                    align,
                    pointer_sized,
                    ty,
                    used_as_address,
                });
            }
            kernels.push(KernelInfo { name, params });
        }
        Ok(kernels)
    }

    /// A list count, refused when even `min_item` bytes per item would overrun the frame, so a
    /// forged count cannot make the decoder reserve gigabytes.
    fn count(&mut self, what: &'static str, min_item: u64) -> Result<usize, DecodeError> {
        let at = self.at;
        let n = self.u32(what)? as u64;
        let left = (self.buf.len() - self.at) as u64;
        if n * min_item > left {
            return Err(DecodeError::Truncated {
                what,
                at,
                need: n * min_item,
                len: self.buf.len(),
            });
        }
        Ok(n as usize)
    }

    fn finish(&self) -> Result<(), DecodeError> {
        match self.buf.len() - self.at {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes { extra }),
        }
    }
}

#[cfg(test)]
mod tests;
