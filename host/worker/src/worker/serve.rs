//! The serving loop: requests from the channel to the backend and answers back, with the
//! launches the host posted ahead handed over together and a failed launch's error held for the
//! next call, naming the launch by its ordinal.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use super::attach::Attachments;
use super::backend::{self, Backend, BackendError};
use crate::contract::actor::{ControlBlock, CONTROL_BYTES};
use crate::contract::channel::{Incoming, WorkerEnd};
use crate::contract::codec::{decode_request, encode_response};
use crate::contract::{marks, quote, Compiled, ErrorKind, Launch, LoadedModule, Request, Response};

/// Serves requests on `end` until the host closes it or `host_alive` says it is gone.
///
/// Launches the host posted ahead of the worker are taken from the ring together and handed to
/// the backend in one [`Backend::launch_batch`] (see `serve_posted`). Posted frames (launches)
/// get no response: the first one that fails is kept as the *deferred*
/// error and later posted launches are dropped until it is reported. A call arriving while one is
/// held is not performed: it is answered with that error instead — except `free`, which is
/// performed and leaves the error for the next call, and `reset`, which is performed and drops it
/// (it belongs to the lease that just ended). An error that poisons the worker (a fault, a missed
/// deadline) is never dropped: every later call, `reset` included, is answered with it.
///
/// Launches are numbered from 1 in the order they arrive, dropped ones included, until `reset`
/// starts the count again (the host counts the same way); a failed launch's error says "launch
/// #N of kernel `k` failed", so the call that reports it is not mistaken for its cause.
///
/// Refuses to attach guest memory (no control socket): see [`serve_guests`].
pub fn serve(end: &mut WorkerEnd, backend: &mut dyn Backend, host_alive: &mut dyn FnMut() -> bool) {
    serve_guests(end, backend, &mut Attachments::new(None), host_alive)
}

/// [`serve`] with the guest memories attached through `guests`' control socket.
pub fn serve_guests(
    end: &mut WorkerEnd,
    backend: &mut dyn Backend,
    guests: &mut Attachments,
    host_alive: &mut dyn FnMut() -> bool,
) {
    // frames[0] takes every request; the rest, the launches taken with a first one.
    let mut frames: Vec<Vec<u8>> = (0..POSTED_BATCH).map(|_| Vec::with_capacity(256)).collect();
    let mut out = Vec::with_capacity(4096);
    let mut deferred: Option<Response> = None;
    // Launches so far (the last one's ordinal).
    let mut launches: u64 = 0;
    loop {
        let posted = match end.wait_request(&mut frames[0], host_alive, &mut || backend.flush()) {
            Incoming::Posted => true,
            Incoming::Call => false,
            Incoming::Closed | Incoming::HostGone => return,
            Incoming::Corrupt(why) => {
                // Nothing after this can be found; the host sees the worker gone (`Lost`).
                eprintln!(
                    "tasklet worker {}: request ring corrupt: {why}",
                    std::process::id()
                );
                return;
            }
        };
        if posted {
            if deferred.is_none() {
                deferred = serve_posted(end, backend, &mut frames, &mut launches);
            } else {
                // Dropped, and a launch counted: the host counted it when it posted it.
                launches += launches_in(&frames[..1]);
            }
            continue;
        }
        let (id, resp) = serve_call(
            end,
            backend,
            guests,
            &frames[0],
            &mut deferred,
            &mut launches,
        );
        out.clear();
        encode_response(id, &resp, &mut out);
        // Saturates at 584 years of device time.
        let gpu_nanos = u64::try_from(backend.gpu_time().as_nanos()).unwrap_or(u64::MAX);
        end.set_gpu_time(gpu_nanos);
        if end.respond(&out).is_err() {
            // What a load compiled goes back only where it fits: the module is loaded either
            // way, and the host then merely caches nothing.
            if let Some(smaller) = without_compiled(&resp) {
                out.clear();
                encode_response(id, &smaller, &mut out);
                if end.respond(&out).is_ok() {
                    continue;
                }
            }
            out.clear();
            encode_response(
                id,
                &error(
                    ErrorKind::InvalidArgument,
                    "response too large for the channel".into(),
                ),
                &mut out,
            );
            // A short error frame always fits the message area.
            let _ = end.respond(&out);
        }
    }
}

/// Most posted launches served together (see [`serve_posted`]).
const POSTED_BATCH: usize = 16;

/// What unused slots of a batch hold.
const NO_LAUNCH: Launch<'static> = Launch {
    module: 0,
    kernel: 0,
    grid: [0; 3],
    block: [0; 3],
    shared_mem_bytes: 0,
    args: &[],
    deadline: Duration::ZERO,
};

/// Runs the posted frame in `frames[0]` together with the ones the host has already posted
/// behind it (up to [`POSTED_BATCH`], when the worker is behind: [`WorkerEnd::behind`]): runs of
/// launches through [`Backend::launch_batch`], small writes (`WriteInline`) and mark records
/// (`RecordMark`) in between, in order; the first error, if any, to hold until the next call. Frames behind a failed or
/// malformed one are dropped, as they would be one by one. Every launch taken counts in
/// `launches` (a malformed frame counts as one: the host posts nothing else).
fn serve_posted(
    end: &mut WorkerEnd,
    backend: &mut dyn Backend,
    frames: &mut [Vec<u8>],
    launches: &mut u64,
) -> Option<Response> {
    let mut taken = 1;
    while end.behind() && taken < frames.len() && end.take_ready_posted(&mut frames[taken]) {
        taken += 1;
    }
    if taken == 1 {
        // The hot path of a launch followed by its sync: no batch to fill.
        let first = *launches + 1;
        return match decode_request(&frames[0]) {
            Ok((_, Request::Launch(l))) => {
                *launches += 1;
                launch_batch(backend, &[l], first)
            }
            Ok((_, req)) => serve_posted_other(backend, &req, launches),
            Err(e) => {
                *launches += 1;
                Some(malformed(first, &e))
            }
        };
    }
    let frames = &frames[..taken];
    let mut batch = [NO_LAUNCH; POSTED_BATCH];
    let mut n = 0;
    // The ordinal of the batch's first launch.
    let mut first = *launches + 1;
    for (i, frame) in frames.iter().enumerate() {
        let failed = match decode_request(frame) {
            Ok((_, Request::Launch(l))) => {
                batch[n] = l;
                n += 1;
                *launches += 1;
                continue;
            }
            Ok((_, req)) => {
                // Launches before a write run first.
                let launched = launch_batch(backend, &batch[..n], first);
                n = 0;
                launched.or_else(|| serve_posted_other(backend, &req, launches))
            }
            Err(e) => {
                *launches += 1;
                let ordinal = *launches;
                launch_batch(backend, &batch[..n], first).or_else(|| Some(malformed(ordinal, &e)))
            }
        };
        first = *launches + 1;
        if failed.is_some() {
            *launches += launches_in(&frames[i + 1..]);
            return failed;
        }
    }
    launch_batch(backend, &batch[..n], first)
}

/// A posted frame other than a launch: a small write or a mark's record, made now; anything else
/// is refused (and counted as a launch, as the host counts nothing else it posts).
fn serve_posted_other(
    backend: &mut dyn Backend,
    req: &Request<'_>,
    launches: &mut u64,
) -> Option<Response> {
    match req {
        Request::WriteInline { addr, data, after } => {
            let written = catch_unwind(AssertUnwindSafe(|| {
                ordered(backend, *after).write_staged(*addr, data)
            }))
            .unwrap_or_else(|p| {
                Err(BackendError::new(
                    ErrorKind::KernelFault,
                    internal_error(&*p),
                ))
            });
            written.err().map(|e| {
                error(
                    e.kind,
                    format!(
                        "an earlier write of {} bytes to {addr:#x} failed: {}",
                        data.len(),
                        e.message
                    ),
                )
            })
        }
        Request::RecordMark { mark } => {
            let recorded = catch_unwind(AssertUnwindSafe(|| record_mark(backend, *mark)))
                .unwrap_or_else(|p| {
                    Err(BackendError::new(
                        ErrorKind::KernelFault,
                        internal_error(&*p),
                    ))
                });
            recorded.err().map(|e| {
                error(
                    e.kind,
                    format!("an earlier record of mark {mark} failed: {}", e.message),
                )
            })
        }
        other => {
            *launches += 1;
            Some(launch_error(
                *launches,
                None,
                ErrorKind::InvalidArgument,
                &format!(
                    "a {} request was posted; only launches, small writes and mark records may be",
                    other.name()
                ),
            ))
        }
    }
}

/// The error held for a posted frame that cannot be decoded, counted as launch `ordinal`.
fn malformed(ordinal: u64, e: &dyn std::fmt::Display) -> Response {
    launch_error(
        ordinal,
        None,
        ErrorKind::InvalidArgument,
        &format!("malformed posted request: {e}"),
    )
}

/// How many of `frames` count as launches: all but the small writes and mark records.
fn launches_in(frames: &[Vec<u8>]) -> u64 {
    frames
        .iter()
        .filter(|f| {
            !matches!(
                decode_request(f),
                Ok((_, Request::WriteInline { .. } | Request::RecordMark { .. }))
            )
        })
        .count() as u64
}

/// [`Backend::record_mark`] of a mark checked against `MAX_MARKS` first.
fn record_mark(b: &mut dyn Backend, mark: u32) -> Result<(), BackendError> {
    checked_mark(mark)?;
    b.record_mark(mark)
}

/// `mark`, refused past `MAX_MARKS`.
fn checked_mark(mark: u32) -> Result<u32, BackendError> {
    match marks::out_of_range(mark) {
        Some(why) => Err(BackendError::new(ErrorKind::InvalidArgument, why)),
        None => Ok(mark),
    }
}

/// [`Backend::launch_batch`] of the launches numbered from `first`, with its panics caught (a
/// fault, as in [`guarded`]); the error to defer, naming the launch that failed.
fn launch_batch(
    backend: &mut dyn Backend,
    launches: &[Launch<'_>],
    first: u64,
) -> Option<Response> {
    if launches.is_empty() {
        return None;
    }
    let launched = catch_unwind(AssertUnwindSafe(|| {
        backend.number_launches_from(first);
        backend.launch_batch(launches)
    }))
    .unwrap_or_else(|p| {
        Err((
            0,
            BackendError::new(ErrorKind::KernelFault, internal_error(&*p)),
        ))
    });
    launched.err().map(|(i, e)| {
        let kernel = launches
            .get(i)
            .map(|l| match backend.kernel_name(l.module, l.kernel) {
                Some(name) => format!("kernel {}", quote::name(name)),
                None => format!("kernel {} of module {}", l.kernel, l.module),
            });
        launch_error(first + i as u64, kernel.as_deref(), e.kind, &e.message)
    })
}

/// "launch #N of kernel `k` failed: …": a launch's error as it is reported later, by another
/// op. `kernel` is `None` where the launch could not even be read.
fn launch_error(ordinal: u64, kernel: Option<&str>, kind: ErrorKind, why: &str) -> Response {
    let of = kernel.map_or_else(String::new, |k| format!(" of {k}"));
    error(kind, format!("launch #{ordinal}{of} failed: {why}"))
}

/// Performs a call, or answers it with the deferred error (see [`serve`]). `launches` counts
/// launches made as calls too, and starts again at `reset`.
fn serve_call(
    end: &mut WorkerEnd,
    backend: &mut dyn Backend,
    guests: &mut Attachments,
    frame: &[u8],
    deferred: &mut Option<Response>,
    launches: &mut u64,
) -> (u64, Response) {
    let (id, req) = match decode_request(frame) {
        Ok(r) => r,
        Err(e) => {
            return (
                0,
                error(
                    ErrorKind::InvalidArgument,
                    format!("malformed request: {e}"),
                ),
            )
        }
    };
    let poisoned = matches!(deferred, Some(Response::Error { kind, .. }) if kind.poisons_worker());
    if let Request::Launch(_) = req {
        *launches += 1;
        if deferred.is_none() {
            backend.number_launches_from(*launches);
        }
    }
    match (&req, deferred.is_some()) {
        (Request::Reset, _) if !poisoned => {
            *deferred = None;
            *launches = 0;
            (id, guarded(end, backend, guests, &req))
        }
        (_, false) => (id, guarded(end, backend, guests, &req)),
        (_, true) if poisoned => (id, deferred.clone().unwrap_or(Response::Ok)),
        (Request::Free { .. }, true) => (id, guarded(end, backend, guests, &req)),
        (_, true) => (id, deferred.take().unwrap_or(Response::Ok)),
    }
}

/// Dispatches with the backend's panics caught: a panic leaves its state unknown, so it is
/// reported as a fault, which poisons this worker so the host never reuses it.
fn guarded(
    end: &mut WorkerEnd,
    backend: &mut dyn Backend,
    guests: &mut Attachments,
    req: &Request<'_>,
) -> Response {
    catch_unwind(AssertUnwindSafe(|| dispatch(end, backend, guests, req)))
        .unwrap_or_else(|p| error(ErrorKind::KernelFault, internal_error(&*p)))
}

/// The answer to a load through the host's module cache.
fn cached_module(loaded: Result<(LoadedModule, Compiled), BackendError>) -> Response {
    match loaded {
        Ok((module, compiled)) => Response::CachedModule { module, compiled },
        Err(e) => error(e.kind, e.message),
    }
}

/// `resp` without the code a load compiled (its refusal of the host's image kept), where it
/// carries some: what to answer when the whole frame does not fit the channel.
fn without_compiled(resp: &Response) -> Option<Response> {
    match resp {
        Response::CachedModule { module, compiled }
            if !(compiled.ptx.is_empty() && compiled.image.is_empty()) =>
        {
            Some(Response::CachedModule {
                module: module.clone(),
                compiled: Compiled {
                    ptx: String::new(),
                    image: Vec::new(),
                    image_refused: compiled.image_refused,
                },
            })
        }
        _ => None,
    }
}

fn error(kind: ErrorKind, message: String) -> Response {
    Response::Error { kind, message }
}

fn dispatch(
    end: &mut WorkerEnd,
    b: &mut dyn Backend,
    guests: &mut Attachments,
    req: &Request<'_>,
) -> Response {
    let done = |r: Result<(), backend::BackendError>| match r {
        Ok(()) => Response::Ok,
        Err(e) => Response::Error {
            kind: e.kind,
            message: e.message,
        },
    };
    let too_big = |what: &str, len: u64, cap: usize| {
        error(
            ErrorKind::InvalidArgument,
            format!("{what} of {len} bytes exceeds the {cap}-byte data region"),
        )
    };
    if !matches!(req, Request::Ping | Request::Info) {
        if let Some(e) = b.persistent_fault() {
            return error(e.kind, e.message);
        }
    }
    match req {
        Request::Ping => Response::Ok,
        Request::Alloc { bytes } => match b.alloc(*bytes) {
            Ok(addr) => Response::Allocated { addr },
            Err(e) => Response::Error {
                kind: e.kind,
                message: e.message,
            },
        },
        Request::AllocShareable { bytes } => match b.alloc_shareable(*bytes) {
            Ok(addr) => Response::Allocated { addr },
            Err(e) => Response::Error {
                kind: e.kind,
                message: e.message,
            },
        },
        Request::Export { addr } => match b.export(*addr) {
            Ok(handle) => Response::Exported { handle },
            Err(e) => Response::Error {
                kind: e.kind,
                message: e.message,
            },
        },
        Request::CopyFromPeer {
            dst,
            handle,
            offset,
            len,
        } => done(b.copy_from_peer(*dst, handle, *offset, *len)),
        Request::Free { addr } => done(b.free(*addr)),
        Request::Write { addr, len, after } => {
            let cap = end.data_size();
            match usize::try_from(*len).ok().and_then(|n| end.data(n)) {
                Some(data) => done(ordered(b, *after).write_staged(*addr, data)),
                None => too_big("write", *len, cap),
            }
        }
        Request::WriteInline { addr, data, after } => {
            done(ordered(b, *after).write_staged(*addr, data))
        }
        Request::Read { addr, len, after } => {
            let cap = end.data_size();
            match usize::try_from(*len).ok().and_then(|n| end.data_mut(n)) {
                Some(data) => done(ordered(b, *after).read(*addr, data)),
                None => too_big("read", *len, cap),
            }
        }
        Request::Copy { dst, src, len } => done(b.copy(*dst, *src, *len)),
        Request::LoadModule { ptx } => match b.load_module(ptx) {
            Ok(m) => Response::Module(m),
            Err(e) => Response::Error {
                kind: e.kind,
                message: e.message,
            },
        },
        Request::LoadSource { source, options } => match b.load_source(source, options) {
            Ok(m) => Response::Module(m),
            Err(e) => Response::Error {
                kind: e.kind,
                message: e.message,
            },
        },
        Request::LoadModuleCached { ptx, image } => cached_module(b.load_module_cached(ptx, image)),
        Request::LoadSourceCached { source, options } => {
            cached_module(b.load_source_cached(source, options))
        }
        Request::UnloadModule { id } => done(b.unload_module(*id)),
        Request::Launch(l) => done(b.launch(l)),
        Request::Sync => done(match end.call_seq() {
            Some(seq) => b.sync_signalling(seq),
            None => b.sync(),
        }),
        // Memory a persistent kernel may be using stays mapped while it runs: the host stops
        // such kernels before it resets or detaches, or ends the worker.
        Request::Reset if b.persistent_running() => done(Err(BackendError::new(
            ErrorKind::KernelFault,
            "reset while a persistent kernel still runs: the worker cannot be reused",
        ))),
        Request::DetachMemory { id } if b.persistent_running() => done(Err(BackendError::new(
            ErrorKind::InvalidArgument,
            format!("memory {id} stays attached while a persistent kernel runs"),
        ))),
        Request::AttachMemory { id, .. } if b.persistent_running() && guests.contains(*id) => {
            // Attaching again replaces the mapping, which a persistent kernel may be using.
            done(Err(BackendError::new(
                ErrorKind::InvalidArgument,
                format!("memory {id} is attached already and stays as it is while a persistent kernel runs"),
            )))
        }
        Request::Reset => {
            guests.detach_all(b);
            done(b.reset())
        }
        Request::Info => Response::Info(b.info()),
        Request::GraphCreate { ops } => match b.graph_create(ops) {
            Ok(id) => Response::Graph { id },
            Err(e) => Response::Error {
                kind: e.kind,
                message: e.message,
            },
        },
        Request::GraphSetArgs { graph, node, args } => done(b.graph_set_args(*graph, *node, args)),
        Request::GraphReplay {
            graph,
            times,
            writes,
        } => done(b.graph_replay(*graph, *times, writes)),
        Request::GraphDestroy { graph } => done(b.graph_destroy(*graph)),
        Request::MapDevice {
            memory,
            offset,
            len,
        } => match guests.map_device(b, *memory, *offset, *len) {
            Ok(addr) => Response::Allocated { addr },
            Err(e) => Response::Error {
                kind: e.kind,
                message: e.message,
            },
        },
        Request::UnmapDevice { addr } => done(guests.unmap_device(b, *addr)),
        Request::LaunchPersistent {
            launch,
            memory,
            control,
            status_memory,
            status,
        } => {
            let block = |guests: &mut Attachments, b: &mut dyn Backend, memory, at| {
                let (p, _) = guest_range(b, guests, memory, at, CONTROL_BYTES as u64)?;
                if !(p as usize).is_multiple_of(8) {
                    return Err(BackendError::new(
                        ErrorKind::InvalidArgument,
                        format!("a control block at offset {at} is not 8-byte aligned"),
                    ));
                }
                Ok(p)
            };
            match (
                block(guests, b, *memory, *control),
                block(guests, b, *status_memory, *status),
            ) {
                // SAFETY: `guest_range` checked that CONTROL_BYTES at each lie in its mapping;
                // the mappings stay while the backend may use the blocks: detaching or attaching
                // them again is refused while a persistent kernel runs.
                (Ok(c), Ok(s)) => {
                    done(b.launch_persistent(launch, unsafe { ControlBlock::split(c, s) }))
                }
                (Err(e), _) | (_, Err(e)) => done(Err(e)),
            }
        }
        Request::RecordMark { mark } => done(record_mark(b, *mark)),
        Request::MarkElapsed { start, end } => {
            match checked_mark(*start).and_then(|_| checked_mark(*end)) {
                Ok(_) => match b.mark_elapsed(*start, *end) {
                    // Saturates at 584 years.
                    Ok(d) => Response::Elapsed {
                        nanos: u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
                    },
                    Err(e) => error(e.kind, e.message),
                },
                Err(e) => error(e.kind, e.message),
            }
        }
        Request::QueryMark { mark } => match checked_mark(*mark).and_then(|m| b.mark_done(m)) {
            Ok(done) => Response::MarkDone { done },
            Err(e) => error(e.kind, e.message),
        },
        Request::WaitMark { mark } => done(checked_mark(*mark).and_then(|m| b.wait_mark(m))),
        Request::AttachMemory { id, capacity } => done(guests.attach(b, *id, *capacity)),
        Request::DetachMemory { id } => done(guests.detach(b, *id)),
        Request::WriteFrom {
            addr,
            memory,
            offset,
            len,
            after,
        } => match guest_range(b, guests, *memory, *offset, *len) {
            // SAFETY: `range` checked that `len` bytes at `p` lie in the mapping and in the
            // memfd's size; the slice lives only for this copy. The host (guest) may change the
            // bytes meanwhile, which can only change what is copied.
            Ok((p, n)) => {
                done(ordered(b, *after).write(*addr, unsafe { std::slice::from_raw_parts(p, n) }))
            }
            Err(e) => done(Err(e)),
        },
        Request::ReadInto {
            addr,
            memory,
            offset,
            len,
            after,
        } => match guest_range(b, guests, *memory, *offset, *len) {
            // SAFETY: as for `WriteFrom`; nothing else in this process refers to these bytes.
            Ok((p, n)) => done(
                ordered(b, *after).read(*addr, unsafe { std::slice::from_raw_parts_mut(p, n) }),
            ),
            Err(e) => done(Err(e)),
        },
    }
}

/// `b`, told which launches its next copy waits for (the copies' `after`; none said: all).
fn ordered(b: &mut dyn Backend, after: Option<u64>) -> &mut dyn Backend {
    if let Some(last) = after {
        b.copy_after(last);
    }
    b
}

/// The checked range of an attached guest memory, as a pointer and a length.
fn guest_range(
    b: &mut dyn Backend,
    guests: &mut Attachments,
    memory: u64,
    offset: u64,
    len: u64,
) -> Result<(*mut u8, usize), backend::BackendError> {
    let p = guests.range(b, memory, offset, len)?;
    // `range` bounded offset + len by a mapping in this address space: it fits a usize.
    Ok((p, len as usize))
}

/// What a panic while serving reports (as a fault: the worker's state is suspect).
fn internal_error(p: &(dyn std::any::Any + Send)) -> String {
    format!("worker internal error: {}", panic_message(p))
}

pub(super) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_owned()
    }
}

#[cfg(test)]
mod tests;
