//! Helpers shared by the modules: worker commands and pools over this crate's `tasklet-worker`
//! binary, process checks, guest-memory spans, and the assertions on an op's error.

use std::time::{Duration, Instant};

use tasklet_worker::guest_memory::{locate, GuestSpan, SharedMemory};
use tasklet_worker::{
    BackendKind, ErrorKind, Launch, LoadedModule, PoolConfig, Worker, WorkerCommand, WorkerError,
};

pub fn command(null_backend: bool) -> WorkerCommand {
    WorkerCommand {
        program: env!("CARGO_BIN_EXE_tasklet-worker").into(),
        args: if null_backend {
            vec!["--null-backend".into()]
        } else {
            vec![]
        },
    }
}

/// A worker process serving the emulator, with `device_memory` bytes of device memory.
pub fn emu_worker(device_memory: u64) -> Worker {
    Worker::spawn(
        &command(false),
        BackendKind::Emu,
        device_memory,
        Duration::from_secs(10),
    )
    .expect("spawn emu worker")
}

/// The text of `kernels/NAME.ptx`.
pub fn kernel_source(name: &str) -> String {
    let path = format!("{}/../../kernels/{name}.ptx", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn null_worker(op_timeout: Duration) -> Worker {
    Worker::spawn(&command(true), BackendKind::Emu, 1 << 20, op_timeout).expect("spawn")
}

pub fn pool_config(null_backend: bool, warm: usize, max_workers: usize) -> PoolConfig {
    PoolConfig {
        command: command(null_backend),
        backend: BackendKind::Emu,
        warm,
        max_workers,
        device_memory: 64 << 20,
        op_timeout: Duration::from_secs(5),
        reuse: true,
    }
}

/// Whether a pid names a live (or zombie) process.
pub fn pid_exists(pid: u32) -> bool {
    // SAFETY: signal 0 only checks.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

pub fn kill9(pid: u32) {
    // SAFETY: test-owned child.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
}

/// Polls `f` until true or `timeout`; says which.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    f()
}

/// Waits until an unreaped child has died (is a zombie): a SIGKILL is delivered asynchronously.
pub fn wait_dead(pid: u32) {
    let dead = eventually(Duration::from_secs(5), || {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state follows the parenthesised command name.
            Ok(s) => s
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
            Err(_) => true,
        }
    });
    assert!(dead, "process {pid} did not die");
}

/// Bytes `off..off+len` of `m`, as a slice (tests own the memory and nothing else touches it).
// Linear memory is shared mutable memory by nature (wasmtime and the worker write it through
// raw pointers); the tests do the same through short-lived slices.
#[allow(clippy::mut_from_ref)]
pub fn bytes(m: &SharedMemory, off: usize, len: usize) -> &mut [u8] {
    assert!(off + len <= m.size());
    // SAFETY: inside the accessible part of a live memory that this test alone uses.
    unsafe { std::slice::from_raw_parts_mut(m.as_ptr().add(off), len) }
}

pub fn span(m: &SharedMemory, off: usize, len: usize) -> GuestSpan {
    // SAFETY: only the address is formed, not dereferenced.
    locate(unsafe { m.as_ptr().add(off) }, len).expect("span inside the memory")
}

/// The index launches name kernel `name` of `m` by; for a name `m` does not have, an index past
/// its kernels (what a worker must refuse).
pub fn kernel_index(m: &LoadedModule, name: &str) -> u32 {
    m.kernels
        .iter()
        .position(|k| k.name == name)
        .map_or(u32::MAX, |i| i as u32)
}

/// The kind and message of the error an op returned; panics, showing what came instead, when it
/// returned anything but an op error.
#[track_caller]
pub fn op_error<T: std::fmt::Debug>(r: Result<T, WorkerError>) -> (ErrorKind, String) {
    match r {
        Err(WorkerError::Op { kind, message }) => (kind, message),
        other => panic!("expected an op error, got {other:?}"),
    }
}

/// The kind of the error an op returned (see [`op_error`]).
#[track_caller]
pub fn op_kind<T: std::fmt::Debug>(r: Result<T, WorkerError>) -> ErrorKind {
    op_error(r).0
}

/// Posts `l` (which returns before the worker checks it) and gives the error the next sync
/// reports for it.
#[track_caller]
pub fn posted_error(w: &mut Worker, l: &Launch<'_>) -> (ErrorKind, String) {
    w.launch(l)
        .expect("a posted launch returns before the worker checks it");
    op_error(w.sync())
}

/// `iota`'s text with a comment making it exactly `len` bytes, distinct for each `tag`.
pub fn padded_iota(tag: usize, len: usize) -> String {
    let mut text = format!("// module {tag}\n{}", kernel_source("iota"));
    let line = format!("// {}\n", "x".repeat(1021));
    while text.len() + line.len() <= len {
        text.push_str(&line);
    }
    text.push_str(&" ".repeat(len - text.len()));
    text
}

/// Posts a launch the worker refuses (no such kernel): its error waits for the next call.
pub fn post_refused_launch(w: &mut Worker, m: &LoadedModule) {
    w.launch(&Launch {
        module: m.id,
        kernel: 99,
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
        args: &[],
        deadline: Duration::from_secs(10),
    })
    .unwrap();
}
