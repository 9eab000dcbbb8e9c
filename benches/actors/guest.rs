//! The guest's path: gpubench's actor commands (`tasklets/testing/gpubench`, its `actor`
//! module) run as a wasm tasklet on the bench's host, timed inside the guest; and the host
//! itself, which the host-runtime path shares.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tasklet_runtime::{BackendKind, Host, HostConfig, Policy, WorkerCommand};
use tasklet_tests::manifest;

use crate::stats::{parse, Lines};
use crate::Params;

/// A host with a small warm pool on `backend`: its workers serve both the tasklet's leases and
/// the host-runtime path's.
pub fn start_host(backend: BackendKind) -> Result<Host, String> {
    let mut policy = Policy::default();
    policy.workers.warm = 2;
    policy.workers.max = 4;
    policy.workers.kernel_deadline = Duration::from_secs(10);
    policy.workers.op_timeout = Duration::from_secs(60);
    policy.workers.emu_memory = 256 << 20;
    let program = worker_program();
    if !program.exists() {
        return Err(format!(
            "no worker binary at {}; set TASKLET_TEST_WORKER to a worker binary (tasklet-bench-worker)",
            program.display()
        ));
    }
    let host = Host::new(HostConfig {
        policy,
        worker: WorkerCommand {
            program,
            args: Vec::new(),
        },
        backend,
    })
    .map_err(|e| e.to_string())?;
    settle(&host);
    Ok(host)
}

/// Waits (3 s at most) until no lease is out and the warm workers are ready, so that nothing
/// starts in the background while the next path measures.
pub fn settle(host: &Host) {
    let pool = host.pool();
    let warm = host.policy().workers.warm;
    let deadline = Instant::now() + Duration::from_secs(3);
    while (pool.busy() > 0 || pool.idle() < warm) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `actor-rtt`, `actor-batch`, their sequenced-ring forms and `handler-launch` in turn, their
/// lines together.
pub fn measure(host: &Host, p: &Params) -> Result<Lines, String> {
    let m = manifest("testing/gpubench");
    if !m.component.exists() {
        return Err(format!(
            "no gpubench component at {}; build the tasklets (cargo build --release --target wasm32-wasip2 in \
             tasklets/) or set TASKLET_REPO",
            m.component.display()
        ));
    }
    let tasklet = host.load(m).map_err(|e| e.to_string())?;
    let settle_word = format!("settle={}", p.settle_ms);
    let mut all = Lines::new();
    for command in [
        format!("actor-rtt {} {settle_word}", p.iters),
        format!("actor-batch {} {} {settle_word}", p.batch, p.batches),
        format!("actor-rtt-seq {} {settle_word}", p.iters),
        format!("actor-batch-seq {} {} {settle_word}", p.batch, p.batches),
        format!("handler-launch {} {settle_word}", p.iters),
    ] {
        let out = host
            .run(&tasklet, command.as_bytes())
            .map_err(|e| format!("`{command}`: {e}"))?;
        let text = String::from_utf8_lossy(&out);
        all.extend(parse(&text).map_err(|line| format!("`{command}`: {line}"))?);
        settle(host);
    }
    Ok(all)
}

/// `TASKLET_TEST_WORKER`, else the worker built with this bench, else one beside this program
/// (a prebuilt `target/release/deps/actors-*` has it one folder up).
fn worker_program() -> PathBuf {
    if let Some(p) = std::env::var_os("TASKLET_TEST_WORKER") {
        return PathBuf::from(p);
    }
    let built = PathBuf::from(env!("CARGO_BIN_EXE_tasklet-bench-worker"));
    if built.exists() {
        return built;
    }
    let exe = std::env::current_exe().unwrap_or_default();
    for dir in exe.ancestors().skip(1).take(2) {
        let candidate = dir.join("tasklet-bench-worker");
        if candidate.exists() {
            return candidate;
        }
    }
    built
}
