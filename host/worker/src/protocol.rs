//! The host/worker wire format: a sans-IO codec, no transport in sight.
//!
//! Every frame is hand-encoded little-endian so that its layout is fixed by this file alone (no
//! serializer version can change it) and so that decoding bytes written by an untrusted worker is
//! a bounds-checked walk that returns a [`DecodeError`], never a panic or an unbounded allocation.
//!
//! Frame layout: `tag: u8, id: varint, fields…`. Integers are little-endian; `str` and `bytes` are a
//! `u32` length then the bytes; lists are a `u32` count then the items. A frame must be consumed
//! exactly: trailing bytes are an error. Bulk data (write payloads, read results) does not travel
//! in frames but in the transport's data region; frames only carry its length.
//!
//! The id and a launch's fields are LEB128 varints instead (lengths included), because a launch is
//! the one frame on a hot path whose size matters: the ring carries it in whole cache lines, each a
//! transfer between the host's core and the worker's, and with varints a launch of a kernel with
//! up to ~20 bytes of arguments and a short name is one line (`transport`). A varint longer than
//! its type allows is a [`DecodeError::InvalidValue`].
//!
//! `id` lets a response name its request, so posted (asynchronous) ops need no change to the
//! framing; the host queues launches (which get no response) and has one call at a time
//! outstanding, whose echo it checks.

use crate::error::ErrorKind;
use tasklet_ptx::{KernelInfo, ParamInfo};

/// Messages longer than this are cut (at a char boundary) when encoded: an error message is for
/// people and must not be able to crowd out the message area.
pub const MAX_ERROR_MESSAGE: usize = 8 * 1024;

/// A request from host to worker. Borrowed fields point into the frame it was decoded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Ping,
    Alloc {
        bytes: u64,
    },
    Free {
        addr: u64,
    },
    /// Payload: the first `len` bytes of the data region.
    Write {
        addr: u64,
        len: u64,
    },
    /// Result: the worker fills the first `len` bytes of the data region.
    Read {
        addr: u64,
        len: u64,
    },
    Copy {
        dst: u64,
        src: u64,
        len: u64,
    },
    LoadModule {
        ptx: &'a str,
    },
    LoadSource {
        source: &'a str,
        options: Vec<&'a str>,
    },
    UnloadModule {
        id: u32,
    },
    Launch(LaunchRequest<'a>),
    Sync,
    /// Free every allocation and unload every module: the worker goes back to its state at start.
    Reset,
    Info,
    /// Map guest memory `id`, whose memfd the host has just sent on the control socket tagged
    /// `id`, `capacity` bytes (`crate::guest_memory`). Replaces an earlier attachment of `id`.
    AttachMemory {
        id: u64,
        capacity: u64,
    },
    /// Drop the attachment of guest memory `id` (the host dropped the memory).
    DetachMemory {
        id: u64,
    },
    /// Write bytes `offset..offset+len` of attached guest memory `memory` at device `addr`.
    WriteFrom {
        addr: u64,
        memory: u64,
        offset: u64,
        len: u64,
    },
    /// Read `len` bytes at device `addr` into attached guest memory `memory` at `offset`.
    ReadInto {
        addr: u64,
        memory: u64,
        offset: u64,
        len: u64,
    },
}

/// The fields of [`Request::Launch`]; also what [`crate::Backend::launch`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchRequest<'a> {
    pub module: u32,
    pub kernel: &'a str,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    /// The kernel's argument block, laid out as `KernelInfo::param_layout` says.
    pub args: &'a [u8],
    /// Most lane-instructions the emulator may run. Backends without a step counter ignore it
    /// and use `deadline_ns`; their host sends 0 (one byte on the wire).
    pub step_limit: u64,
    /// How long the kernel may run, in nanoseconds (> 0). Asynchronous backends (cuda) enqueue the
    /// launch, answer at once, and enforce this when they wait for the kernel: at `sync` and at any
    /// later op that must wait for it, a kernel still running this long after it could start fails
    /// with `DeadlineExceeded`; a worker-side watchdog ends the process shortly after, synced or
    /// not. The emulator uses `step_limit` instead.
    pub deadline_ns: u64,
}

impl Request<'_> {
    pub fn name(&self) -> &'static str {
        match self {
            Request::Ping => "ping",
            Request::Alloc { .. } => "alloc",
            Request::Free { .. } => "free",
            Request::Write { .. } => "write",
            Request::Read { .. } => "read",
            Request::Copy { .. } => "copy",
            Request::LoadModule { .. } => "load-module",
            Request::LoadSource { .. } => "load-source",
            Request::UnloadModule { .. } => "unload-module",
            Request::Launch(_) => "launch",
            Request::Sync => "sync",
            Request::Reset => "reset",
            Request::Info => "info",
            Request::AttachMemory { .. } => "attach-memory",
            Request::DetachMemory { .. } => "detach-memory",
            Request::WriteFrom { .. } => "write-from",
            Request::ReadInto { .. } => "read-into",
        }
    }
}

/// What a worker reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkerInfo {
    /// `emu` or `cuda`.
    pub backend: String,
    /// Human-readable device name.
    pub device: String,
    /// Bytes of device memory this worker may allocate in all.
    pub memory_total: u64,
    /// Bytes allocated now (as the backend accounts them, i.e. rounded up to its granularity).
    pub memory_used: u64,
    pub allocations: u32,
    pub modules: u32,
    /// Bytes asked for by the live allocations, exactly (what the host's lease accounting counts).
    pub memory_requested: u64,
    /// The device's own memory in all (emu: the emulated size; cuda: `cuDeviceTotalMem`).
    pub device_memory: u64,
    /// Compute capability (major, minor); the emulator reports the target it emulates (8.0).
    pub compute_capability: (u32, u32),
    /// The device's UUID as NVML and nvidia-smi print it (`GPU-…`); empty for the emulator.
    pub uuid: String,
    /// The driver's CUDA version as `cuDriverGetVersion` reports it (12080 = 12.8); 0 for emu.
    pub driver_version: u32,
    /// Whether the data region is page-locked for the device (cuda with `cuMemHostRegister`
    /// succeeded), so writes and reads are DMA at pinned speed.
    pub pinned_data: bool,
}

/// A response from worker to host. Owned: the host decodes it out of a buffer it reuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// Success with nothing to report (ping, free, write, read, copy, unload, launch, sync, reset).
    Ok,
    Allocated {
        addr: u64,
    },
    Module {
        id: u32,
        kernels: Vec<KernelInfo>,
    },
    Info(WorkerInfo),
    Error {
        kind: ErrorKind,
        message: String,
    },
}

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

const RESP_OK: u8 = 1;
const RESP_ALLOCATED: u8 = 2;
const RESP_MODULE: u8 = 3;
const RESP_INFO: u8 = 4;
const RESP_ERROR: u8 = 5;

/// Appends the encoding of `req` (with request id `id`) to `out`.
pub fn encode_request(id: u64, req: &Request<'_>, out: &mut Vec<u8>) {
    let mut w = Writer(out);
    match req {
        Request::Ping => w.head(REQ_PING, id),
        Request::Alloc { bytes } => {
            w.head(REQ_ALLOC, id);
            w.u64(*bytes);
        }
        Request::Free { addr } => {
            w.head(REQ_FREE, id);
            w.u64(*addr);
        }
        Request::Write { addr, len } => {
            w.head(REQ_WRITE, id);
            w.u64(*addr);
            w.u64(*len);
        }
        Request::Read { addr, len } => {
            w.head(REQ_READ, id);
            w.u64(*addr);
            w.u64(*len);
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
            w.u32(len_u32(options.len()));
            for o in options {
                w.bytes(o.as_bytes());
            }
        }
        Request::UnloadModule { id: module } => {
            w.head(REQ_UNLOAD_MODULE, id);
            w.u32(*module);
        }
        Request::Launch(l) => {
            w.head(REQ_LAUNCH, id);
            w.var(l.module.into());
            w.var_bytes(l.kernel.as_bytes());
            for d in l.grid.iter().chain(l.block.iter()) {
                w.var((*d).into());
            }
            w.var(l.shared_mem_bytes.into());
            w.var_bytes(l.args);
            w.var(l.step_limit);
            w.var(l.deadline_ns);
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
        } => {
            w.head(REQ_WRITE_FROM, id);
            w.u64(*addr);
            w.u64(*memory);
            w.u64(*offset);
            w.u64(*len);
        }
        Request::ReadInto {
            addr,
            memory,
            offset,
            len,
        } => {
            w.head(REQ_READ_INTO, id);
            w.u64(*addr);
            w.u64(*memory);
            w.u64(*offset);
            w.u64(*len);
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
        },
        REQ_READ => Request::Read {
            addr: r.u64("read address")?,
            len: r.u64("read length")?,
        },
        REQ_COPY => Request::Copy {
            dst: r.u64("copy destination")?,
            src: r.u64("copy source")?,
            len: r.u64("copy length")?,
        },
        REQ_LOAD_MODULE => Request::LoadModule { ptx: r.str("ptx")? },
        REQ_LOAD_SOURCE => {
            let source = r.str("source")?;
            // Each option costs at least its 4-byte length, which bounds the count by the frame.
            let n = r.count("option count", 4)?;
            let mut options = Vec::with_capacity(n);
            for _ in 0..n {
                options.push(r.str("option")?);
            }
            Request::LoadSource { source, options }
        }
        REQ_UNLOAD_MODULE => Request::UnloadModule {
            id: r.u32("module id")?,
        },
        REQ_LAUNCH => {
            let module = r.var_u32("module id")?;
            let kernel = r.var_str("kernel name")?;
            let mut dims = [0u32; 6];
            for d in &mut dims {
                *d = r.var_u32("launch dimension")?;
            }
            let shared_mem_bytes = r.var_u32("shared memory size")?;
            let args = r.var_bytes("argument block")?;
            let step_limit = r.var("step limit")?;
            let deadline_ns = r.var("deadline")?;
            Request::Launch(LaunchRequest {
                module,
                kernel,
                grid: [dims[0], dims[1], dims[2]],
                block: [dims[3], dims[4], dims[5]],
                shared_mem_bytes,
                args,
                step_limit,
                deadline_ns,
            })
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
        },
        REQ_READ_INTO => Request::ReadInto {
            addr: r.u64("read address")?,
            memory: r.u64("memory id")?,
            offset: r.u64("memory offset")?,
            len: r.u64("read length")?,
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
        Response::Module {
            id: module,
            kernels,
        } => {
            w.head(RESP_MODULE, id);
            w.u32(*module);
            w.u32(len_u32(kernels.len()));
            for k in kernels {
                w.bytes(k.name.as_bytes());
                w.u32(len_u32(k.params.len()));
                for p in &k.params {
                    w.bytes(p.name.as_bytes());
                    w.u32(p.size);
                    w.u32(p.align);
                    w.u8(p.pointer_sized as u8);
                }
            }
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
        }
        Response::Error { kind, message } => {
            w.head(RESP_ERROR, id);
            w.u8(kind.to_wire());
            w.bytes(truncate_utf8(message, MAX_ERROR_MESSAGE).as_bytes());
        }
    }
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
        RESP_MODULE => {
            let module = r.u32("module id")?;
            // A kernel is at least a name length and a param count.
            let n = r.count("kernel count", 8)?;
            let mut kernels = Vec::with_capacity(n);
            for _ in 0..n {
                let name = r.str("kernel name")?.to_owned();
                // A param is at least a name length, size, align and flag.
                let np = r.count("param count", 13)?;
                let mut params = Vec::with_capacity(np);
                for _ in 0..np {
                    let name = r.str("param name")?.to_owned();
                    let size = r.u32("param size")?;
                    let align = r.u32("param align")?;
                    let pointer_sized = match r.u8("param pointer flag")? {
                        0 => false,
                        1 => true,
                        v => {
                            return Err(DecodeError::InvalidValue {
                                what: "param pointer flag",
                                value: v as u64,
                            })
                        }
                    };
                    params.push(ParamInfo {
                        name,
                        size,
                        align,
                        pointer_sized,
                    });
                }
                kernels.push(KernelInfo { name, params });
            }
            Response::Module {
                id: module,
                kernels,
            }
        }
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
    // Frames are bounded by the transport (far below 4 GiB); saturating keeps the encoder total
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
    fn var_bytes(&mut self, b: &[u8]) {
        self.var(b.len() as u64);
        self.0.extend_from_slice(b);
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

    fn var_bytes(&mut self, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let n = self.var(what)?;
        self.take(what, n)
    }

    fn var_str(&mut self, what: &'static str) -> Result<&'a str, DecodeError> {
        let n = self.var(what)?;
        let at = self.at;
        let b = self.take(what, n)?;
        std::str::from_utf8(b).map_err(|_| DecodeError::InvalidUtf8 { what, at })
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
mod tests {
    use super::*;

    fn sample_requests() -> Vec<Request<'static>> {
        vec![
            Request::Ping,
            Request::Alloc { bytes: 1 << 40 },
            Request::Free {
                addr: 0xdead_beef_0000,
            },
            Request::Write {
                addr: 256,
                len: 4096,
            },
            Request::Read {
                addr: u64::MAX,
                len: 0,
            },
            Request::Copy {
                dst: 1,
                src: 2,
                len: 3,
            },
            Request::LoadModule {
                ptx: ".version 8.0\n.target sm_80\n// ünïcode",
            },
            Request::LoadSource {
                source: "__global__ void k(){}",
                options: vec!["-arch=sm_80", "", "-DX=1"],
            },
            Request::LoadSource {
                source: "",
                options: vec![],
            },
            Request::UnloadModule { id: 7 },
            Request::Launch(LaunchRequest {
                module: 3,
                kernel: "iota",
                grid: [4, 1, 1],
                block: [128, 2, 1],
                shared_mem_bytes: 1024,
                args: &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
                step_limit: 123_456_789,
                deadline_ns: 2_000_000_000,
            }),
            // Every varint at its widest.
            Request::Launch(LaunchRequest {
                module: u32::MAX,
                kernel: "ünïcode_kernel",
                grid: [u32::MAX, 65_535, 1 << 21],
                block: [1024, 127, 128],
                shared_mem_bytes: 227 * 1024,
                args: &[0xff; 300],
                step_limit: u64::MAX,
                deadline_ns: u64::MAX,
            }),
            Request::Sync,
            Request::Reset,
            Request::Info,
            Request::AttachMemory {
                id: 9,
                capacity: 4 << 30,
            },
            Request::DetachMemory { id: u64::MAX },
            Request::WriteFrom {
                addr: 0x7000,
                memory: 3,
                offset: 65536,
                len: 1 << 28,
            },
            Request::ReadInto {
                addr: u64::MAX,
                memory: 0,
                offset: u64::MAX,
                len: 0,
            },
        ]
    }

    fn sample_responses() -> Vec<Response> {
        vec![
            Response::Ok,
            Response::Allocated { addr: 0x1000 },
            Response::Module {
                id: 1,
                kernels: vec![],
            },
            Response::Module {
                id: 2,
                kernels: vec![
                    KernelInfo {
                        name: "iota".into(),
                        params: vec![
                            ParamInfo {
                                name: "out".into(),
                                size: 8,
                                align: 8,
                                pointer_sized: true,
                            },
                            ParamInfo {
                                name: "n".into(),
                                size: 4,
                                align: 4,
                                pointer_sized: false,
                            },
                        ],
                    },
                    KernelInfo {
                        name: "empty".into(),
                        params: vec![],
                    },
                ],
            },
            Response::Info(WorkerInfo {
                backend: "emu".into(),
                device: "PTX emulator".into(),
                memory_total: 1 << 30,
                memory_used: 512,
                allocations: 2,
                modules: 1,
                memory_requested: 300,
                device_memory: 1 << 30,
                compute_capability: (8, 0),
                uuid: String::new(),
                driver_version: 0,
                pinned_data: false,
            }),
            Response::Info(WorkerInfo {
                backend: "cuda".into(),
                device: "NVIDIA H200".into(),
                memory_total: 140 << 30,
                memory_used: 1 << 21,
                allocations: 1,
                modules: 3,
                memory_requested: 1 << 20,
                device_memory: 141 << 30,
                compute_capability: (9, 0),
                uuid: "GPU-01234567-89ab-cdef-0123-456789abcdef".into(),
                driver_version: 13000,
                pinned_data: true,
            }),
        ]
        .into_iter()
        .chain(ErrorKind::ALL.into_iter().map(|kind| Response::Error {
            kind,
            message: format!("{kind} happened"),
        }))
        .collect()
    }

    #[test]
    fn requests_round_trip() {
        for (i, req) in sample_requests().iter().enumerate() {
            let mut buf = Vec::new();
            encode_request(i as u64 * 1000 + 1, req, &mut buf);
            let (id, back) = decode_request(&buf).unwrap_or_else(|e| panic!("{req:?}: {e}"));
            assert_eq!(id, i as u64 * 1000 + 1);
            assert_eq!(&back, req);
        }
    }

    #[test]
    fn responses_round_trip() {
        for (i, resp) in sample_responses().iter().enumerate() {
            let mut buf = Vec::new();
            encode_response(u64::MAX - i as u64, resp, &mut buf);
            let (id, back) = decode_response(&buf).unwrap_or_else(|e| panic!("{resp:?}: {e}"));
            assert_eq!(id, u64::MAX - i as u64);
            assert_eq!(&back, resp);
        }
    }

    #[test]
    fn every_truncation_is_a_typed_error() {
        for req in sample_requests() {
            let mut buf = Vec::new();
            encode_request(9, &req, &mut buf);
            for cut in 0..buf.len() {
                assert!(
                    matches!(
                        decode_request(&buf[..cut]),
                        Err(DecodeError::Truncated { .. })
                    ),
                    "{req:?} cut at {cut}"
                );
            }
        }
        for resp in sample_responses() {
            let mut buf = Vec::new();
            encode_response(9, &resp, &mut buf);
            for cut in 0..buf.len() {
                assert!(
                    matches!(
                        decode_response(&buf[..cut]),
                        Err(DecodeError::Truncated { .. })
                    ),
                    "{resp:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn trailing_bytes_unknown_tags_and_bad_values() {
        let mut buf = Vec::new();
        encode_request(1, &Request::Ping, &mut buf);
        buf.push(0);
        assert_eq!(
            decode_request(&buf),
            Err(DecodeError::TrailingBytes { extra: 1 })
        );

        let mut buf = vec![200u8];
        buf.push(1); // id 1, a one-byte varint
        assert_eq!(
            decode_request(&buf),
            Err(DecodeError::UnknownTag {
                what: "request",
                tag: 200
            })
        );
        assert_eq!(
            decode_response(&buf),
            Err(DecodeError::UnknownTag {
                what: "response",
                tag: 200
            })
        );

        let mut buf = vec![RESP_ERROR];
        buf.push(1); // id 1, a one-byte varint
        buf.push(99);
        buf.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(
            decode_response(&buf),
            Err(DecodeError::UnknownTag {
                what: "error kind",
                tag: 99
            })
        );

        // Invalid UTF-8 in a module's PTX.
        let mut buf = vec![REQ_LOAD_MODULE];
        buf.push(1); // id 1, a one-byte varint
        buf.extend_from_slice(&2u32.to_le_bytes());
        buf.extend_from_slice(&[0xff, 0xfe]);
        assert!(matches!(
            decode_request(&buf),
            Err(DecodeError::InvalidUtf8 { what: "ptx", .. })
        ));

        // A pointer flag that is neither 0 nor 1.
        let resp = Response::Module {
            id: 1,
            kernels: vec![KernelInfo {
                name: "k".into(),
                params: vec![ParamInfo {
                    name: "p".into(),
                    size: 8,
                    align: 8,
                    pointer_sized: true,
                }],
            }],
        };
        let mut buf = Vec::new();
        encode_response(1, &resp, &mut buf);
        *buf.last_mut().unwrap() = 2;
        assert!(matches!(
            decode_response(&buf),
            Err(DecodeError::InvalidValue { .. })
        ));
    }

    /// A launch frame as the host encodes it, for `empty()` with an argument block of `args`.
    fn launch_frame(args: &[u8]) -> Vec<u8> {
        let launch = LaunchRequest {
            module: 1,
            kernel: "empty",
            grid: [1, 1, 1],
            block: [256, 1, 1],
            shared_mem_bytes: 0,
            args,
            step_limit: 0,
            deadline_ns: 10_000_000_000,
        };
        let mut buf = Vec::new();
        encode_request(1_000_000, &Request::Launch(launch), &mut buf);
        buf
    }

    #[test]
    fn a_launch_with_a_small_argument_block_is_one_cache_line_in_the_ring() {
        // Two pointers and a u32: what a typical kernel takes.
        assert_eq!(
            crate::transport::record_size(launch_frame(&[0; 20]).len()),
            64
        );
        assert_eq!(crate::transport::record_size(launch_frame(&[]).len()), 64);
    }

    #[test]
    fn varints_past_their_type_are_refused() {
        let frame = launch_frame(&[]);
        // The module id is the varint after the tag and the id (1,000,000: three bytes).
        let module_at = 4;
        assert_eq!(frame[module_at], 1);
        // Five bytes of value > u32::MAX for the module id.
        let mut wide = frame[..module_at].to_vec();
        wide.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x1f]);
        wide.extend_from_slice(&frame[module_at + 1..]);
        assert!(matches!(
            decode_request(&wide),
            Err(DecodeError::InvalidValue {
                what: "module id",
                ..
            })
        ));
        // Eleven continuation bytes: longer than any u64.
        let mut long = frame[..module_at].to_vec();
        long.extend_from_slice(&[0x80; 11]);
        long.extend_from_slice(&frame[module_at..]);
        assert!(matches!(
            decode_request(&long),
            Err(DecodeError::InvalidValue {
                what: "module id",
                ..
            })
        ));
        // A tenth byte carrying more than the 64th bit.
        let mut over = frame[..module_at].to_vec();
        over.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]);
        over.extend_from_slice(&frame[module_at + 1..]);
        assert!(matches!(
            decode_request(&over),
            Err(DecodeError::InvalidValue { .. })
        ));
        // A kernel name whose length runs past the frame.
        let mut past = frame[..module_at + 1].to_vec();
        past.push(0x7f);
        past.extend_from_slice(b"empty");
        assert!(matches!(
            decode_request(&past),
            Err(DecodeError::Truncated {
                what: "kernel name",
                ..
            })
        ));
    }

    #[test]
    fn forged_counts_do_not_allocate() {
        // A module response that claims 4 billion kernels in a 20-byte frame.
        let mut buf = vec![RESP_MODULE];
        buf.push(1); // id 1, a one-byte varint
        buf.extend_from_slice(&1u32.to_le_bytes());
        buf.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode_response(&buf),
            Err(DecodeError::Truncated {
                what: "kernel count",
                ..
            })
        ));
        // A string length far past the end.
        let mut buf = vec![RESP_ERROR];
        buf.push(1); // id 1, a one-byte varint
        buf.push(ErrorKind::Unsupported.to_wire());
        buf.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode_response(&buf),
            Err(DecodeError::Truncated { .. })
        ));
        // Options count in a load-source request.
        let mut buf = vec![REQ_LOAD_SOURCE];
        buf.push(1); // id 1, a one-byte varint
        buf.extend_from_slice(&0u32.to_le_bytes());
        buf.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode_request(&buf),
            Err(DecodeError::Truncated {
                what: "option count",
                ..
            })
        ));
    }

    #[test]
    fn garbage_never_panics() {
        // A deterministic xorshift stream of frames: random bytes, and valid frames with bytes flipped.
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mut valid = Vec::new();
        for r in sample_requests() {
            let mut b = Vec::new();
            encode_request(5, &r, &mut b);
            valid.push(b);
        }
        for r in sample_responses() {
            let mut b = Vec::new();
            encode_response(5, &r, &mut b);
            valid.push(b);
        }
        for i in 0..20_000 {
            let mut frame = if i % 2 == 0 {
                let len = (next() % 64) as usize;
                (0..len).map(|_| next() as u8).collect::<Vec<u8>>()
            } else {
                valid[(next() % valid.len() as u64) as usize].clone()
            };
            if !frame.is_empty() {
                let at = (next() % frame.len() as u64) as usize;
                frame[at] = next() as u8;
            }
            let _ = decode_request(&frame);
            let _ = decode_response(&frame);
        }
    }

    #[test]
    fn long_error_messages_are_cut_on_char_boundaries() {
        let msg = "é".repeat(MAX_ERROR_MESSAGE);
        let mut buf = Vec::new();
        encode_response(
            1,
            &Response::Error {
                kind: ErrorKind::LoadFailed,
                message: msg,
            },
            &mut buf,
        );
        let (_, resp) = decode_response(&buf).unwrap();
        match resp {
            Response::Error { message, .. } => {
                assert!(message.len() <= MAX_ERROR_MESSAGE);
                assert!(message.len() >= MAX_ERROR_MESSAGE - 1);
            }
            other => panic!("{other:?}"),
        }
    }
}
