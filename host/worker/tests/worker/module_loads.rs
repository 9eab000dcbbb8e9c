//! Repeated module loads through the worker client (emu worker processes): a load of the text of
//! a shareable module the worker holds is answered by the host with that module's id, with no
//! round trip (shown by a stopped worker); only its last unload reaches the worker; a module
//! with `.global` variables is loaded afresh; a failure held for the next call is still reported
//! by a load; and every load, answered by the host or not, counts against the worker's limit.

use std::time::{Duration, Instant};

use crate::support::*;
use tasklet_worker::{ErrorKind, Launch, LoadedModule, Worker, MAX_MODULES, MAX_MODULE_TEXT_BYTES};

/// Runs `iota` of module `m` over 64 u32s at `out` and syncs.
fn run_iota(w: &mut Worker, m: &LoadedModule, out: u64) -> Result<(), tasklet_worker::WorkerError> {
    let k = m.kernels.iter().find(|k| k.name == "iota").expect("iota");
    let (offsets, size) = k.param_layout();
    let mut args = vec![0u8; size as usize];
    args[offsets[0] as usize..][..8].copy_from_slice(&out.to_le_bytes());
    args[offsets[1] as usize..][..4].copy_from_slice(&64u32.to_le_bytes());
    w.launch(&Launch {
        module: m.id,
        kernel: kernel_index(m, "iota"),
        grid: [1, 1, 1],
        block: [64, 1, 1],
        shared_mem_bytes: 0,
        args: &args,
        deadline: Duration::from_secs(10),
    })?;
    w.sync()
}

#[test]
fn a_repeated_load_is_answered_by_the_host_and_only_the_last_unload_reaches_the_worker() {
    let mut w = emu_worker(16 << 20);
    let iota = kernel_source("iota");
    let first = w.load_module(&iota).unwrap();
    let out = w.alloc(256).unwrap();

    // Stopped, the worker answers nothing: these loads and unloads are the host's alone.
    w.signal_for_test(libc::SIGSTOP);
    let started = Instant::now();
    let again = w.load_module(&iota);
    let unloaded = match &again {
        Ok(m) => w.unload_module(m.id).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let third = w.load_module(&iota);
    let took = started.elapsed();
    w.signal_for_test(libc::SIGCONT);
    let again = again.expect("a repeated load");
    assert!(unloaded.is_ok(), "{unloaded:?}");
    let third = third.expect("a third load");
    assert!(
        took < Duration::from_secs(1),
        "answered by a stopped worker? {took:?}"
    );
    assert_eq!((again.id, third.id), (first.id, first.id));
    assert_eq!(again.kernels, first.kernels);

    // One load still holds the module after the first's unload: it runs.
    w.unload_module(first.id).unwrap();
    run_iota(&mut w, &third, out).expect("the module is still held by the third load");
    let mut back = [0u8; 8];
    w.read(out + 4, &mut back).unwrap();
    assert_eq!(back, [2, 0, 0, 0, 3, 0, 0, 0]);
    // The last unload reaches the worker: the id is gone there.
    w.unload_module(third.id).unwrap();
    assert_eq!(
        op_kind(w.unload_module(third.id)),
        ErrorKind::InvalidArgument
    );
    assert_eq!(w.info().unwrap().modules, 0);
    // And the text is not known any more: the next load is the worker's, with a new id.
    let fresh = w.load_module(&iota).unwrap();
    assert_ne!(fresh.id, first.id);
}

#[test]
fn a_module_with_global_variables_is_loaded_afresh_each_time() {
    let mut w = emu_worker(16 << 20);
    let misc = kernel_source("misc");
    let a = w.load_module(&misc).unwrap();
    w.sync().unwrap();
    let b = w.load_module(&misc).unwrap();
    assert_ne!(a.id, b.id, "each load has its own variables");
    assert_eq!(w.info().unwrap().modules, 2);
}

#[test]
fn a_failure_held_for_the_next_call_is_reported_by_a_repeated_load() {
    let mut w = emu_worker(16 << 20);
    let iota = kernel_source("iota");
    let m = w.load_module(&iota).unwrap();
    w.sync().unwrap();
    post_refused_launch(&mut w, &m);
    held_launch_failure_reported(w.load_module(&iota));
}

#[test]
fn a_failure_held_past_a_free_is_reported_by_a_repeated_load() {
    let mut w = emu_worker(16 << 20);
    let iota = kernel_source("iota");
    let m = w.load_module(&iota).unwrap();
    let scratch = w.alloc(256).unwrap();
    w.sync().unwrap();
    post_refused_launch(&mut w, &m);
    // A free is performed beside the held error and leaves it for the op after it: its answer
    // reports nothing, so the load after it is the worker's to answer.
    w.free(scratch).unwrap();
    held_launch_failure_reported(w.load_module(&iota));
}

#[test]
fn loads_answered_by_the_host_count_against_the_workers_module_limit() {
    let mut w = emu_worker(16 << 20);
    let iota = kernel_source("iota");
    let first = w.load_module(&iota).unwrap();
    w.sync().unwrap();
    let mut held = vec![first.id];
    for _ in 1..MAX_MODULES {
        held.push(w.load_module(&iota).unwrap().id);
    }
    let (kind, message) = op_error(w.load_module(&iota));
    assert_eq!(kind, ErrorKind::OutOfMemory, "{message}");
    assert!(
        message.contains(&format!("at most {MAX_MODULES} modules")),
        "{message}"
    );
    // Another text is refused alike, before the worker is asked.
    let (kind, _) = op_error(w.load_module(&kernel_source("faults")));
    assert_eq!(kind, ErrorKind::OutOfMemory);
    // One unloaded makes room for one.
    w.unload_module(held.pop().unwrap()).unwrap();
    w.load_module(&iota).unwrap();
    assert_eq!(op_kind(w.load_module(&iota)), ErrorKind::OutOfMemory);
    // The worker still holds the one module, for every load.
    assert_eq!(w.info().unwrap().modules, 1);
}

/// The text of the modules a worker holds is bounded: distinct loads of 4 MiB each fill its
/// 128 MiB and the next is refused before the worker is asked, saying so; a repeated load of a
/// text it holds (answered by the host) still goes through; an unload makes room again, and a
/// reset empties it.
#[test]
fn the_text_of_the_modules_a_worker_holds_is_bounded() {
    const EACH: usize = 4 << 20;
    let fit = MAX_MODULE_TEXT_BYTES / EACH;
    let mut w = emu_worker(16 << 20);
    let mut held = Vec::new();
    for tag in 0..fit {
        held.push(w.load_module(&padded_iota(tag, EACH)).unwrap().id);
    }
    let (kind, message) = op_error(w.load_module(&padded_iota(fit, EACH)));
    assert_eq!(kind, ErrorKind::OutOfMemory, "{message}");
    assert!(
        message.contains(&format!(
            "at most {} MiB of text",
            MAX_MODULE_TEXT_BYTES >> 20
        )),
        "{message}"
    );
    assert_eq!(w.info().unwrap().modules as usize, fit);
    // The text of a module it holds, loaded again, takes no more.
    w.load_module(&padded_iota(0, EACH)).unwrap();
    // One unloaded makes room for one (the repeated load above holds the first one's id).
    w.unload_module(held.pop().unwrap()).unwrap();
    w.load_module(&padded_iota(fit, EACH)).unwrap();
    assert_eq!(
        op_kind(w.load_module(&padded_iota(fit + 1, EACH))),
        ErrorKind::OutOfMemory
    );
    // A reset unloads them all.
    w.reset().unwrap();
    for tag in 0..fit {
        w.load_module(&padded_iota(100 + tag, EACH)).unwrap();
    }
}

/// `got` is the failure of that launch (the worker's first), reported instead of the call.
#[track_caller]
fn held_launch_failure_reported(got: Result<LoadedModule, tasklet_worker::WorkerError>) {
    let (kind, message) = op_error(got);
    assert_eq!(kind, ErrorKind::InvalidArgument, "{message}");
    assert!(message.contains("launch #1"), "{message}");
}
