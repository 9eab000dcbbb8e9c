//! Hot reload (contract 0.2's `module.reload`): a session replaces a module's code and keeps its
//! buffers; kernels resolved from the old code and graphs that launch them are refused, saying
//! so; a reload that fails leaves the old code working. Through a tasklet's GPU service on this
//! node (`LocalGpu`) and through the probe tasklet (the SDK), on the suite's backend.

use std::sync::Arc;

use crate::graphs::ADD_STEP_PTX;
use tasklet_runtime::gpu::{
    GpuService, GraphArg, KernelArg, KernelRef, LaunchConfig, LeaseRequest, LocalGpu, ModuleSource,
};
use tasklet_runtime::GpuError;
use tasklet_tests::{assert_baseline, manifest, probe_session, run_probe, test_host};

const WORDS: u32 = 256;

#[test]
fn a_reload_keeps_the_buffers_and_refuses_what_the_old_code_resolved() {
    let host = test_host!();
    let grant = host.policy().grant(&manifest("testing/probe"));
    let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
    let request = LeaseRequest {
        min_vram: 1 << 20,
        secs: 60,
        device: None,
    };
    let lease = gpu.lease_acquire(request).expect("lease");
    let s = gpu.session_open(lease).expect("session");
    let old = gpu.module_load(s, ADD_STEP_PTX).expect("loads");
    let x = gpu.mem_alloc(s, 4 * u64::from(WORDS)).expect("alloc");
    let step = gpu.mem_alloc(s, 8).expect("alloc");
    let start: Vec<u8> = (0..WORDS).flat_map(|i| i.to_le_bytes()).collect();
    gpu.mem_write(s, x, 0, &start).expect("write");
    gpu.mem_write(s, step, 0, &7u64.to_le_bytes())
        .expect("write");
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [WORDS, 1, 1],
        shared_mem_bytes: 0,
    };
    let buf = |buffer| KernelArg::Buffer { buffer, offset: 0 };
    let args = [buf(x), buf(step), KernelArg::U32(WORDS)];
    gpu.launch_kernel(s, old, KernelRef::At(0), &config, &args)
        .expect("launch");
    let graph = gpu.graph_create(s).expect("graph");
    let graph_args = args.map(GraphArg::Arg);
    gpu.graph_launch(s, graph, old, KernelRef::At(0), &config, &graph_args)
        .expect("record");

    let times_five = ADD_STEP_PTX.replace("%r7, 3, %r6", "%r7, 5, %r6");
    let new = gpu
        .module_reload(s, old, ModuleSource::Ptx(&times_five))
        .expect("reload");
    assert_ne!(new, old);
    // What the old code resolved is refused, saying why.
    for r in [
        gpu.launch_kernel(s, old, KernelRef::At(0), &config, &args)
            .map(drop),
        gpu.graph_replay(s, graph, 1),
    ] {
        match r {
            Err(GpuError::InvalidArgument(m))
                if m.contains("reloaded") || m.contains("unloaded") => {}
            other => panic!("refused, saying the module was reloaded: {other:?}"),
        }
    }
    gpu.launch_kernel(s, new, KernelRef::At(0), &config, &args)
        .expect("the new code launches");
    // A reload that fails leaves the new code loaded and working; another session's module
    // does not reload here.
    let failed = gpu.module_reload(s, new, ModuleSource::Ptx("not ptx"));
    assert!(matches!(failed, Err(GpuError::LoadFailed(_))), "{failed:?}");
    gpu.launch_kernel(s, new, KernelRef::At(0), &config, &args)
        .expect("still launches");
    let other_lease = gpu.lease_acquire(request).expect("lease");
    let other = gpu.session_open(other_lease).expect("session");
    let refused = gpu.module_reload(other, new, ModuleSource::Ptx(ADD_STEP_PTX));
    assert!(
        matches!(refused, Err(GpuError::InvalidArgument(_))),
        "{refused:?}"
    );

    gpu.sync(s).expect("sync");
    let got = gpu.mem_read(s, x, 0, 4 * u64::from(WORDS)).expect("read");
    let want: Vec<u8> = (0..WORDS)
        .map(|v| {
            let v = v.wrapping_mul(3).wrapping_add(7);
            let v = v.wrapping_mul(5).wrapping_add(7);
            v.wrapping_mul(5).wrapping_add(7)
        })
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert!(
        got == want,
        "the buffer kept through the reloads, each launch on its code"
    );
    drop(gpu);
    assert_baseline(&host);
}

#[test]
fn a_tasklet_reloads_a_module_and_keeps_its_buffers() {
    let host = test_host!();
    let lines = run_probe(&host, "reload");
    let text: Vec<String> = lines
        .iter()
        .map(|(a, b, c)| format!("{a} {b} {c}"))
        .collect();
    assert_eq!(text.len(), 3, "{text:?}");
    assert_eq!(text[0], "ok reloaded ");
    assert!(text[1].starts_with("error load-failed "), "{text:?}");
    assert_eq!(text[2], "ok matches ");
    assert_baseline(&host);
}

/// A loop of reloads keeps working: each reload's predecessor is refused saying it was reloaded,
/// any older id is refused too, the latest code launches, and nothing is left behind.
#[test]
fn a_loop_of_reloads_refuses_every_old_id_and_leaves_nothing_behind() {
    let host = test_host!();
    let (mut gpu, s) = probe_session(&host);
    let first = gpu.module_load(s, ADD_STEP_PTX).expect("loads");
    let x = gpu.mem_alloc(s, 4 * u64::from(WORDS)).expect("alloc");
    let step = gpu.mem_alloc(s, 8).expect("alloc");
    let buf = |buffer| KernelArg::Buffer { buffer, offset: 0 };
    let args = [buf(x), buf(step), KernelArg::U32(WORDS)];
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [WORDS, 1, 1],
        shared_mem_bytes: 0,
    };
    let mut live = first;
    for _ in 0..100 {
        let old = live;
        live = gpu
            .module_reload(s, old, ModuleSource::Ptx(ADD_STEP_PTX))
            .expect("reload");
        match gpu.launch_kernel(s, old, KernelRef::At(0), &config, &args) {
            Err(GpuError::InvalidArgument(m)) if m.contains("reloaded") => {}
            other => panic!("the replaced id refused, saying it was reloaded: {other:?}"),
        }
    }
    let r = gpu.launch_kernel(s, first, KernelRef::At(0), &config, &args);
    assert!(matches!(r, Err(GpuError::InvalidArgument(_))), "{r:?}");
    gpu.launch_kernel(s, live, KernelRef::At(0), &config, &args)
        .expect("the latest code launches");
    gpu.sync(s).expect("sync");
    drop(gpu);
    assert_baseline(&host);
}
