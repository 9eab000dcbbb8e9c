//! The same tasklet, its GPU local or on the node: the same output.

use crate::support::*;
use tasklet_remote::RemoteGpu;
use tasklet_runtime::gpu::{
    GpuService, KernelArg, LaunchConfig, LeaseRequest, LocalGpu, ParamKind,
};
use tasklet_runtime::{GpuError, Manifest};

/// The example tasklets, each run locally and remotely on the same inputs.
pub fn examples_match_local() -> TestResult {
    let node = TestNode::start();
    let local = local_host();
    let cases: [(&str, &[&str]); 3] = [
        ("iota", &["1", "37", "1000", ""]),
        ("vector-add", &["1", "1000", "100000"]),
        ("scale", &["1.5 1 2.25 -3 0.1 1e30 16777217", "2"]),
    ];
    for (name, inputs) in cases {
        let manifest = Manifest::load(&tasklet(name)).expect("manifest");
        let compiled = local.load(manifest.clone()).expect("component loads");
        for input in inputs {
            let here = local
                .run(&compiled, input.as_bytes())
                .map_err(|e| format!("{name} local: {e}"))?;
            let gpu = RemoteGpu::for_manifest(node.client("dev"), &manifest)
                .map_err(|e| e.to_string())?;
            let there = local
                .runner()
                .run(&compiled, input.as_bytes(), Box::new(gpu))
                .map_err(|e| format!("{name} remote: {e}"))?;
            check(here == there, || {
                format!(
                    "{name} on {input:?}: local {:?}, remote {:?}",
                    String::from_utf8_lossy(&here),
                    String::from_utf8_lossy(&there)
                )
            })?;
        }
    }
    // Every run's connection closed with it, and took its lease along.
    node.wait_for_baseline(WAIT)?;
    tasklet_tests::assert_baseline(&local);
    Ok(())
}

/// A tasklet's failure is the same too: iota refuses a bad input either way.
pub fn a_failing_run_fails_alike() -> TestResult {
    let node = TestNode::start();
    let local = local_host();
    let manifest = Manifest::load(&tasklet("iota")).expect("manifest");
    let compiled = local.load(manifest.clone()).expect("component loads");
    let here = local
        .run(&compiled, b"twelve")
        .expect_err("local run fails");
    let gpu = RemoteGpu::for_manifest(node.client("dev"), &manifest).map_err(|e| e.to_string())?;
    let there = local
        .runner()
        .run(&compiled, b"twelve", Box::new(gpu))
        .expect_err("remote run fails");
    check(here.to_string() == there.to_string(), || {
        format!("local: {here}; remote: {there}")
    })?;
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

const IOTA_PTX: &str = include_str!("../../../../kernels/iota.ptx");

/// Launches are pipelined: a bad one returns at once, and the next sync reports it, naming the
/// LAUNCH; a good session goes on working after.
pub fn pipelined_failures_surface_at_the_next_sync() -> TestResult {
    let node = TestNode::start();
    let mut gpu = RemoteGpu::new(node.client("dev"));
    let lease = gpu.lease_acquire(LeaseRequest {
        min_vram: 1 << 20,
        secs: 30,
        device: None,
    })?;
    let session = gpu.session_open(lease)?;
    let module = gpu.module_load(session, IOTA_PTX)?;
    check(gpu.module_kernels(session, module) == ["iota"], || {
        "kernels".into()
    })?;
    let out = gpu.mem_alloc(session, 4 * 64)?;
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [64, 1, 1],
        shared_mem_bytes: 0,
    };
    // One argument too few: refused by the node, reported later.
    gpu.launch(
        session,
        module,
        "iota",
        &config,
        &[KernelArg::Buffer {
            buffer: out,
            offset: 0,
        }],
    )?;
    match gpu.sync(session) {
        Err(GpuError::InvalidArgument(message)) => check(
            message.contains("takes 2 argument(s), 1 given") && message.contains("LAUNCH"),
            || format!("the sync's report: {message}"),
        )?,
        other => {
            return Err(format!("expected the launch's failure at the sync, got {other:?}").into())
        }
    }
    let args = [
        KernelArg::Buffer {
            buffer: out,
            offset: 0,
        },
        KernelArg::U32(64),
    ];
    for _ in 0..100 {
        gpu.launch(session, module, "iota", &config, &args)?;
    }
    gpu.sync(session)?;
    let bytes = gpu.mem_read(session, out, 0, 4 * 64)?;
    let values: Vec<u32> = bytes
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    check(values == (1..=64).collect::<Vec<_>>(), || {
        format!("{values:?}")
    })?;
    // A write that does not fit is reported at the next read, naming the MEM_WRITE.
    gpu.mem_write(session, out, 4 * 60, &[0u8; 64])?;
    match gpu.mem_read(session, out, 0, 4) {
        Err(GpuError::OutOfBounds(message)) => {
            check(message.contains("MEM_WRITE"), || message.clone())?
        }
        other => {
            return Err(format!("expected the write's failure at the read, got {other:?}").into())
        }
    }
    gpu.lease_drop(lease);
    drop(gpu);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A large write and read stream through in pieces and come back intact.
pub fn large_transfers_round_trip() -> TestResult {
    let node = TestNode::start();
    let mut gpu = RemoteGpu::new(node.client("dev"));
    let size = 24u64 << 20;
    let lease = gpu.lease_acquire(LeaseRequest {
        min_vram: size,
        secs: 60,
        device: None,
    })?;
    let session = gpu.session_open(lease)?;
    let buffer = gpu.mem_alloc(session, size)?;
    let data: Vec<u8> = (0..size).map(|i| (i * 7 + i / 4093) as u8).collect();
    gpu.mem_write(session, buffer, 0, &data)?;
    let back = gpu.mem_read(session, buffer, 0, size)?;
    check(back == data, || "the data came back changed".into())?;
    drop(gpu);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

const FAULTS_PTX: &str = include_str!("../../../../kernels/faults.ptx");
const STRUCT_POINTERS_PTX: &str = include_str!("../../../../kernels/struct_pointers.ptx");

/// A struct passed by value holding two device pointers (a relocated argument) goes over LAUNCH
/// and reaches the kernel with its buffers' addresses; the node checks its relocations and the
/// other arguments' types as a local host does, reporting a refusal at the next sync.
pub fn relocated_arguments_reach_the_kernel_through_the_node() -> TestResult {
    use tasklet_runtime::gpu::Relocation;
    let node = TestNode::start();
    let mut gpu = RemoteGpu::new(node.client("dev"));
    let lease = gpu.lease_acquire(LeaseRequest {
        min_vram: 1 << 20,
        secs: 30,
        device: None,
    })?;
    let session = gpu.session_open(lease)?;
    let module = gpu.module_load(session, STRUCT_POINTERS_PTX)?;
    let n = 64u32;
    let ints =
        |v: &mut dyn Iterator<Item = i32>| -> Vec<u8> { v.flat_map(|x| x.to_le_bytes()).collect() };
    let (a, b, out) = (
        gpu.mem_alloc(session, 4 * n as u64)?,
        gpu.mem_alloc(session, 4 * n as u64 + 8)?,
        gpu.mem_alloc(session, 4 * n as u64)?,
    );
    gpu.mem_write(session, a, 0, &ints(&mut (0..n as i32)))?;
    gpu.mem_write(session, b, 8, &ints(&mut (0..n as i32).map(|i| 100 - i)))?;
    // struct Operands { const int* a; const int* b; int scale; }, b from its third element.
    let mut ops = vec![0u8; 24];
    ops[16..20].copy_from_slice(&3i32.to_le_bytes());
    let relocations = [
        Relocation {
            at: 0,
            buffer: a,
            offset: 0,
        },
        Relocation {
            at: 8,
            buffer: b,
            offset: 8,
        },
    ];
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [n, 1, 1],
        shared_mem_bytes: 0,
    };
    let launch = |gpu: &mut RemoteGpu, relocations: &[Relocation], out_arg: KernelArg<'_>| {
        gpu.launch(
            session,
            module,
            "scaled_sum",
            &config,
            &[
                out_arg,
                KernelArg::Relocated {
                    bytes: &ops,
                    relocations,
                },
                KernelArg::U32(n),
            ],
        )
    };
    let out_arg = KernelArg::Buffer {
        buffer: out,
        offset: 0,
    };
    launch(&mut gpu, &relocations, out_arg)?;
    gpu.sync(session)?;
    let got = gpu.mem_read(session, out, 0, 4 * n as u64)?;
    let expected = ints(&mut (0..n as i32).map(|i| i * 3 + 100 - i));
    check(got == expected, || "a[i] * 3 + b[i] came back wrong".into())?;
    // A relocation past its buffer, then a number for the output pointer: each refused by the
    // node, reported at the next sync.
    let past = [
        relocations[0],
        Relocation {
            offset: 4 * n as u64 + 9,
            ..relocations[1]
        },
    ];
    launch(&mut gpu, &past, out_arg)?;
    match gpu.sync(session) {
        Err(GpuError::OutOfBounds(message)) => check(
            message.contains("relocation 1: offset 265 is past the end of its 264-byte buffer"),
            || format!("the sync's report: {message}"),
        )?,
        other => return Err(format!("expected the relocation's refusal, got {other:?}").into()),
    }
    launch(&mut gpu, &relocations, KernelArg::U64(0x7f00_0000_0000))?;
    match gpu.sync(session) {
        Err(GpuError::InvalidArgument(message)) => check(
            message.contains("uses the parameter as a global address"),
            || format!("the sync's report: {message}"),
        )?,
        other => return Err(format!("expected the pointer's refusal, got {other:?}").into()),
    }
    gpu.lease_drop(lease);
    drop(gpu);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A module's kernels list the same parameters, the same ones as pointers, through the node as
/// on a local GPU: `write_out_of_bounds(unsigned* out, unsigned long long offset)` has one 64-bit
/// pointer and one 64-bit index, which only the worker's reading of the PTX tells apart.
pub fn a_remote_modules_signatures_are_the_local_ones() -> TestResult {
    let node = TestNode::start();
    let request = LeaseRequest {
        min_vram: 1 << 20,
        secs: 30,
        device: None,
    };
    let mut remote = RemoteGpu::new(node.client("dev"));
    let lease = remote.lease_acquire(request)?;
    let session = remote.session_open(lease)?;
    let module = remote.module_load(session, FAULTS_PTX)?;
    let there = remote.module_signatures(session, module);

    let host = local_host();
    let manifest = Manifest::load(&tasklet("testing/probe")).expect("manifest");
    let mut local = LocalGpu::new(host.policy().grant(&manifest), host.leases().clone());
    let lease = local.lease_acquire(request)?;
    let session = local.session_open(lease)?;
    let module = local.module_load(session, FAULTS_PTX)?;
    let here = local.module_signatures(session, module);

    check(!here.is_empty() && here == there, || {
        format!("local {here:?}\nremote {there:?}")
    })?;
    let kinds: Vec<_> = there
        .iter()
        .find(|k| k.name == "write_out_of_bounds")
        .map(|k| k.params.iter().map(|p| p.kind).collect())
        .unwrap_or_default();
    check(kinds == [ParamKind::Pointer, ParamKind::Value], || {
        format!("write_out_of_bounds's parameters through the node: {kinds:?}")
    })
}

/// The probe tasklet's output on `input`, run here on the local GPU and here with its GPU on
/// `node`: both as text.
fn probe_here_and_there(
    node: &TestNode,
    local: &tasklet_runtime::Host,
    input: &str,
) -> Result<(String, String), String> {
    let manifest = Manifest::load(&tasklet("testing/probe")).expect("manifest");
    let compiled = local.load(manifest.clone()).expect("component loads");
    let here = local
        .run(&compiled, input.as_bytes())
        .map_err(|e| format!("{input} local: {e}"))?;
    let gpu = RemoteGpu::for_manifest(node.client("dev"), &manifest).map_err(|e| e.to_string())?;
    let there = local
        .runner()
        .run(&compiled, input.as_bytes(), Box::new(gpu))
        .map_err(|e| format!("{input} remote: {e}"))?;
    Ok((
        String::from_utf8_lossy(&here).into_owned(),
        String::from_utf8_lossy(&there).into_owned(),
    ))
}

/// Each line's first two words (`ok rows`, `error invalid-argument`): error lines name ids that
/// differ between two GPUs.
fn kinds(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split(' ').take(2).collect::<Vec<_>>().join(" "))
        .collect()
}

/// A burst (contract 0.2's `launch-burst`) through the node, one LAUNCH_BURST: the same rows
/// as on the local GPU, the same refusals of the whole burst (their kinds; their messages name
/// ids that differ), the limit biting alike, and nothing of a refused burst run.
pub fn a_burst_through_the_node_is_the_local_one() -> TestResult {
    let node = TestNode::start();
    let local = local_host();
    for input in ["burst 100", "burst-misuse", "burst 4097"] {
        let (here, there) = probe_here_and_there(&node, &local, input)?;
        let same = match input {
            "burst 100" => here == there && here == "ok burst 100 first 1\nok rows 100\n",
            _ => kinds(&here) == kinds(&there) && !here.is_empty(),
        };
        check(same, || {
            format!("{input}: local {here:?}, remote {there:?}")
        })?;
    }
    node.wait_for_baseline(WAIT)?;
    tasklet_tests::assert_baseline(&local);
    Ok(())
}

/// A graph (contract 0.2's `graph`: recorded, a device scalar set before each replay) through
/// the node, one GRAPH request per operation, and a hot reload (MODULE_LOAD, then
/// MODULE_UNLOAD): the same words as on the local GPU, and the lines of each alike.
pub fn graphs_and_reloads_through_the_node_are_the_local_ones() -> TestResult {
    let node = TestNode::start();
    let local = local_host();
    let cases: [(&str, &[&str]); 2] = [
        ("graph 5", &["ok graph", "ok matches"]),
        (
            "reload",
            &["ok reloaded", "error load-failed", "ok matches"],
        ),
    ];
    for (input, expected) in cases {
        let (here, there) = probe_here_and_there(&node, &local, input)?;
        check(
            kinds(&here) == expected && kinds(&there) == expected,
            || format!("{input}: local {here:?}, remote {there:?}"),
        )?;
    }
    node.wait_for_baseline(WAIT)?;
    tasklet_tests::assert_baseline(&local);
    Ok(())
}

/// `mem-read-into` through the node fills the tasklet's memory in place as the bytes arrive:
/// small reads, reads large enough to stream in batches, memory grown after the first read, and
/// the refusals (out of bounds, a foreign buffer) that touch nothing. The same lines as on the
/// local GPU.
pub fn reads_into_tasklet_memory_through_the_node_are_the_local_ones() -> TestResult {
    let node = TestNode::start();
    let local = local_host();
    let cases = [
        ("read-into 1", "ok read-into 1024\n"),
        ("read-into 1024", "ok read-into 1048576\n"),
        ("read-into 8192", "ok read-into 8388608\n"),
        ("read-into-grown", ""),
        ("read-into-misuse", ""),
    ];
    for (input, expected) in cases {
        let (here, there) = probe_here_and_there(&node, &local, input)?;
        let same = match input {
            "read-into-misuse" => kinds(&here) == kinds(&there) && here.contains("ok untouched"),
            "read-into-grown" => here == there && there.contains("ok round-trip 16777216"),
            _ => here == there && there == expected,
        };
        check(same, || {
            format!("{input}: local {here:?}, remote {there:?}")
        })?;
    }
    node.wait_for_baseline(WAIT)?;
    tasklet_tests::assert_baseline(&local);
    Ok(())
}
