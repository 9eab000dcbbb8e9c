//! The one-shot and the edges of a remote run: a client of another protocol version is told
//! so at HELLO; a one-shot fails remotely with the very error kind it fails with locally; a
//! remote wait ends at the run's wall-time limit; a one-shot lost with its node runs on the
//! next node, while a session on it fails `disconnected`.

use crate::lifecycle::{helper, kill};
use crate::support::*;
use std::time::{Duration, Instant};
use tasklet_remote::{
    submit_anywhere, ClientError, ConnectOptions, NodeClient, NodeList, RemoteGpu,
};
use tasklet_runtime::gpu::{
    BufferId, GpuService, KernelArg, LaunchConfig, LeaseRequest, LocalGpu, ModuleId, ModuleSource,
    SessionId, Submit, SubmitArg,
};
use tasklet_runtime::{GpuError, Manifest, RunError};
use tasklet_wire::{ErrorCode, GpuSubmit, LeaseId, Reply, Request};

pub const FAULTS_PTX: &str = include_str!("../../../../kernels/faults.ptx");
const IOTA_PTX: &str = include_str!("../../../../kernels/iota.ptx");

/// Parses as far as its entry's signature, then holds an instruction that does not exist: the
/// client lays its arguments out and sends it as one GPU_SUBMIT, and the node's load fails.
const BROKEN_BODY_PTX: &str = "\
.version 7.0
.target sm_80
.address_size 64
.visible .entry broken(.param .u64 out)
{
\t.reg .b32 %r<2>;
\tbogus.instr %r1;
\tret;
}
";

/// Not PTX at all: the client cannot read a signature, so the one-shot goes as session ops.
const NOT_PTX: &str = ".version 8.0\n.target sm_80\nthis is not ptx";

pub const LEASE: LeaseRequest = LeaseRequest {
    min_vram: 1 << 20,
    secs: 30,
    device: None,
};

/// An old client (version 1 only) is refused at HELLO, in words naming both versions, and the
/// connection closes; HELLO's reply reaches it because HELLO's frames keep version 1.
pub fn a_client_of_another_version_is_told_at_hello() -> TestResult {
    let node = TestNode::start();
    let mut raw = RawClient::connect(&node, "dev");
    let answer = raw.request(
        1,
        &Request::Hello {
            min_version: 1,
            max_version: 1,
            agent: "old".into(),
        },
    )?;
    match answer {
        (Reply::Error { error, .. }, _) => check(
            error.code == ErrorCode::Unsupported
                && error.message.contains(&format!(
                    "protocol version {}",
                    tasklet_wire::PROTOCOL_VERSION
                ))
                && error.message.contains("offered 1 to 1"),
            || format!("{error}"),
        )?,
        other => return Err(format!("an old client was answered {other:?}").into()),
    }
    raw.closed()?;
    Ok(())
}

/// What a one-shot's failure is, by kind.
fn kind(result: &Result<Vec<u8>, GpuError>) -> String {
    match result {
        Ok(out) => format!("ok ({} bytes)", out.len()),
        Err(err) => err.to_string().split(':').next().unwrap_or("").to_owned(),
    }
}

/// A kernel that faults, a module whose body does not load (one GPU_SUBMIT) and one that is not
/// PTX (session ops), as one-shots here and on the node: the same error kinds, the fault's
/// `kernel-fault` included (not `launch-failed`), in the same words.
pub fn one_shots_fail_alike_here_and_on_the_node() -> TestResult {
    let node = TestNode::start();
    let host = local_host();
    let manifest = Manifest::load(&tasklet("testing/probe")).expect("manifest");
    let mut local = LocalGpu::new(host.policy().grant(&manifest), host.leases().clone());
    let mut remote =
        RemoteGpu::for_manifest(node.client("dev"), &manifest).map_err(|e| e.to_string())?;
    let far = [
        SubmitArg::Region { offset: 0 },
        SubmitArg::Value(KernelArg::U64(1 << 40)),
    ];
    let region = [SubmitArg::Region { offset: 0 }];
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
    };
    let calls = [
        (
            "a faulting kernel",
            FAULTS_PTX,
            "write_out_of_bounds",
            &far[..],
            "kernel fault",
        ),
        (
            "a body that does not load",
            BROKEN_BODY_PTX,
            "broken",
            &region[..],
            "load failed",
        ),
        ("not PTX", NOT_PTX, "iota", &region[..], "load failed"),
        (
            "a kernel that is not there",
            IOTA_PTX,
            "nope",
            &region[..],
            "launch failed",
        ),
    ];
    let submits_before = node.node().control().metrics().gpu_submit_total;
    for (what, ptx, kernel, args, expected) in calls {
        let call = Submit {
            lease: LEASE,
            module: ModuleSource::Ptx(ptx),
            kernel,
            config,
            args,
            input: &[],
            output_offset: 0,
            output_size: 4,
        };
        let here = local.submit(&call);
        let there = remote.submit(&call);
        println!("{what}: here {here:?}, on the node {there:?}");
        // The same kind, and the same words.
        check(
            kind(&here) == expected
                && kind(&there) == expected
                && here.as_ref().err().map(ToString::to_string)
                    == there.as_ref().err().map(ToString::to_string),
            || format!("{what}: here {here:?}, on the node {there:?}; expected {expected}"),
        )?;
    }
    // An output past the region: refused before the launch, here and there in the same words.
    let iota_args = [
        SubmitArg::Region { offset: 0 },
        SubmitArg::Value(KernelArg::U32(1)),
    ];
    let past = Submit {
        lease: LEASE,
        module: ModuleSource::Ptx(IOTA_PTX),
        kernel: "iota",
        config,
        args: &iota_args,
        input: &[],
        output_offset: 1 << 40,
        output_size: 4,
    };
    let (here, there) = (local.submit(&past), remote.submit(&past));
    let words = |r: &Result<Vec<u8>, GpuError>| r.as_ref().err().map(ToString::to_string);
    check(
        matches!(here, Err(GpuError::OutOfBounds(_)))
            && words(&here) == words(&there)
            && words(&here).is_some_and(|w| w.contains("nothing was launched")),
        || format!("an output past the region: here {here:?}, on the node {there:?}"),
    )?;
    // Arguments that do not fit the kernel (iota's count left out, one too many for broken),
    // alone, with an output past the region, and with a body that does not load: reported in the order a local one-shot
    // meets them (the span, the load, then the arguments), in the same words.
    let too_few = [SubmitArg::Region { offset: 0 }];
    let too_many = [
        SubmitArg::Region { offset: 0 },
        SubmitArg::Value(KernelArg::U32(1)),
    ];
    for (what, ptx, kernel, output_offset) in [
        ("too few arguments", IOTA_PTX, "iota", 0),
        (
            "too few arguments, an output past the region",
            IOTA_PTX,
            "iota",
            1 << 40,
        ),
        (
            "too many arguments, a body that does not load",
            BROKEN_BODY_PTX,
            "broken",
            0,
        ),
    ] {
        let call = Submit {
            lease: LEASE,
            module: ModuleSource::Ptx(ptx),
            kernel,
            config,
            args: if kernel == "iota" {
                &too_few
            } else {
                &too_many
            },
            input: &[],
            output_offset,
            output_size: 4,
        };
        let (here, there) = (local.submit(&call), remote.submit(&call));
        println!("{what}: here {here:?}, on the node {there:?}");
        check(here.is_err() && words(&here) == words(&there), || {
            format!("{what}: here {here:?}, on the node {there:?}")
        })?;
    }
    // The fault, the broken body and the output past the region went as GPU_SUBMITs, the rest
    // as session ops.
    let submits = node.node().control().metrics().gpu_submit_total - submits_before;
    check(submits == 3, || format!("{submits} GPU_SUBMITs"))?;
    drop(local);
    drop(remote);
    node.wait_for_baseline(WAIT)?;
    tasklet_tests::assert_baseline(&host);
    Ok(())
}

/// A remote session blocked in SYNC on a kernel that spins ends at the run's end, as a local
/// one does: `deadline-exceeded` naming the wall-time limit, within 0.5 s of it, well before the
/// node's kernel deadline (2 s) would have ended the wait; the connection is closed, and the
/// node frees the lease (once its own wait on the kernel is over).
pub fn a_remote_wait_ends_at_the_runs_wall_time() -> TestResult {
    let node = TestNode::start();
    let mut gpu = RemoteGpu::new(node.client("dev"));
    let lease = gpu.lease_acquire(LEASE)?;
    let session = gpu.session_open(lease)?;
    let module = gpu.module_load(session, FAULTS_PTX)?;
    let flag = gpu.mem_alloc(session, 4)?;
    let limit = Duration::from_millis(800);
    let started = Instant::now();
    gpu.run_ends_at(started + limit);
    launch_spin_forever(&mut gpu, session, module, flag)?;
    let result = gpu.sync(session);
    let took = started.elapsed();
    println!("a remote sync with {limit:?} of wall time left ended after {took:?}: {result:?}");
    match &result {
        Err(GpuError::DeadlineExceeded(message)) => {
            check(message.contains("wall-time"), || message.clone())?
        }
        other => return Err(format!("expected deadline-exceeded, got {other:?}").into()),
    }
    check(
        took >= limit && took < limit + Duration::from_millis(500),
        || format!("ended after {took:?}"),
    )?;
    // Later calls fail the same way, at once.
    let again = Instant::now();
    check(
        matches!(gpu.sync(session), Err(GpuError::DeadlineExceeded(_)))
            && again.elapsed() < Duration::from_millis(100),
        || "a later call did not fail at once".into(),
    )?;
    drop(gpu);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// The same through a tasklet: probe's `spin-then sync` run here, its GPU on a node whose kernel
/// deadline (4 s) is far past the tasklet's wall time (1 s): the run ends at its wall-time
/// limit, within 0.5 s of it, as a local run does.
pub fn a_tasklet_with_a_remote_gpu_ends_at_its_wall_time() -> TestResult {
    let mut policy = policy();
    policy.workers.kernel_deadline = Duration::from_secs(4);
    let node = TestNode::with(Setup {
        policy,
        ..Setup::default()
    });
    let local = local_host();
    let wall = Duration::from_secs(1);
    let mut manifest = Manifest::load(&tasklet("testing/probe")).expect("manifest");
    manifest.limits.wall_time = wall;
    let probe = local.load(manifest.clone()).expect("the probe loads");
    let gpu = RemoteGpu::for_manifest(node.client("dev"), &manifest).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let result = local.runner().run(&probe, b"spin-then sync", Box::new(gpu));
    let took = started.elapsed();
    println!("a tasklet with a {wall:?} wall time, blocked in a remote sync, ended after {took:?}");
    match result {
        Err(RunError::WallTime(limit)) => check(limit == wall, || format!("{limit:?}"))?,
        other => return Err(format!("expected the wall-time limit, got {other:?}").into()),
    }
    check(
        took >= wall && took < wall + Duration::from_millis(500),
        || format!("ended after {took:?}"),
    )?;
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A client that leaves while the node waits in SYNC on a kernel that spins frees its lease
/// within a second, not at the kernel's deadline (6 s here): the node gives the lease's worker
/// up as soon as the connection is gone.
pub fn a_client_that_leaves_mid_sync_frees_its_lease_at_once() -> TestResult {
    let mut policy = policy();
    policy.workers.kernel_deadline = Duration::from_secs(6);
    let node = TestNode::with(Setup {
        policy,
        ..Setup::default()
    });
    let mut gpu = RemoteGpu::new(node.client("dev"));
    let lease = gpu.lease_acquire(LEASE)?;
    let session = gpu.session_open(lease)?;
    let module = gpu.module_load(session, FAULTS_PTX)?;
    let flag = gpu.mem_alloc(session, 4)?;
    let launched = Instant::now();
    // The client waits 300 ms, then gives up and closes its connection; the node is in SYNC.
    gpu.run_ends_at(launched + Duration::from_millis(300));
    launch_spin_forever(&mut gpu, session, module, flag)?;
    let result = gpu.sync(session);
    check(matches!(result, Err(GpuError::DeadlineExceeded(_))), || {
        format!("expected the client's wait to end at its run's end, got {result:?}")
    })?;
    drop(gpu);
    let left = Instant::now();
    let waited = node.wait_for_baseline(Duration::from_secs(1))?;
    println!(
        "the client left {:?} after its launch; the node was back at baseline {waited:?} later (kernel deadline 6 s)",
        left - launched
    );
    Ok(())
}

/// Launches `spin_forever` (a kernel that runs until its deadline) on one warp, `flag` its
/// argument.
pub fn launch_spin_forever(
    gpu: &mut RemoteGpu,
    session: SessionId,
    module: ModuleId,
    flag: BufferId,
) -> Result<(), GpuError> {
    gpu.launch(
        session,
        module,
        "spin_forever",
        &LaunchConfig {
            grid: [1, 1, 1],
            block: [32, 1, 1],
            shared_mem_bytes: 0,
        },
        &[KernelArg::Buffer {
            buffer: flag,
            offset: 0,
        }],
    )
}

fn connect_options(addr: &str, certs: &std::path::Path) -> ConnectOptions {
    let mut options = ConnectOptions::new(addr.to_owned(), certs, tenant("dev"));
    options.idle_timeout = Duration::from_secs(3);
    options.connect_timeout = Duration::from_secs(5);
    options
}

/// A node in a process of its own (killed with SIGKILL below), beside a node in this one, on
/// the same certificates. A tasklet's one-shots (RemoteGpu with the second node as its
/// fallback) go on through the kill with no failure, on the second node; a session open on the
/// killed node fails `disconnected` and does not move; the library's `submit_anywhere` skips a
/// node that is gone.
pub fn a_lost_one_shot_moves_to_the_next_node_and_a_session_does_not() -> TestResult {
    let spare = TestNode::start();
    let certs = spare.certs_path().to_owned();
    let (mut child, addr) = helper(&["serve-node", certs.to_str().unwrap()])?;
    let result = (|| -> TestResult {
        let manifest = Manifest::load(&tasklet("testing/probe")).expect("manifest");
        let first =
            NodeClient::connect_with(&connect_options(&addr, &certs)).map_err(|e| e.to_string())?;
        let fallback = NodeList::new([connect_options(&spare.addr_text(), &certs)]);
        let mut gpu = RemoteGpu::for_manifest(first, &manifest)
            .map_err(|e| e.to_string())?
            .with_fallback(Box::new(fallback));
        let mut session_gpu = RemoteGpu::new(
            NodeClient::connect_with(&connect_options(&addr, &certs)).map_err(|e| e.to_string())?,
        )
        .with_fallback(Box::new(NodeList::new([connect_options(
            &spare.addr_text(),
            &certs,
        )])));
        let lease = session_gpu.lease_acquire(LEASE)?;
        let session = session_gpu.session_open(lease)?;

        let n: u32 = 256;
        let region = [
            SubmitArg::Region { offset: 0 },
            SubmitArg::Value(KernelArg::U32(n)),
        ];
        let call = Submit {
            lease: LEASE,
            module: ModuleSource::Ptx(IOTA_PTX),
            kernel: "iota",
            config: LaunchConfig {
                grid: [n.div_ceil(64), 1, 1],
                block: [64, 1, 1],
                shared_mem_bytes: 0,
            },
            args: &region,
            input: &[],
            output_offset: 0,
            output_size: 4 * u64::from(n),
        };
        let expected: Vec<u8> = (1..=n).flat_map(|v| v.to_le_bytes()).collect();
        let spare_before = spare.node().control().metrics().gpu_submit_total;
        let started = Instant::now();
        let mut killed_at = None;
        let mut runs = 0u32;
        // One-shots, one after another, the node killed after the 20th; on until 20 more have
        // run on the spare (bounded in count and time).
        while runs < 2000 && started.elapsed() < Duration::from_secs(30) {
            if runs == 20 {
                kill(&mut child);
                killed_at = Some(Instant::now());
            }
            let out = gpu.submit(&call)?;
            check(out == expected, || {
                format!("one-shot {runs} returned wrong bytes")
            })?;
            runs += 1;
            let on_spare = spare.node().control().metrics().gpu_submit_total - spare_before;
            if on_spare >= 20 {
                break;
            }
        }
        let on_spare = spare.node().control().metrics().gpu_submit_total - spare_before;
        let killed_at = killed_at.ok_or("the node was never killed")?;
        println!(
            "{runs} one-shots, none failed; {on_spare} on the spare, the first of them {:?} after the kill",
            killed_at.elapsed()
        );
        check(on_spare >= 20, || {
            format!("{on_spare} one-shots on the spare")
        })?;

        // The session stays with its node: disconnected, at once now that it is known lost.
        match session_gpu.sync(session) {
            Err(GpuError::DeviceLost(message)) => {
                check(message.starts_with("disconnected: "), || message.clone())?
            }
            other => {
                return Err(format!("the session: expected disconnected, got {other:?}").into())
            }
        }
        // Nothing of it moved to the spare.
        check(spare.accounting().leases == 0, || {
            format!("{:?}", spare.accounting())
        })?;

        // The library's entry: the dead node first in the list, the spare answers.
        let submit = GpuSubmit {
            lease: LeaseId(0),
            ptx: IOTA_PTX.as_bytes().to_vec(),
            kernel: "iota".into(),
            grid: [n.div_ceil(64), 1, 1],
            block: [64, 1, 1],
            args: n.to_le_bytes().to_vec(),
            output_size: 4 * u64::from(n),
            output_offset: 0,
            input: Vec::new(),
        };
        let mut nodes = NodeList::new([
            connect_options(&addr, &certs),
            connect_options(&spare.addr_text(), &certs),
        ]);
        let done = submit_anywhere(&mut nodes, 1 << 20, 30, &submit).map_err(|e| e.to_string())?;
        check(done.output == expected, || {
            "submit_anywhere: wrong bytes".into()
        })?;
        // A failure that is the node's answer does not move.
        let mut bad = submit.clone();
        bad.kernel = "nope".into();
        let mut nodes = NodeList::new([
            connect_options(&spare.addr_text(), &certs),
            connect_options(&spare.addr_text(), &certs),
        ]);
        let before = spare.node().control().metrics().gpu_submit_total;
        match submit_anywhere(&mut nodes, 1 << 20, 30, &bad) {
            Err(err @ ClientError::Failed { .. }) => {
                check(err.code() == Some(ErrorCode::LaunchFailed), || {
                    err.to_string()
                })?
            }
            other => return Err(format!("a missing kernel: {other:?}").into()),
        }
        let tried = spare.node().control().metrics().gpu_submit_total - before;
        check(tried == 1, || {
            format!("a refused submission was sent {tried} times")
        })?;
        drop(gpu);
        drop(session_gpu);
        spare.wait_for_baseline(WAIT)?;
        Ok(())
    })();
    kill(&mut child);
    result
}
