//! Multi-device leases: `lease.acquire-group` grants `count` leases on `count` distinct devices
//! of the node, all or none, in the placement rule's order (most memory free, then fewest
//! leases, then lowest index), each counted against the grant; a tasklet opens a session on
//! each and copies between them (`session.mem-copy-from`).
//!
//! On the emulator the policy lists three emulated devices of different sizes (64, 32 and
//! 16 MiB). With `TASKLET_TEST_BACKEND=cuda` it lends the GPUs `TASKLET_TEST_CUDA_DEVICES`
//! names (`0,1,2`: one device each), or GPU 0 as two slots; a group larger than the devices
//! lent is refused, which is what a test that needs more checks there.

use std::sync::Arc;

use tasklet_runtime::config::{DeviceSelector, Grant};
use tasklet_runtime::gpu::{GpuService, LeaseId, LeaseRequest, LocalGpu};
use tasklet_runtime::lease::{EndReason, GpuAccount};
use tasklet_runtime::{BackendKind, DeviceRequirement, GpuError, Host, Policy};
use tasklet_tests::{
    assert_baseline, assert_gpu_error, backend, load, manifest, probe_lines, run_ok, test_host,
    test_policy,
};

const MIB: u64 = 1 << 20;

/// Three emulated devices of 64, 32 and 16 MiB, or the GPUs the cuda pass names.
fn group_policy() -> Policy {
    let mut p = test_policy();
    match backend() {
        BackendKind::Emu => p.devices.emu = Some(vec![64 * MIB, 32 * MIB, 16 * MIB]),
        BackendKind::Cuda => {
            p.devices.cuda = Some(
                cuda_indices()
                    .into_iter()
                    .map(DeviceSelector::Index)
                    .collect(),
            )
        }
    }
    p
}

/// The GPU indices the cuda pass lends: `TASKLET_TEST_CUDA_DEVICES=A,B,…`, or GPU 0 twice.
fn cuda_indices() -> Vec<u32> {
    let Ok(named) = std::env::var("TASKLET_TEST_CUDA_DEVICES") else {
        return vec![0, 0];
    };
    named
        .split(',')
        .map(|i| {
            i.trim().parse().unwrap_or_else(|_| {
                panic!("TASKLET_TEST_CUDA_DEVICES={named:?}: want GPU indices, A,B,…")
            })
        })
        .collect()
}

/// The device indices in the order a group takes them on an idle host: the most memory free
/// (all of it, nothing leased), then the lowest index.
fn placement_order(host: &Host) -> Vec<u32> {
    let mut d: Vec<(u64, u32)> = host
        .devices()
        .iter()
        .map(|d| (d.total_memory, d.index))
        .collect();
    d.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    d.into_iter().map(|(_, i)| i).collect()
}

/// The probe's grant with room for `max_leases` leases of the group tests' size.
fn grant(host: &Host, max_leases: u32) -> Grant {
    let mut grant = host.policy().grant(&manifest("testing/probe"));
    grant.gpu.max_leases = max_leases;
    grant.gpu.max_vram = 64 * MIB;
    grant
}

fn request(min_vram: u64) -> LeaseRequest {
    LeaseRequest {
        min_vram,
        secs: 60,
        device: None,
    }
}

/// The error of a group that must be refused.
#[track_caller]
fn refused(r: Result<Vec<LeaseId>, GpuError>) -> GpuError {
    match r {
        Ok(leases) => panic!("a group of {} leases was granted", leases.len()),
        Err(e) => e,
    }
}

#[test]
fn a_group_lands_on_distinct_devices_in_placement_order() {
    let host = test_host!(group_policy());
    let lent = host.devices().len();
    let order = placement_order(&host);
    let mut gpu = LocalGpu::new(grant(&host, 4), Arc::clone(host.leases()));
    let any = DeviceRequirement::default();
    if lent < 2 {
        let e = refused(gpu.lease_acquire_group(request(MIB), &any, 2));
        assert_eq!(e.name(), "capacity-exceeded", "{e}");
        assert!(e.message().contains("this node lends 1,"), "{e}");
        drop(gpu);
        assert_baseline(&host);
        return;
    }
    if backend() == BackendKind::Emu {
        assert_eq!(order, [0, 1, 2], "64, 32 and 16 MiB free");
    }
    let group = gpu
        .lease_acquire_group(request(4 * MIB), &any, 2)
        .expect("a group of 2");
    let on: Vec<u32> = group
        .iter()
        .map(|&l| gpu.lease_info(l).expect("info").device)
        .collect();
    assert_eq!(on, order[..2], "distinct devices, best first");
    for &l in &group {
        assert_eq!(gpu.lease_info(l).expect("info").granted_bytes, 4 * MIB);
    }
    let usage = host.device_usage();
    for u in &usage {
        let want = usize::from(on.contains(&u.index));
        assert_eq!(u.leases, want, "one lease on each of {on:?}: {usage:?}");
    }
    // Each lease is a lease like any other: a session on each, and dropping one leaves the
    // other serving.
    let s0 = gpu.session_open(group[0]).expect("session on the first");
    let s1 = gpu.session_open(group[1]).expect("session on the second");
    let b1 = gpu.mem_alloc(s1, 4096).expect("alloc on the second");
    gpu.lease_drop(group[0]);
    let e = gpu
        .mem_alloc(s0, 4096)
        .expect_err("the first lease is gone");
    assert_eq!(e.name(), "lease-expired", "{e}");
    gpu.mem_write(s1, b1, 0, &[7; 16])
        .expect("the second still serves");
    assert_eq!(gpu.mem_read(s1, b1, 0, 16).expect("read"), [7; 16]);
    gpu.lease_drop(group[1]);
    assert_baseline(&host);

    // A group of one is a lease placed by the same rule, and may name its device.
    let one = gpu
        .lease_acquire_group(
            LeaseRequest {
                device: Some(1),
                ..request(MIB)
            },
            &any,
            1,
        )
        .expect("a group of 1 on device 1");
    assert_eq!(one.len(), 1);
    assert_eq!(gpu.lease_info(one[0]).expect("info").device, 1);
    drop(gpu);
    assert_baseline(&host);
}

#[test]
fn a_group_that_cannot_be_completed_leaves_nothing_held() {
    let mut policy = group_policy();
    // One worker a device, so that a device whose worker is leased has none for the group.
    policy.workers.max = 1;
    let host = test_host!(policy);
    let lent = host.devices().len();
    let mut gpu = LocalGpu::new(grant(&host, 8), Arc::clone(host.leases()));
    let any = DeviceRequirement::default();

    // More leases than devices: how many there are, and how many would do.
    let e = refused(gpu.lease_acquire_group(request(MIB), &any, lent as u32 + 1));
    assert_eq!(e.name(), "capacity-exceeded", "{e}");
    assert!(
        e.message().contains(&format!(
            "this node lends {lent}, of which {lent} meet the requirements"
        )),
        "{e}"
    );
    assert_baseline(&host);

    if backend() == BackendKind::Emu {
        // At least 32 MiB in all: devices 0 and 1 meet it, device 2 (16 MiB) does not.
        let big = DeviceRequirement {
            min_total_memory: Some(32 * MIB),
            ..DeviceRequirement::default()
        };
        let e = refused(gpu.lease_acquire_group(request(MIB), &big, 3));
        assert_eq!(e.name(), "capacity-exceeded", "{e}");
        assert!(
            e.message().contains(
                "this node lends 3, of which 2 meet the requirements (at least 32MiB in all)"
            ),
            "{e}"
        );
        assert!(e.message().contains("device 2 ("), "{e}");
        assert_baseline(&host);
        let two = gpu
            .lease_acquire_group(request(MIB), &big, 2)
            .expect("the two that meet it");
        let on: Vec<u32> = two
            .iter()
            .map(|&l| gpu.lease_info(l).expect("info").device)
            .collect();
        assert_eq!(on, [0, 1]);
        for l in two {
            gpu.lease_drop(l);
        }
        assert_baseline(&host);
    }

    // Every device placement would take, but the last one's only worker is leased: the group
    // takes the others first (they rank ahead of it), then gives them back.
    let last = lent as u32 - 1;
    let busy = host
        .leases()
        .acquire_placed(
            MIB,
            std::time::Duration::from_secs(60),
            None,
            &GpuAccount::new("multi-devices-test"),
            &DeviceRequirement {
                index: Some(last),
                ..DeviceRequirement::default()
            },
        )
        .expect("the last device's worker");
    let e = refused(gpu.lease_acquire_group(request(MIB), &any, lent as u32));
    assert_eq!(e.name(), "capacity-exceeded", "{e}");
    assert!(
        e.message()
            .contains(&format!("device {last} has no free GPU worker")),
        "{e}"
    );
    let usage = host.device_usage();
    for u in &usage {
        let want = usize::from(u.index == last);
        assert_eq!(u.leases, want, "only the busy lease is held: {usage:?}");
    }
    assert_eq!(host.accounting().leases, 1);
    host.leases().end(&busy, EndReason::Dropped);
    assert_baseline(&host);

    // With the worker back, the same group is granted.
    let all = gpu
        .lease_acquire_group(request(MIB), &any, lent as u32)
        .expect("every device");
    assert_eq!(all.len(), lent);
    drop(gpu);
    assert_baseline(&host);
}

#[test]
fn a_group_counts_against_the_grant_and_is_checked() {
    let host = test_host!(group_policy());
    let lent = host.devices().len() as u32;
    let mut gpu = LocalGpu::new(grant(&host, 2), Arc::clone(host.leases()));
    let any = DeviceRequirement::default();

    // max-leases: a group larger than the grant, or than what is left of it.
    let e = refused(gpu.lease_acquire_group(request(MIB), &any, 3));
    assert_eq!(e.name(), "quota-exceeded", "{e}");
    assert!(e.message().contains("max-leases"), "{e}");
    assert!(e.message().contains("so 2 more"), "{e}");
    let held = gpu.lease_acquire(request(MIB)).expect("one lease");
    let e = refused(gpu.lease_acquire_group(request(MIB), &any, 2));
    assert_eq!(e.name(), "quota-exceeded", "{e}");
    assert!(e.message().contains("holds 1 of the 2"), "{e}");
    assert!(e.message().contains("so 1 more"), "{e}");
    assert_eq!(host.accounting().leases, 1, "the refusals took nothing");
    gpu.lease_drop(held);

    // max-vram: the group's bytes together (64 MiB granted).
    if lent >= 2 {
        let e = refused(gpu.lease_acquire_group(request(33 * MIB), &any, 2));
        assert_eq!(e.name(), "quota-exceeded", "{e}");
        assert!(e.message().contains("max-vram"), "{e}");
    }

    // Malformed: count 0, a device named for more than one lease, no bytes.
    let e = refused(gpu.lease_acquire_group(request(MIB), &any, 0));
    assert_eq!(e.name(), "invalid-argument", "{e}");
    assert!(e.message().contains("count > 0"), "{e}");
    let on_0 = LeaseRequest {
        device: Some(0),
        ..request(MIB)
    };
    let e = refused(gpu.lease_acquire_group(on_0, &any, 2));
    assert_eq!(e.name(), "invalid-argument", "{e}");
    assert!(e.message().contains("lease-request.device"), "{e}");
    let e = refused(gpu.lease_acquire_group(request(0), &any, 2));
    assert_eq!(e.name(), "invalid-argument", "{e}");
    // A tasklet that may lease nothing may lease no group.
    let mut none = LocalGpu::new(grant(&host, 0), Arc::clone(host.leases()));
    let e = refused(none.lease_acquire_group(request(MIB), &any, 2));
    assert_eq!(e.name(), "unauthorized", "{e}");
    drop((gpu, none));
    assert_baseline(&host);
}

/// A tasklet acquires a group through the SDK (`LeaseBuilder::acquire_group`), opens a session
/// on each lease, writes on one and copies to the other (`Session::copy_from`); another group
/// past its `max-leases` (2), a group of 0 and a group naming a device are refused.
#[test]
fn a_tasklet_acquires_a_group_and_copies_between_its_devices() {
    let host = test_host!(group_policy());
    let tasklet = load(&host, manifest("testing/sdk-check"));
    let lines = probe_lines(&run_ok(&host, &tasklet, "group"));
    if host.devices().len() < 2 {
        assert_gpu_error(&lines, 0, "capacity-exceeded", "this node lends 1,");
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_baseline(&host);
        return;
    }
    let order = placement_order(&host);
    assert_eq!(
        lines[0],
        (
            "ok".into(),
            "group".into(),
            format!("{} {}", order[0], order[1])
        ),
        "{lines:?}"
    );
    assert_eq!(
        lines[1],
        ("ok".into(), "group-copy".into(), "5 6 7 8".into()),
        "{lines:?}"
    );
    assert_gpu_error(&lines, 2, "quota-exceeded", "max-leases");
    assert_gpu_error(&lines, 3, "invalid-argument", "count > 0");
    assert_gpu_error(&lines, 4, "invalid-argument", "lease-request.device");
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert_baseline(&host);
}

/// A copy between the two leases of a group (`mem-copy-from` across sessions) lands whole, at
/// offsets, either way, in order after the source's earlier work. Where the workers can, it goes
/// GPU to GPU — on cuda the source's worker exports its buffer and the destination's maps it for
/// the copy (two GPUs: a peer copy; one GPU as two slots: a copy between two processes' memory
/// on that GPU) — and the host counts the bytes; on the emulator it is staged through memory
/// both workers map, and nothing is counted.
#[test]
fn a_copy_between_a_groups_devices_goes_gpu_to_gpu_where_it_can() {
    let host = test_host!(group_policy());
    let mut gpu = LocalGpu::new(grant(&host, 2), Arc::clone(host.leases()));
    let group = gpu
        .lease_acquire_group(request(8 * MIB), &DeviceRequirement::default(), 2)
        .expect("a group of 2");
    let a = gpu.session_open(group[0]).expect("session on the first");
    let b = gpu.session_open(group[1]).expect("session on the second");
    let size = 4 * MIB;
    let ba = gpu.mem_alloc(a, size).expect("alloc on the first");
    let bb = gpu.mem_alloc(b, size).expect("alloc on the second");
    let data: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
    gpu.mem_write(a, ba, 0, &data).expect("write");
    let before = host.leases().peer_copy_bytes();

    let there = 3 * MIB;
    gpu.mem_copy_between((b, bb, 4096), (a, ba, 64), there)
        .expect("copy to the second");
    let back = gpu.mem_read(b, bb, 0, size).expect("read the second");
    let (lo, hi) = (4096usize, 4096 + there as usize);
    assert!(
        back[..lo].iter().all(|&x| x == 0),
        "before the copy: untouched"
    );
    assert!(
        back[lo..hi] == data[64..64 + there as usize],
        "the copied bytes"
    );
    assert!(
        back[hi..].iter().all(|&x| x == 0),
        "after the copy: untouched"
    );

    // Back the other way, over what the first holds.
    gpu.mem_copy_between((a, ba, 0), (b, bb, 4096), MIB)
        .expect("copy to the first");
    let first = gpu.mem_read(a, ba, 0, 2 * MIB).expect("read the first");
    assert!(first[..MIB as usize] == data[64..64 + MIB as usize]);
    assert!(first[MIB as usize..] == data[MIB as usize..2 * MIB as usize]);

    let peer = host.leases().peer_copy_bytes() - before;
    match backend() {
        BackendKind::Emu => assert_eq!(peer, 0, "the emulator stages copies between devices"),
        BackendKind::Cuda => assert_eq!(
            peer,
            there + MIB,
            "copies between the group's GPUs were staged: {:?}",
            host.leases().peer_copy_refusal()
        ),
    }

    // Past the end of either buffer: refused before any worker is asked, nothing copied.
    for (dst, src) in [
        ((b, bb, size - 8), (a, ba, 0)),
        ((b, bb, 0), (a, ba, size - 8)),
    ] {
        let e = gpu
            .mem_copy_between(dst, src, 16)
            .expect_err("a range past a buffer's end");
        assert_eq!(e.name(), "out-of-bounds", "{e}");
    }
    assert_eq!(host.leases().peer_copy_bytes() - before, peer);
    drop(gpu);
    assert_baseline(&host);
}
