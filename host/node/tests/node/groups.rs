//! Groups of leases and copies between sessions through the node (LEASE_ALLOC_GROUP,
//! MEM_COPY_BETWEEN): a node of several emulated devices places a group as a local host does,
//! all or none, copies between the group's sessions, refuses a session it did not hand the
//! connection, and closes a connection that sends either op malformed.

use crate::support::*;
use tasklet_remote::RemoteGpu;
use tasklet_runtime::gpu::{GpuService, LeaseId, LeaseRequest};
use tasklet_runtime::{
    BackendKind, DeviceRequirement, GpuError, Host, HostConfig, Manifest, Policy,
};
use tasklet_wire::{encode_request, LeaseGroup, LeaseRequirements, Opcode, Request};

const MIB: u64 = 1 << 20;

/// The suite's policy with three emulated devices of 64, 32 and 16 MiB: placement takes them in
/// that order (the most memory free first).
fn three_devices() -> Policy {
    let mut p = policy();
    p.devices.emu = Some(vec![64 * MIB, 32 * MIB, 16 * MIB]);
    p
}

fn group_node(policy: Policy) -> TestNode {
    TestNode::with(Setup {
        policy,
        ..Setup::default()
    })
}

fn request(min_vram: u64) -> LeaseRequest {
    LeaseRequest {
        min_vram,
        secs: 60,
        device: None,
    }
}

/// The devices the leases are on, as the node says.
fn devices_of(gpu: &mut RemoteGpu, leases: &[LeaseId]) -> Result<Vec<u32>, GpuError> {
    leases
        .iter()
        .map(|&l| gpu.lease_info(l).map(|i| i.device))
        .collect()
}

/// Leases running on each device, by index, as the node's inventory says.
fn leases_per_device(node: &TestNode) -> Result<Vec<u32>, String> {
    let devices = node.client("team").inventory().map_err(|e| e.to_string())?;
    Ok(devices.iter().map(|d| d.leases).collect())
}

pub fn a_group_lands_on_distinct_devices_in_placement_order() -> TestResult {
    let node = group_node(three_devices());
    let mut gpu = RemoteGpu::new(node.client("dev"));
    let any = DeviceRequirement::default();

    let two = gpu.lease_acquire_group(request(4 * MIB), &any, 2)?;
    let on = devices_of(&mut gpu, &two)?;
    check(on == [0, 1], || format!("a group of 2 on {on:?}"))?;
    for &l in &two {
        let granted = gpu.lease_info(l)?.granted_bytes;
        check(granted == 4 * MIB, || {
            format!("lease {l} granted {granted}")
        })?;
    }
    let per_device = leases_per_device(&node)?;
    check(per_device == [1, 1, 0], || format!("{per_device:?}"))?;
    for l in two {
        gpu.lease_drop(l);
    }

    let three = gpu.lease_acquire_group(request(MIB), &any, 3)?;
    let on = devices_of(&mut gpu, &three)?;
    check(on == [0, 1, 2], || format!("a group of 3 on {on:?}"))?;
    check(leases_per_device(&node)? == [1, 1, 1], || {
        "one lease each".into()
    })?;
    for l in three {
        gpu.lease_drop(l);
    }

    // What the devices must be travels with the group: at least 32 MiB in all leaves device 2
    // out, and the largest free first still holds.
    let big = DeviceRequirement {
        min_total_memory: Some(32 * MIB),
        ..DeviceRequirement::default()
    };
    let two = gpu.lease_acquire_group(request(MIB), &big, 2)?;
    let on = devices_of(&mut gpu, &two)?;
    check(on == [0, 1], || {
        format!("a group of 2 of 32 MiB devices on {on:?}")
    })?;
    for l in two {
        gpu.lease_drop(l);
    }

    // A group of one may name its device; a group of none is refused as a local one is.
    let one = gpu.lease_acquire_group(
        LeaseRequest {
            device: Some(2),
            ..request(MIB)
        },
        &any,
        1,
    )?;
    let on = devices_of(&mut gpu, &one)?;
    check(on == [2], || format!("a group of 1 on device 2: {on:?}"))?;
    gpu.lease_drop(one[0]);
    let none = gpu.lease_acquire_group(request(MIB), &any, 0);
    check(
        none.as_ref()
            .is_err_and(|e| e.name() == "invalid-argument" && e.message().contains("count > 0")),
        || format!("a group of 0: {none:?}"),
    )?;
    drop(gpu);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

pub fn a_group_that_cannot_be_placed_whole_holds_nothing() -> TestResult {
    let node = group_node(three_devices());
    let mut gpu = RemoteGpu::new(node.client("dev"));
    let any = DeviceRequirement::default();

    // More leases than devices: capacity-exceeded, naming how many the node lends.
    let four = gpu.lease_acquire_group(request(MIB), &any, 4);
    check(
        four.as_ref().is_err_and(|e| {
            e.name() == "capacity-exceeded"
                && e.message()
                    .contains("this node lends 3, of which 3 meet the requirements")
        }),
        || format!("a group of 4 on 3 devices: {four:?}"),
    )?;
    check(node.accounting() == Default::default(), || {
        format!("held after a refused group: {:?}", node.accounting())
    })?;
    check(leases_per_device(&node)? == [0, 0, 0], || "no lease".into())?;

    // Room on two devices only (the 16 MiB one cannot grant 20 MiB): refused whole.
    let three = gpu.lease_acquire_group(request(20 * MIB), &any, 3);
    check(
        three
            .as_ref()
            .is_err_and(|e| e.name() == "capacity-exceeded"),
        || format!("a group of 3 of 20 MiB: {three:?}"),
    )?;
    check(node.accounting() == Default::default(), || {
        format!("held after a refused group: {:?}", node.accounting())
    })?;

    // More than a node can lend at all is refused here, before anything is sent.
    let huge = gpu.lease_acquire_group(request(MIB), &any, 257);
    check(
        huge.as_ref()
            .is_err_and(|e| e.name() == "capacity-exceeded" && e.message().contains("at most 256")),
        || format!("a group of 257: {huge:?}"),
    )?;

    // The grant counts every lease of a group: with max-leases 2, a group of 3 is refused.
    let narrow = tasklet_wire::Grant {
        memory: 1 << 30,
        max_vram: 64 * MIB,
        max_leases: 2,
        max_lease_ms: 60_000,
        rights: tasklet_wire::rights::ALL,
    };
    let mut client = node.client("dev");
    let narrow = client.grant(&narrow).map_err(|e| e.to_string())?;
    check(narrow.max_leases == 2, || format!("{narrow:?}"))?;
    let mut limited = RemoteGpu::new(client);
    let over = limited.lease_acquire_group(request(MIB), &any, 3);
    check(
        over.as_ref().is_err_and(|e| e.name() == "quota-exceeded"),
        || format!("a group of 3 under max-leases 2: {over:?}"),
    )?;
    let two = limited.lease_acquire_group(request(MIB), &any, 2)?;
    check(two.len() == 2, || format!("{two:?}"))?;
    drop(limited);
    drop(gpu);
    node.wait_for_baseline(WAIT)?;

    // Every device has room, but the last one's only worker is another connection's: the
    // group takes the devices ranked before it, then gives them back.
    let mut one_worker = three_devices();
    one_worker.workers.max = 1;
    let node = group_node(one_worker);
    let mut other = node.client("team");
    let busy = other
        .lease_alloc(MIB, 60, Some(2))
        .map_err(|e| e.to_string())?;
    let mut gpu = RemoteGpu::new(node.client("dev"));
    let three = gpu.lease_acquire_group(request(MIB), &any, 3);
    check(
        three.as_ref().is_err_and(|e| {
            e.name() == "capacity-exceeded"
                && e.message().contains("device 2 has no free GPU worker")
        }),
        || format!("a group of 3 with device 2's worker busy: {three:?}"),
    )?;
    let per_device = leases_per_device(&node)?;
    check(per_device == [0, 0, 1], || {
        format!("only the other connection's lease is held: {per_device:?}")
    })?;
    other.mem_free(busy.lease).map_err(|e| e.to_string())?;
    let three = gpu.lease_acquire_group(request(MIB), &any, 3)?;
    check(three.len() == 3, || format!("{three:?}"))?;
    drop(gpu);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

pub fn a_copy_between_two_sessions_of_a_group_moves_the_bytes() -> TestResult {
    let node = group_node(three_devices());
    let mut gpu = RemoteGpu::new(node.client("dev"));
    let group = gpu.lease_acquire_group(request(12 * MIB), &DeviceRequirement::default(), 2)?;
    let (s0, s1) = (gpu.session_open(group[0])?, gpu.session_open(group[1])?);
    // More than one 4 MiB piece of the node's staging, at odd offsets.
    let len = 6 * MIB + 13;
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4099) as u8).collect();
    let b0 = gpu.mem_alloc(s0, len + 64)?;
    let b1 = gpu.mem_alloc(s1, len + 64)?;
    // Pipelined: the copy goes after it, and so sees its bytes.
    gpu.mem_write(s0, b0, 7, &data)?;
    gpu.mem_copy_between((s1, b1, 32), (s0, b0, 7), len)?;
    let got = gpu.mem_read(s1, b1, 32, len)?;
    check(got == data, || {
        let at = got.iter().zip(&data).position(|(a, b)| a != b);
        format!("copied {} bytes, first difference at {at:?}", got.len())
    })?;
    let before = gpu.mem_read(s1, b1, 0, 32)?;
    check(before == [0; 32], || {
        format!("bytes before the copy: {before:?}")
    })?;

    // Back the other way, and within one session (MEM_COPY's path).
    gpu.mem_copy_between((s0, b0, 0), (s1, b1, 32), 5)?;
    let head = gpu.mem_read(s0, b0, 0, 5)?;
    check(head == data[..5], || format!("{head:?}"))?;
    gpu.mem_copy_between((s1, b1, 0), (s1, b1, 32), 4)?;
    let head = gpu.mem_read(s1, b1, 0, 4)?;
    check(head == data[..4], || format!("{head:?}"))?;

    // Past either buffer's end: out-of-bounds, as locally.
    let over = gpu.mem_copy_between((s1, b1, 64), (s0, b0, 0), len + 1);
    check(
        over.as_ref().is_err_and(|e| e.name() == "out-of-bounds"),
        || format!("a copy past the end: {over:?}"),
    )?;
    drop(gpu);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

pub fn a_session_of_another_connection_is_refused() -> TestResult {
    let node = group_node(three_devices());
    // The other connection's session, with bytes in it.
    let mut other = RemoteGpu::new(node.client("team"));
    let theirs = other.lease_acquire(request(MIB))?;
    let their_session = other.session_open(theirs)?;
    let their_buffer = other.mem_alloc(their_session, 64)?;
    other.mem_write(their_session, their_buffer, 0, &[9; 64])?;
    other.sync(their_session)?;

    for tenant in ["dev", "team"] {
        let mut gpu = RemoteGpu::new(node.client(tenant));
        let mine = gpu.lease_acquire(request(MIB))?;
        let session = gpu.session_open(mine)?;
        let buffer = gpu.mem_alloc(session, 64)?;
        let from = gpu.mem_copy_between((session, buffer, 0), (their_session, their_buffer, 0), 64);
        check(
            from.as_ref().is_err_and(|e| {
                e.name() == "invalid-argument"
                    && e.message() == format!("no session {their_session} here")
            }),
            || format!("{tenant}: a copy from another connection's session: {from:?}"),
        )?;
        let got = gpu.mem_read(session, buffer, 0, 64)?;
        check(got == [0; 64], || format!("{tenant}: {got:?}"))?;
        let into = gpu.mem_copy_between((their_session, their_buffer, 0), (session, buffer, 0), 64);
        check(
            into.as_ref().is_err_and(|e| e.name() == "invalid-argument"),
            || format!("{tenant}: a copy into another connection's session: {into:?}"),
        )?;
    }
    let theirs_now = other.mem_read(their_session, their_buffer, 0, 64)?;
    check(theirs_now == [9; 64], || format!("{theirs_now:?}"))?;
    drop(other);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A frame of `opcode` with `body`, request id 2, at this version.
fn frame(opcode: Opcode, body: &[u8]) -> Vec<u8> {
    let mut bytes = vec![tasklet_wire::PROTOCOL_VERSION, 0];
    bytes.extend_from_slice(&(opcode as u16).to_be_bytes());
    bytes.extend_from_slice(&2u32.to_be_bytes());
    bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
    bytes.extend_from_slice(body);
    bytes
}

pub fn malformed_groups_and_copies_close_only_their_connection() -> TestResult {
    let node = group_node(three_devices());
    let mut bystander = node.client("dev");
    let lease = bystander
        .lease_alloc(MIB, 60, None)
        .map_err(|e| e.to_string())?;
    let mut group = Vec::new();
    let _ = encode_request(
        2,
        &Request::LeaseAllocGroup(LeaseGroup {
            min_bytes: MIB,
            seconds: 60,
            device: None,
            requires: LeaseRequirements::default(),
            count: 256,
        }),
        &mut group,
    )
    .map_err(|e| e.to_string())?;
    // The count is the body's last 4 bytes.
    let count_at = group.len() - 4;
    let mut too_many = group.clone();
    too_many[count_at..].copy_from_slice(&257u32.to_be_bytes());
    let mut all_bits = group.clone();
    all_bits[count_at..].copy_from_slice(&u32::MAX.to_be_bytes());
    let body_of = |bytes: &[u8]| bytes[12..].to_vec();
    let cases = [
        ("a group of 257", too_many, "count"),
        ("a group of 4294967295", all_bits, "count"),
        (
            "a group cut inside its count",
            frame(
                Opcode::LeaseAllocGroup,
                &body_of(&group)[..body_of(&group).len() - 2],
            ),
            "count",
        ),
        (
            "a copy between sessions cut short",
            frame(Opcode::MemCopyBetween, &[0; 50]),
            "len",
        ),
        (
            "a copy between sessions with a byte too many",
            frame(Opcode::MemCopyBetween, &[0; 57]),
            "after its last field",
        ),
    ];
    for (what, bytes, named) in cases {
        let mut raw = RawClient::connect(&node, "team");
        let mut greeting = Vec::new();
        let _ = encode_request(1, &hello(), &mut greeting).map_err(|e| e.to_string())?;
        raw.send_bytes(&greeting);
        raw.next_reply()
            .map_err(|e| format!("{what}: HELLO: {e}"))?;
        raw.send_bytes(&bytes);
        raw.closed_for_breaking_the_protocol(what, named)?;
        let per_device = leases_per_device(&node)?;
        check(per_device.iter().sum::<u32>() == 1, || {
            format!("after {what}: {per_device:?}")
        })?;
    }
    // The bystander is served throughout, its lease intact.
    let info = bystander
        .request(&Request::LeaseInfo { lease: lease.lease })
        .map_err(|e| e.to_string())?;
    check(
        matches!(info.0, tasklet_wire::Reply::LeaseInfo { .. }),
        || format!("{info:?}"),
    )?;
    bystander.mem_free(lease.lease).map_err(|e| e.to_string())?;
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// sdk-check's `group` (a group of 2, a session on each, a copy between them, and its refusals)
/// run here with the GPU local and with it on a node of the same devices: the same output.
pub fn a_tasklets_group_through_the_node_is_the_local_one() -> TestResult {
    let mut policy = policy();
    policy.devices.emu = Some(vec![64 * MIB, 32 * MIB]);
    let node = group_node(policy.clone());
    let local = Host::new(HostConfig {
        policy,
        worker: worker(),
        backend: BackendKind::Emu,
    })
    .map_err(|e| e.to_string())?;
    let manifest = Manifest::load(&tasklet("testing/sdk-check")).map_err(|e| e.to_string())?;
    let compiled = local.load(manifest.clone()).map_err(|e| e.to_string())?;
    let here = local
        .run(&compiled, b"group")
        .map_err(|e| format!("local: {e}"))?;
    let gpu = RemoteGpu::for_manifest(node.client("dev"), &manifest).map_err(|e| e.to_string())?;
    let there = local
        .runner()
        .run(&compiled, b"group", Box::new(gpu))
        .map_err(|e| format!("remote: {e}"))?;
    let (here, there) = (
        String::from_utf8_lossy(&here).into_owned(),
        String::from_utf8_lossy(&there).into_owned(),
    );
    check(
        here.starts_with("ok group 0 1\nok group-copy 5 6 7 8\n"),
        || format!("local: {here}"),
    )?;
    check(here == there, || {
        format!("local:\n{here}\nremote:\n{there}")
    })?;
    node.wait_for_baseline(WAIT)?;
    tasklet_tests::assert_baseline(&local);
    Ok(())
}

/// A client of version 5, which knows neither op, is refused at HELLO in words naming both
/// versions, and the connection closes: it never gets to send a frame this node cannot read.
pub fn a_client_of_version_5_is_told_at_hello() -> TestResult {
    an_older_client_is_told_at_hello(5, "before groups")
}
