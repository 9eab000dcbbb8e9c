//! Contract 0.2 (`wit/gpu.wit`) beside 0.1 (`wit/0.1/gpu.wit`): a component built against 0.1
//! still runs; the one-shot `submit` gives what the same steps as session operations give; a
//! module lists its kernels' parameters; a kernel handle launches without a name and numbers its
//! launches; a kernel of another session is refused.

use std::sync::Arc;
use tasklet_runtime::gpu::{
    GpuService, KernelArg, KernelParam, LaunchConfig, LeaseRequest, LocalGpu, ModuleSource,
    ParamKind, Submit, SubmitArg,
};
use tasklet_runtime::GpuError;
use tasklet_tests::{assert_baseline, load, manifest, probe_lines, repo, run_ok, test_host};

const SCALE_PTX: &str = include_str!("../../../kernels/scale.ptx");

/// `iota` as built against contract 0.1 before 0.2 existed (the SDK's 0.1 release), kept as it
/// was: the host must still link and run it.
#[test]
fn a_component_built_against_contract_0_1_still_runs() {
    let host = test_host!();
    let mut old = manifest("iota");
    old.component = repo().join("tests/fixtures/iota-contract-0.1.wasm");
    let old = load(&host, old);
    let new = load(&host, manifest("iota"));
    let expected: String = (1..=300).map(|i| format!("{i}\n")).collect();
    assert_eq!(run_ok(&host, &old, "300"), expected);
    assert_eq!(run_ok(&host, &new, "300"), expected);
    assert_baseline(&host);
}

/// `scale` goes through `GpuCall`, now the 0.2 one-shot.
#[test]
fn the_one_shot_call_of_a_tasklet_scales_on_the_device() {
    let host = test_host!();
    let tasklet = load(&host, manifest("scale"));
    let out = run_ok(&host, &tasklet, "2.5 1 -2 0.1 1000");
    let expected: String = [1.0f32, -2.0, 0.1, 1000.0]
        .iter()
        .map(|x| format!("{}\n", x * 2.5))
        .collect();
    assert_eq!(out, expected);
    assert_baseline(&host);
}

fn scale_call<'a>(input: &'a [u8], args: &'a [SubmitArg<'a>], n: u32) -> Submit<'a> {
    Submit {
        lease: LeaseRequest {
            min_vram: 1 << 20,
            secs: 30,
            device: None,
        },
        module: ModuleSource::Ptx(SCALE_PTX),
        kernel: "scale",
        config: LaunchConfig {
            grid: [n.div_ceil(256), 1, 1],
            block: [256, 1, 1],
            shared_mem_bytes: 0,
        },
        args,
        input,
        output_offset: 0,
        output_size: input.len() as u64,
    }
}

/// `GpuService::submit` on a `LocalGpu` against the same steps as session operations, by hand:
/// the same bytes, and the lease it took is gone afterwards.
#[test]
fn submit_equals_the_session_path() {
    let host = test_host!();
    let grant = host.policy().grant(&manifest("scale"));
    let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
    let xs: Vec<f32> = (0..1000).map(|i| i as f32 * 0.37 - 100.0).collect();
    let input: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let n = xs.len() as u32;
    let args = [
        SubmitArg::Region { offset: 0 },
        SubmitArg::Value(KernelArg::F32(1.75)),
        SubmitArg::Value(KernelArg::U32(n)),
    ];
    let submitted = gpu.submit(&scale_call(&input, &args, n)).expect("submit");

    let lease = gpu
        .lease_acquire(LeaseRequest {
            min_vram: 1 << 20,
            secs: 30,
            device: None,
        })
        .unwrap();
    let session = gpu.session_open(lease).unwrap();
    let buf = gpu.mem_alloc(session, input.len() as u64).unwrap();
    gpu.mem_write(session, buf, 0, &input).unwrap();
    let module = gpu.module_load(session, SCALE_PTX).unwrap();
    let config = scale_call(&input, &args, n).config;
    let session_args = [
        KernelArg::Buffer {
            buffer: buf,
            offset: 0,
        },
        KernelArg::F32(1.75),
        KernelArg::U32(n),
    ];
    gpu.launch(session, module, "scale", &config, &session_args)
        .unwrap();
    let by_session = gpu.mem_read(session, buf, 0, input.len() as u64).unwrap();
    assert_eq!(submitted, by_session);
    let expected: Vec<u8> = xs.iter().flat_map(|x| (x * 1.75).to_le_bytes()).collect();
    assert_eq!(submitted, expected);
    gpu.lease_drop(lease);
    drop(gpu);
    assert_baseline(&host);
}

/// A one-shot is checked as the session operations are, and ends its lease when it fails.
#[test]
fn submit_refuses_what_a_session_would() {
    let host = test_host!();
    let grant = host.policy().grant(&manifest("scale"));
    let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
    let input = [0u8; 16];
    // Arguments that do not fit the kernel.
    let short = [SubmitArg::Region { offset: 0 }];
    let err = gpu.submit(&scale_call(&input, &short, 4)).unwrap_err();
    assert!(
        err.to_string().contains("takes 3 argument(s), 1 given"),
        "{err}"
    );
    // An output past the region.
    let args = [
        SubmitArg::Region { offset: 0 },
        SubmitArg::Value(KernelArg::F32(1.0)),
        SubmitArg::Value(KernelArg::U32(4)),
    ];
    let mut past = scale_call(&input, &args, 4);
    past.output_offset = 1 << 20;
    let err = gpu.submit(&past).unwrap_err();
    assert!(
        matches!(err, GpuError::OutOfBounds(_))
            && err.to_string().contains("outside the lease's")
            && err.to_string().contains("nothing was launched"),
        "{err}"
    );
    // A buffer of a session: a one-shot has none.
    let buffer = [SubmitArg::Value(KernelArg::Buffer {
        buffer: tasklet_runtime::gpu::BufferId(1),
        offset: 0,
    })];
    let err = gpu.submit(&scale_call(&input, &buffer, 4)).unwrap_err();
    assert!(err.to_string().contains("region"), "{err}");
    drop(gpu);
    assert_baseline(&host);
}

#[test]
fn a_module_lists_its_kernels_parameters() {
    let host = test_host!();
    let grant = host.policy().grant(&manifest("scale"));
    let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
    let lease = gpu
        .lease_acquire(LeaseRequest {
            min_vram: 1 << 20,
            secs: 30,
            device: None,
        })
        .unwrap();
    let session = gpu.session_open(lease).unwrap();
    let module = gpu.module_load(session, SCALE_PTX).unwrap();
    let kernels = gpu.module_signatures(session, module);
    let param = |name: &str, size, kind| KernelParam {
        name: name.into(),
        size,
        align: size,
        kind,
    };
    assert_eq!(kernels.len(), 1);
    assert_eq!(kernels[0].name, "scale");
    assert_eq!(
        kernels[0].params,
        [
            param("scale_param_0", 8, ParamKind::Pointer),
            param("scale_param_1", 4, ParamKind::Value),
            param("scale_param_2", 4, ParamKind::Value),
        ]
    );
    // Another session sees none of them.
    let other = gpu.session_open(lease).unwrap();
    assert!(gpu.module_signatures(other, module).is_empty());
    gpu.lease_drop(lease);
    drop(gpu);
    assert_baseline(&host);
}

/// Through the SDK in a tasklet: `Module::kernels` with parameters, a `Kernel` handle launched
/// twice (ordinals 1 and 2 under a fresh lease), and a handle of another session's module
/// refused by the host.
#[test]
fn kernel_handles_launch_by_index_and_stay_in_their_session() {
    let host = test_host!();
    let tasklet = load(&host, manifest("testing/sdk-check"));
    let lines = probe_lines(&run_ok(&host, &tasklet, "kernels"));
    let line = |i: usize| lines.get(i).cloned().unwrap_or_default();
    assert_eq!(
        line(0),
        (
            "ok".into(),
            "params".into(),
            "scale_param_0:8:8:Pointer scale_param_1:4:4:Value scale_param_2:4:4:Value".into()
        ),
        "{lines:?}"
    );
    assert_eq!(line(1), ("ok".into(), "ordinals".into(), "1 2".into()));
    assert_eq!(
        line(2),
        ("ok".into(), "handle".into(), "1 2 3 4 5 6 7 8".into())
    );
    let (status, kind, message) = line(3);
    assert_eq!(
        (status.as_str(), kind.as_str()),
        ("error", "invalid-argument"),
        "{lines:?}"
    );
    assert!(message.contains("another session"), "{message}");
    assert_baseline(&host);
}
