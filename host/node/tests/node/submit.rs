//! GPU_SUBMIT: one kernel on a lease's region, and each of its statuses.

use crate::support::*;
use tasklet_remote::ClientError;
use tasklet_wire::{ErrorCode, GpuSubmit, LeaseId, Reply, Request};

const IOTA_PTX: &str = include_str!("../../../../kernels/iota.ptx");
const FAULTS_PTX: &str = include_str!("../../../../kernels/faults.ptx");
const SCALE_PTX: &str = include_str!("../../../../kernels/scale.ptx");

/// A GPU_SUBMIT of `scale` on `lease`: its `count` floats from the region's start multiplied
/// by `factor` in place, `threads` threads, `output_size` bytes read back from the start.
fn scale(lease: LeaseId, factor: f32, count: u32, threads: u32, output_size: u64) -> GpuSubmit {
    let mut args = factor.to_le_bytes().to_vec();
    args.extend_from_slice(&count.to_le_bytes());
    GpuSubmit {
        lease,
        ptx: SCALE_PTX.as_bytes().to_vec(),
        kernel: "scale".into(),
        grid: [threads.div_ceil(256), 1, 1],
        block: [threads.min(256), 1, 1],
        args,
        output_size,
        output_offset: 0,
        input: Vec::new(),
    }
}

fn iota(lease: LeaseId, n: u32) -> GpuSubmit {
    GpuSubmit {
        lease,
        ptx: IOTA_PTX.as_bytes().to_vec(),
        kernel: "iota".into(),
        grid: [n.div_ceil(64), 1, 1],
        block: [64, 1, 1],
        args: n.to_le_bytes().to_vec(),
        output_size: 4 * u64::from(n),
        output_offset: 0,
        input: Vec::new(),
    }
}

fn status(result: Result<Vec<u8>, ClientError>) -> Option<ErrorCode> {
    result.err().and_then(|e| e.code())
}

pub fn gpu_submit_runs_one_kernel_and_reports_each_status() -> TestResult {
    let node = TestNode::start();
    let mut client = node.client("dev");
    let lease = client
        .lease_alloc(1 << 20, 60, None)
        .map_err(|e| e.to_string())?
        .lease;

    let out = client
        .gpu_submit(&iota(lease, 1000))
        .map_err(|e| e.to_string())?;
    let values: Vec<u32> = out
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    check(values == (1..=1000).collect::<Vec<_>>(), || {
        format!("{:?}", &values[..8])
    })?;
    // The region persists between submissions; a read from an offset sees the last one's output.
    let mut tail = iota(lease, 10);
    tail.output_offset = 4 * 995;
    tail.output_size = 20;
    let out = client.gpu_submit(&tail).map_err(|e| e.to_string())?;
    check(
        out == [996u32, 997, 998, 999, 1000]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>(),
        || format!("{out:?}"),
    )?;

    // UNAUTHORIZED (2): a lease that is not this connection's.
    let mut other = node.client("team");
    check(
        status(other.gpu_submit(&iota(lease, 10))) == Some(ErrorCode::Unauthorized),
        || "2".into(),
    )?;
    // LOAD_FAILED (3): a module that does not parse.
    let mut bad = iota(lease, 10);
    bad.ptx = b".version 8.0\n.target sm_80\nthis is not ptx".to_vec();
    check(
        status(client.gpu_submit(&bad)) == Some(ErrorCode::LoadFailed),
        || "3".into(),
    )?;
    // LAUNCH_FAILED (4): arguments that do not fit the kernel, a kernel that is not there, and a
    // kernel that faults.
    let mut args = iota(lease, 10);
    args.args = vec![0; 12];
    let err = client.gpu_submit(&args).err().ok_or("bad args accepted")?;
    check(
        err.code() == Some(ErrorCode::LaunchFailed)
            && err.to_string().contains("args holds 12 bytes"),
        || err.to_string(),
    )?;
    let mut missing = iota(lease, 10);
    missing.kernel = "nope".into();
    check(
        status(client.gpu_submit(&missing)) == Some(ErrorCode::LaunchFailed),
        || "4, missing kernel".into(),
    )?;
    let fault = GpuSubmit {
        lease,
        ptx: FAULTS_PTX.as_bytes().to_vec(),
        kernel: "write_out_of_bounds".into(),
        grid: [1, 1, 1],
        block: [1, 1, 1],
        args: (1u64 << 40).to_le_bytes().to_vec(),
        output_size: 4,
        output_offset: 0,
        input: Vec::new(),
    };
    let err = client
        .gpu_submit(&fault)
        .err()
        .ok_or("a faulting kernel succeeded")?;
    // The status is the step's; the cause says what a session would have: the kernel faulted.
    let cause = match &err {
        ClientError::Failed { error, .. } => error.cause,
        _ => None,
    };
    check(
        err.code() == Some(ErrorCode::LaunchFailed) && cause == Some(ErrorCode::KernelFault),
        || err.to_string(),
    )?;
    // A fault ends the lease's worker, so the lease: a new one for the last status.
    let lease = client
        .lease_alloc(1 << 20, 60, None)
        .map_err(|e| e.to_string())?
        .lease;
    // READ_FAILED (6): output outside the region.
    let mut outside = iota(lease, 10);
    outside.output_offset = 2 << 20;
    check(
        status(client.gpu_submit(&outside)) == Some(ErrorCode::ReadFailed),
        || "6".into(),
    )?;
    let metrics = node.node().control().metrics();
    check(
        metrics.gpu_submit_total == 8 && metrics.gpu_submit_errors == 6,
        || format!("{metrics:?}"),
    )?;
    drop(client);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// GPU_SUBMIT's `input` lands at the start of the region before the launch: a kernel that scales
/// its input in place returns the scaled input; an input that does not fit the region is refused
/// with OUT_OF_BOUNDS, and an output range past it with READ_FAILED, before anything runs.
pub fn gpu_submit_writes_its_input_before_the_launch() -> TestResult {
    let node = TestNode::start();
    let mut client = node.client("dev");
    // A small lease, so that an input one byte past its region still fits GPU_SUBMIT's cap.
    let lease = client
        .lease_alloc(64 << 10, 60, None)
        .map_err(|e| e.to_string())?;
    let xs: Vec<f32> = (0..300).map(|i| i as f32 * 0.5).collect();
    let mut submit = scale(lease.lease, 3.0, xs.len() as u32, 512, 4 * xs.len() as u64);
    submit.input = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let out = client.gpu_submit(&submit).map_err(|e| e.to_string())?;
    let want: Vec<u8> = xs.iter().flat_map(|x| (x * 3.0).to_le_bytes()).collect();
    check(out == want, || format!("{:?}", &out[..16]))?;

    submit.input = vec![0; lease.granted_bytes as usize + 1];
    let err = client
        .gpu_submit(&submit)
        .err()
        .ok_or("an input past the region was taken")?;
    check(err.code() == Some(ErrorCode::OutOfBounds), || {
        err.to_string()
    })?;

    // An output range past the region is refused before the input is written or the kernel
    // runs: READ_FAILED, its cause OUT_OF_BOUNDS, and the region as the first submission left it.
    submit.input = vec![0xee; 64];
    submit.output_offset = lease.granted_bytes - 4;
    let err = client
        .gpu_submit(&submit)
        .err()
        .ok_or("an output past the region was read")?;
    let cause = match &err {
        ClientError::Failed { error, .. } => error.cause,
        _ => None,
    };
    check(
        err.code() == Some(ErrorCode::ReadFailed) && cause == Some(ErrorCode::OutOfBounds),
        || err.to_string(),
    )?;
    // Scaling by 1 reads the region back as it is.
    submit.input.clear();
    submit.output_offset = 0;
    submit.args[..4].copy_from_slice(&1.0f32.to_le_bytes());
    let out = client.gpu_submit(&submit).map_err(|e| e.to_string())?;
    check(out == want, || {
        format!(
            "the refused submission changed the region: {:?}",
            &out[..16]
        )
    })?;
    drop(client);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A lease's first submission, refused for an output range past the region, makes no region:
/// the lease's memory is all still there for a session to allocate.
pub fn a_refused_first_submission_leaves_the_lease_untouched() -> TestResult {
    let node = TestNode::start();
    let mut client = node.client("dev");
    let lease = client
        .lease_alloc(64 << 10, 60, None)
        .map_err(|e| e.to_string())?;
    let mut past = scale(lease.lease, 1.0, 4, 4, 16);
    past.output_offset = lease.granted_bytes;
    let refused = status(client.gpu_submit(&past));
    check(refused == Some(ErrorCode::ReadFailed), || {
        format!("{refused:?}")
    })?;
    let session = session_on(&mut client, lease.lease)?;
    let whole = client.request(&Request::MemAlloc {
        session,
        bytes: lease.granted_bytes,
    });
    check(matches!(whole, Ok((Reply::MemAlloc { .. }, _))), || {
        format!("the lease's memory is not all there after a refused submission: {whole:?}")
    })?;
    drop(client);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A module whose operands nest without end (a few kilobytes of `((((…`), as a GPU_SUBMIT and
/// as a MODULE_LOAD: the node serves on, another connection's lease working after it (parsed by
/// recursion without a bound, it overflowed the connection thread's stack and aborted the node).
/// On the emulator each fails to load, naming the nesting; on a GPU the driver's compiler
/// judges the module (it takes this one) and the node reads its signatures without the body.
pub fn a_module_nested_without_end_fails_to_load_and_the_node_serves_on() -> TestResult {
    let node = TestNode::start();
    let mut other = node.client("dev");
    let held = other
        .lease_alloc(64 << 10, 60, None)
        .map_err(|e| e.to_string())?;
    let deep = 5_000;
    let ptx = format!(
        ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry e(.param .u64 p)\n{{\n.reg .b32 %r<2>;\nmov.u32 %r1, {}1{};\nret;\n}}\n",
        "(".repeat(deep),
        ")".repeat(deep)
    );
    let mut client = node.client("dev");
    let lease = client
        .lease_alloc(64 << 10, 60, None)
        .map_err(|e| e.to_string())?;
    let submitted = client.gpu_submit(&GpuSubmit {
        lease: lease.lease,
        ptx: ptx.clone().into_bytes(),
        kernel: "e".into(),
        grid: [1, 1, 1],
        block: [1, 1, 1],
        args: Vec::new(),
        output_size: 0,
        output_offset: 0,
        input: Vec::new(),
    });
    let on_a_gpu = backend_for(&policy()) == tasklet_runtime::BackendKind::Cuda;
    let failed = |error: Option<&ClientError>| {
        on_a_gpu
            || error.is_some_and(|e| {
                e.code() == Some(ErrorCode::LoadFailed) && e.to_string().contains("nested")
            })
    };
    check(failed(submitted.as_ref().err()), || {
        format!("GPU_SUBMIT of a module nested {deep} deep: {submitted:?}")
    })?;
    let session = session_on(&mut client, lease.lease)?;
    let loaded = client.request(&Request::ModuleLoad {
        session,
        ptx: ptx.into_bytes(),
    });
    check(failed(loaded.as_ref().err()), || {
        format!("MODULE_LOAD of a module nested {deep} deep: {loaded:?}")
    })?;
    // The node, and the other connection's lease, are still there.
    let out = other
        .gpu_submit(&iota(held.lease, 8))
        .map_err(|e| e.to_string())?;
    check(out.len() == 32, || format!("{} bytes", out.len()))?;
    drop(client);
    drop(other);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}
