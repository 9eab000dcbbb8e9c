//! Bursts (contract 0.2's `launch-burst`): one kernel launched many times in one call, each
//! launch with its own scalars and buffer offsets, as one unit. Through the probe tasklet (the
//! SDK's `Burst`, and raw calls the host must refuse whole) and through a tasklet's GPU service
//! on this node (`LocalGpu`), on the suite's backend.

use std::sync::Arc;

use tasklet_runtime::gpu::{
    Burst, BurstArg, GpuService, KernelArg, KernelRef, LaunchConfig, LeaseRequest, LocalGpu,
    MAX_BURST_CHANGES, MAX_BURST_LAUNCHES,
};
use tasklet_runtime::GpuError;
use tasklet_tests::{assert_baseline, manifest, probe_session, run_probe, test_host};

const FAULTS_PTX: &str = include_str!("../../../kernels/faults.ptx");
const IOTA_PTX: &str = include_str!("../../../kernels/iota.ptx");

fn line(lines: &[(String, String, String)], i: usize) -> String {
    let (status, kind, rest) = &lines[i];
    format!("{status} {kind} {rest}")
}

#[test]
fn every_launch_of_a_burst_runs_with_its_own_offset_and_scalar() {
    let host = test_host!();
    let lines = run_probe(&host, "burst 100");
    assert_eq!(line(&lines, 0), "ok burst 100 first 1", "{lines:?}");
    assert_eq!(line(&lines, 1), "ok rows 100", "{lines:?}");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_baseline(&host);
}

#[test]
fn a_burst_of_more_than_the_limit_is_refused_and_the_limit_itself_runs() {
    let host = test_host!();
    let past = run_probe(&host, &format!("burst {}", MAX_BURST_LAUNCHES + 1));
    assert_eq!(past.len(), 1, "{past:?}");
    let (status, kind, message) = &past[0];
    assert_eq!(
        (status.as_str(), kind.as_str()),
        ("error", "invalid-argument")
    );
    assert!(
        message.contains(&format!("more than the {MAX_BURST_LAUNCHES}")),
        "names the limit: {message}"
    );
    let at = run_probe(&host, &format!("burst {MAX_BURST_LAUNCHES}"));
    assert_eq!(
        line(&at, 0),
        format!("ok burst {MAX_BURST_LAUNCHES} first 1")
    );
    assert_eq!(line(&at, 1), format!("ok rows {MAX_BURST_LAUNCHES}"));
    assert_baseline(&host);
}

#[test]
fn a_burst_with_one_bad_launch_is_refused_whole_naming_that_launch() {
    let host = test_host!();
    let lines = run_probe(&host, "burst-misuse");
    assert_eq!(lines.len(), 5, "{lines:?}");
    let expect = [
        (
            "invalid-argument",
            "launch 1 of the burst changes argument 3",
        ),
        ("invalid-argument", "launch 2 of the burst: argument 0"),
        (
            "out-of-bounds",
            "launch 1 of the burst: argument 0: offset 1025",
        ),
        ("invalid-argument", "at least one launch"),
    ];
    for (i, (kind, says)) in expect.iter().enumerate() {
        let (status, got_kind, message) = &lines[i];
        assert_eq!(
            (status.as_str(), got_kind.as_str()),
            ("error", *kind),
            "{lines:?}"
        );
        assert!(message.contains(says), "line {i}: {message}");
    }
    assert!(
        lines[1].2.contains("another session"),
        "the foreign buffer is named: {}",
        lines[1].2
    );
    assert_eq!(
        line(&lines, 4),
        "ok untouched ",
        "no launch of a refused burst ran"
    );
    assert_baseline(&host);
}

/// Ordinals run on through a burst, and a fault in its third launch is reported once, at the
/// next wait, naming that launch: exactly on the emulator, which runs each launch before the
/// next; on a GPU, where launches queued together share one completion event, as one of a range
/// of launches of the burst that holds it.
#[test]
fn a_fault_inside_a_burst_names_its_launch_by_ordinal() {
    let host = test_host!();
    let (mut gpu, s) = probe_session(&host);
    let iota = gpu.module_load(s, IOTA_PTX).expect("iota loads");
    let faults = gpu.module_load(s, FAULTS_PTX).expect("faults loads");
    let buf = gpu.mem_alloc(s, 4096).expect("alloc");
    let one = LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
    };
    let at0 = KernelArg::Buffer {
        buffer: buf,
        offset: 0,
    };
    let first = gpu
        .launch_kernel(s, iota, KernelRef::At(0), &one, &[at0, KernelArg::U32(1)])
        .expect("launch");
    assert_eq!(first, 1);
    gpu.sync(s).expect("the first launch runs");
    // write_out_of_bounds(buf, offset): launches 0, 1 and 3 write in bounds; launch 2, 4 TiB past.
    let far = [BurstArg {
        index: 1,
        arg: KernelArg::U64(1 << 40),
    }];
    let args = [at0, KernelArg::U64(8)];
    let burst = Burst {
        config: one,
        args: &args,
        changes: &far,
        counts: &[0, 0, 1, 0],
    };
    let kernel = KernelRef::Named("write_out_of_bounds");
    assert_eq!(gpu.launch_burst(s, faults, kernel, &burst), Ok(2));
    // The holder's figures (`run --stats`) count each launch of the burst.
    assert_eq!(gpu.usage().stats().launches, 1 + 4);
    let message = match gpu.sync(s) {
        Err(GpuError::KernelFault(m)) => m,
        other => panic!("the fault surfaces at sync: {other:?}"),
    };
    assert!(
        names_launch(&message, 4, 2..=5),
        "the burst's third launch (ordinal 4) is named, or a range of the burst's launches that holds it: {message}"
    );
    drop(gpu);
    assert_baseline(&host);
}

/// Whether `message` names launch `ordinal` ("launch #4 of kernel …"), or a range of launches
/// within `burst` that holds it ("one of launches #2 to #5 …").
fn names_launch(message: &str, ordinal: u64, burst: std::ops::RangeInclusive<u64>) -> bool {
    if message.starts_with(&format!(
        "launch #{ordinal} of kernel `write_out_of_bounds`"
    )) {
        return true;
    }
    let Some(rest) = message.strip_prefix("one of launches #") else {
        return false;
    };
    let mut numbers = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse::<u64>().unwrap_or(0));
    match (numbers.next(), numbers.next()) {
        (Some(a), Some(b)) => {
            (a..=b).contains(&ordinal) && burst.contains(&a) && burst.contains(&b)
        }
        _ => false,
    }
}

/// A service's checks hold for every launch: a burst that changes an argument to another
/// session's buffer, or counts more changes than it gives, is refused, and nothing of it runs.
#[test]
fn a_burst_holds_only_the_sessions_own_buffers() {
    let host = test_host!();
    let grant = host.policy().grant(&manifest("testing/probe"));
    let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
    let request = LeaseRequest {
        min_vram: 1 << 20,
        secs: 60,
        device: None,
    };
    let lease = gpu.lease_acquire(request).expect("lease");
    let other_lease = gpu.lease_acquire(request).expect("second lease");
    let s = gpu.session_open(lease).expect("session");
    let other = gpu.session_open(other_lease).expect("other session");
    let iota = gpu.module_load(s, IOTA_PTX).expect("iota loads");
    let mine = gpu.mem_alloc(s, 1024).expect("alloc");
    let theirs = gpu.mem_alloc(other, 1024).expect("alloc");
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
    };
    let args = [
        KernelArg::Buffer {
            buffer: mine,
            offset: 0,
        },
        KernelArg::U32(256),
    ];
    let foreign = [BurstArg {
        index: 0,
        arg: KernelArg::Buffer {
            buffer: theirs,
            offset: 0,
        },
    }];
    let burst = Burst {
        config,
        args: &args,
        changes: &foreign,
        counts: &[0, 1],
    };
    let r = gpu.launch_burst(s, iota, KernelRef::At(0), &burst);
    assert!(
        matches!(&r, Err(GpuError::InvalidArgument(m)) if m.starts_with("launch 1 of the burst")),
        "{r:?}"
    );
    let miscounted = Burst {
        counts: &[0, 2],
        ..burst
    };
    let r = gpu.launch_burst(s, iota, KernelRef::At(0), &miscounted);
    assert!(matches!(r, Err(GpuError::InvalidArgument(_))), "{r:?}");
    gpu.sync(s).expect("nothing ran to fail");
    let got = gpu.mem_read(s, mine, 0, 1024).expect("read");
    assert!(
        got.iter().all(|&b| b == 0),
        "no launch of a refused burst ran"
    );
    // The next launch is numbered 1: refused bursts took no ordinals.
    let ok = Burst {
        changes: &[],
        counts: &[0],
        ..burst
    };
    assert_eq!(gpu.launch_burst(s, iota, KernelRef::At(0), &ok), Ok(1));
    gpu.sync(s).expect("sync");
    drop(gpu);
    assert_baseline(&host);
}

/// A burst changing more than `MAX_BURST_CHANGES` arguments over its launches is refused before
/// any launch runs, naming the limit; one of exactly that many runs.
#[test]
fn a_burst_of_more_changes_than_the_limit_is_refused_and_the_limit_itself_runs() {
    let host = test_host!();
    let (mut gpu, s) = probe_session(&host);
    let iota = gpu.module_load(s, IOTA_PTX).expect("iota loads");
    let out = gpu.mem_alloc(s, 1024).expect("alloc");
    let args = [
        KernelArg::Buffer {
            buffer: out,
            offset: 0,
        },
        KernelArg::U32(256),
    ];
    // Every change sets the count again, to the same value: valid, and many of them.
    let changes = vec![
        BurstArg {
            index: 1,
            arg: KernelArg::U32(256),
        };
        MAX_BURST_CHANGES + 1
    ];
    let each = (MAX_BURST_CHANGES / 4) as u32;
    let counts = [each, each, each, each + 1];
    let burst = Burst {
        config: LaunchConfig {
            grid: [1, 1, 1],
            block: [256, 1, 1],
            shared_mem_bytes: 0,
        },
        args: &args,
        changes: &changes,
        counts: &counts,
    };
    let r = gpu.launch_burst(s, iota, KernelRef::At(0), &burst);
    assert!(
        matches!(&r, Err(GpuError::InvalidArgument(m))
            if m.contains(&format!("more than the {MAX_BURST_CHANGES} (MAX_BURST_CHANGES)"))),
        "{r:?}"
    );
    gpu.sync(s).expect("nothing ran to fail");
    assert!(
        gpu.mem_read(s, out, 0, 1024)
            .expect("read")
            .iter()
            .all(|&b| b == 0),
        "no launch of the refused burst ran"
    );
    let at = Burst {
        changes: &changes[..MAX_BURST_CHANGES],
        counts: &[each; 4],
        ..burst
    };
    // The refused burst took no ordinals.
    assert_eq!(gpu.launch_burst(s, iota, KernelRef::At(0), &at), Ok(1));
    gpu.sync(s).expect("sync");
    drop(gpu);
    assert_baseline(&host);
}
