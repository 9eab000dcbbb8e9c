//! Streams and events through the node (QUEUE_OP): the probe's stream pipeline gives the lines
//! it gives locally, a stream or event is usable only in the session (and so the connection)
//! that made it, the session's limits hold over the wire, a stream's sync reports a failed
//! pipelined op before it, and a malformed QUEUE_OP closes only its connection.

use crate::support::*;
use tasklet_remote::RemoteGpu;
use tasklet_runtime::gpu::{
    EventId, GpuService, KernelRef, LaunchConfig, LeaseRequest, ModuleId, QueueOp, QueueReply,
    SessionId, StreamId, MAX_SESSION_EVENTS, MAX_SESSION_STREAMS,
};
use tasklet_runtime::{GpuError, Manifest};
use tasklet_tests::guest_build::{self, Tool};
use tasklet_wire::{encode_request, Opcode};

const MIB: u64 = 1 << 20;

fn request() -> LeaseRequest {
    LeaseRequest {
        min_vram: MIB,
        secs: 60,
        device: None,
    }
}

fn new_stream(gpu: &mut RemoteGpu, session: SessionId) -> Result<StreamId, String> {
    match gpu.queue_op(session, QueueOp::NewStream) {
        Ok(QueueReply::Stream(id)) => Ok(id),
        other => Err(format!("a new stream: {other:?}")),
    }
}

fn new_event(gpu: &mut RemoteGpu, session: SessionId) -> Result<EventId, String> {
    match gpu.queue_op(session, QueueOp::NewEvent) {
        Ok(QueueReply::Event(id)) => Ok(id),
        other => Err(format!("a new event: {other:?}")),
    }
}

/// `got` is refused `invalid-argument` with a message containing `says`.
fn invalid(what: &str, got: Result<QueueReply, GpuError>, says: &str) -> TestResult {
    check(
        got.as_ref()
            .is_err_and(|e| e.name() == "invalid-argument" && e.message().contains(says)),
        || format!("{what}: {got:?}"),
    )
}

/// The probe's `streams 8` (two streams, events between them, a timed stretch, both limits, a
/// foreign event) run here and through the node: the same lines, the elapsed time aside.
pub fn the_probes_streams_through_the_node_are_the_local_ones() -> TestResult {
    let node = TestNode::start();
    let local = local_host();
    let manifest = Manifest::load(&tasklet("testing/probe")).map_err(|e| e.to_string())?;
    let compiled = local.load(manifest.clone()).map_err(|e| e.to_string())?;
    // The elapsed time is measured, not compared: its line keeps its first two words.
    let lines = |out: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| match l.starts_with("ok elapsed ") {
                true => "ok elapsed".to_owned(),
                false => l.to_owned(),
            })
            .collect()
    };
    let here = local
        .run(&compiled, b"streams 8")
        .map_err(|e| format!("local: {e}"))?;
    let gpu = RemoteGpu::for_manifest(node.client("dev"), &manifest).map_err(|e| e.to_string())?;
    let there = local
        .runner()
        .run(&compiled, b"streams 8", Box::new(gpu))
        .map_err(|e| format!("remote: {e}"))?;
    let (here, there) = (lines(&here), lines(&there));
    let expected = [
        "ok pipelined 8 chunks",
        "ok query true",
        "ok elapsed",
        "ok matches",
        "ok stream limit 16 invalid-argument",
        "ok event limit 64 invalid-argument",
        "ok foreign event refused invalid-argument",
    ];
    check(here == expected, || format!("local: {here:#?}"))?;
    check(here == there, || {
        format!("local: {here:#?}\nremote: {there:#?}")
    })?;
    node.wait_for_baseline(WAIT)?;
    tasklet_tests::assert_baseline(&local);
    Ok(())
}

/// A stream or event made in one session is refused in another session of the same connection,
/// and in any session of another connection (same tenant or another), wherever it is named.
pub fn a_stream_or_event_of_another_session_or_connection_is_refused() -> TestResult {
    let node = TestNode::start();
    let mut owner = RemoteGpu::new(node.client("dev"));
    let lease = owner.lease_acquire(request())?;
    let (s1, s2) = (owner.session_open(lease)?, owner.session_open(lease)?);
    let (stream, event) = (new_stream(&mut owner, s1)?, new_event(&mut owner, s1)?);
    owner.queue_op(s1, QueueOp::Record { event, stream })?;
    let (s2_stream, s2_event) = (new_stream(&mut owner, s2)?, new_event(&mut owner, s2)?);

    let ops = |stream: StreamId, event: EventId, mine: (StreamId, EventId)| {
        [
            ("check", QueueOp::CheckStream(stream)),
            ("sync stream", QueueOp::SyncStream(stream)),
            (
                "wait on a foreign event",
                QueueOp::Wait {
                    stream: mine.0,
                    event,
                },
            ),
            (
                "record a foreign event",
                QueueOp::Record {
                    event,
                    stream: mine.0,
                },
            ),
            (
                "record on a foreign stream",
                QueueOp::Record {
                    event: mine.1,
                    stream,
                },
            ),
            ("query", QueueOp::Query(event)),
            ("sync event", QueueOp::SyncEvent(event)),
            (
                "elapsed",
                QueueOp::Elapsed {
                    start: event,
                    end: mine.1,
                },
            ),
        ]
    };
    // Another session of the same connection.
    for (what, op) in ops(stream, event, (s2_stream, s2_event)) {
        invalid(
            &format!("session {s2}: {what}"),
            owner.queue_op(s2, op),
            "belongs to another session",
        )?;
    }
    // Another connection, of the same tenant and of another, in a session of its own and in
    // the owner's session (which is no session of its).
    for tenant in ["dev", "team"] {
        let mut other = RemoteGpu::new(node.client(tenant));
        let theirs = other.lease_acquire(request())?;
        let session = other.session_open(theirs)?;
        let mine = (
            new_stream(&mut other, session)?,
            new_event(&mut other, session)?,
        );
        for (what, op) in ops(stream, event, mine) {
            invalid(
                &format!("{tenant}: {what}"),
                other.queue_op(session, op),
                "belongs to another session",
            )?;
            invalid(
                &format!("{tenant}: {what} in the owner's session"),
                other.queue_op(s1, op),
                &format!("no session {s1} here"),
            )?;
        }
        invalid(
            &format!("{tenant}: a new stream in the owner's session"),
            other.queue_op(s1, QueueOp::NewStream),
            &format!("no session {s1} here"),
        )?;
        // Dropping them in its own session drops nothing of the owner's.
        for op in [QueueOp::DropStream(stream), QueueOp::DropEvent(event)] {
            let got = other.queue_op(session, op);
            check(matches!(got, Ok(QueueReply::Done)), || {
                format!("{tenant}: {op:?}: {got:?}")
            })?;
        }
    }
    // The owner's stream and event are untouched (a record names both, checked by the node).
    owner.queue_op(s1, QueueOp::CheckStream(stream))?;
    owner.queue_op(s1, QueueOp::Record { event, stream })?;
    owner.queue_op(s1, QueueOp::SyncEvent(event))?;
    // A dropped stream is refused by the node once this side no longer answers for it.
    owner.queue_op(s1, QueueOp::DropStream(stream))?;
    invalid(
        "a dropped stream",
        owner.queue_op(s1, QueueOp::CheckStream(stream)),
        "or was dropped",
    )?;
    drop(owner);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// 16 streams and 64 events a session, through the node as here: the next is refused
/// `invalid-argument` naming the limit, and a dropped one makes room.
pub fn the_sessions_limits_hold_over_the_wire() -> TestResult {
    let node = TestNode::start();
    let mut gpu = RemoteGpu::new(node.client("dev"));
    let lease = gpu.lease_acquire(request())?;
    let session = gpu.session_open(lease)?;
    let mut streams = Vec::new();
    for _ in 0..MAX_SESSION_STREAMS {
        streams.push(new_stream(&mut gpu, session)?);
    }
    invalid(
        "stream 17",
        gpu.queue_op(session, QueueOp::NewStream),
        "at most 16 streams",
    )?;
    gpu.queue_op(session, QueueOp::DropStream(streams[3]))?;
    new_stream(&mut gpu, session)?;
    let mut events = Vec::new();
    for _ in 0..MAX_SESSION_EVENTS {
        events.push(new_event(&mut gpu, session)?);
    }
    invalid(
        "event 65",
        gpu.queue_op(session, QueueOp::NewEvent),
        "at most 64 events",
    )?;
    gpu.queue_op(session, QueueOp::DropEvent(events[10]))?;
    new_event(&mut gpu, session)?;
    // The limits are a session's: another session of the lease starts with room.
    let fresh = gpu.session_open(lease)?;
    new_stream(&mut gpu, fresh)?;
    new_event(&mut gpu, fresh)?;
    drop(gpu);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A pipelined launch the node refused is reported by the next queue op that waits for the
/// session's work (a stream's sync, an event's record), as by SYNC; the others do not take it.
pub fn a_failed_pipelined_op_surfaces_at_a_streams_sync() -> TestResult {
    let node = TestNode::start();
    let mut gpu = RemoteGpu::new(node.client("dev"));
    let lease = gpu.lease_acquire(request())?;
    let session = gpu.session_open(lease)?;
    let (stream, event) = (
        new_stream(&mut gpu, session)?,
        new_event(&mut gpu, session)?,
    );
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
    };
    for (what, op) in [
        ("a stream's sync", QueueOp::SyncStream(stream)),
        ("a record", QueueOp::Record { event, stream }),
    ] {
        gpu.queue_op(session, QueueOp::CheckStream(stream))?;
        // A module the session never loaded: pipelined, refused by the node.
        gpu.launch_kernel(session, ModuleId(9999), KernelRef::At(0), &config, &[])?;
        let query = gpu.queue_op(session, QueueOp::Query(event));
        check(matches!(query, Ok(QueueReply::Ready(_))), || {
            format!("{what}: a query took the failure: {query:?}")
        })?;
        let got = gpu.queue_op(session, op);
        check(
            got.as_ref()
                .is_err_and(|e| e.message().contains("module 9999")),
            || format!("{what} after a refused launch: {got:?}"),
        )?;
        // Reported once: the session goes on.
        gpu.sync(session)?;
        gpu.queue_op(session, op)?;
    }
    drop(gpu);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A frame of QUEUE_OP with `body`, request id 2, at this version.
fn queue_frame(body: &[u8]) -> Vec<u8> {
    let mut bytes = vec![tasklet_wire::PROTOCOL_VERSION, 0];
    bytes.extend_from_slice(&(Opcode::QueueOp as u16).to_be_bytes());
    bytes.extend_from_slice(&2u32.to_be_bytes());
    bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// Session 1, then `rest`.
fn queue_body(rest: &[u8]) -> Vec<u8> {
    let mut body = 1u64.to_be_bytes().to_vec();
    body.extend_from_slice(rest);
    body
}

pub fn malformed_queue_ops_close_only_their_connection() -> TestResult {
    let node = TestNode::start();
    let mut bystander = RemoteGpu::new(node.client("dev"));
    let lease = bystander.lease_acquire(request())?;
    let session = bystander.session_open(lease)?;
    let (stream, event) = (
        new_stream(&mut bystander, session)?,
        new_event(&mut bystander, session)?,
    );
    let cases = [
        (
            "an unknown op, 11",
            queue_body(&[11; 17]),
            "field op holds 11",
        ),
        (
            "an unknown op, 255",
            queue_body(&[255]),
            "field op holds 255",
        ),
        ("no op at all", queue_body(&[]), "inside field queue op"),
        ("no session", vec![0; 5], "inside field session"),
        (
            "a wait cut inside its event",
            queue_body(&[3; 13]),
            "inside field event",
        ),
        (
            "a new stream with a byte too many",
            queue_body(&[0, 0]),
            "after its last field",
        ),
    ];
    for (what, body, named) in cases {
        let mut raw = RawClient::connect(&node, "team");
        let mut greeting = Vec::new();
        let _ = encode_request(1, &hello(), &mut greeting).map_err(|e| e.to_string())?;
        raw.send_bytes(&greeting);
        raw.next_reply()
            .map_err(|e| format!("{what}: HELLO: {e}"))?;
        raw.send_bytes(&queue_frame(&body));
        raw.closed_for_breaking_the_protocol(what, named)?;
        // The bystander's streams and events are served throughout.
        bystander.queue_op(session, QueueOp::Record { event, stream })?;
        bystander.queue_op(session, QueueOp::SyncStream(stream))?;
    }
    drop(bystander);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A client of version 6, which knows no QUEUE_OP, is refused at HELLO in words naming both
/// versions, and the connection closes.
pub fn a_client_of_version_6_is_told_at_hello() -> TestResult {
    an_older_client_is_told_at_hello(6, "before streams")
}

/// The example tasklets that pipeline on streams (Rust's stream-pipeline; the JS and Python
/// Jacobi solvers' `stream` way) print through the node what they print here, the measured
/// elapsed time aside.
pub fn examples_on_streams_through_the_node_are_the_local_ones() -> TestResult {
    let node = TestNode::start();
    let local = local_host();
    let measured = |out: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| match l.strip_prefix("elapsed-ns ") {
                Some(ns) if ns.parse::<u64>().is_ok_and(|ns| ns > 0) => "elapsed-ns".to_owned(),
                _ => l.to_owned(),
            })
            .collect()
    };
    // Each with how its output starts.
    let cases = [
        ("stream-pipeline", "8 4096", "chunks 8 elements 32768 sum "),
        ("js-jacobi", "64 100 stream", "history"),
        ("python-jacobi", "64 100 stream", "history"),
    ];
    for (name, input, starts) in cases {
        // The Python and JavaScript components are built here as the guest-language tests build
        // them (with componentize-py/-js, from the project's install scripts).
        if let Some(tool) = Tool::for_example(name) {
            if let Err(skip) = guest_build::build(tool, name) {
                println!("{skip} (through the node)");
                continue;
            }
        }
        let manifest = Manifest::load(&tasklet(name)).map_err(|e| e.to_string())?;
        let compiled = local.load(manifest.clone()).map_err(|e| e.to_string())?;
        let here = local
            .run(&compiled, input.as_bytes())
            .map_err(|e| format!("{name} local: {e}"))?;
        let gpu =
            RemoteGpu::for_manifest(node.client("dev"), &manifest).map_err(|e| e.to_string())?;
        let there = local
            .runner()
            .run(&compiled, input.as_bytes(), Box::new(gpu))
            .map_err(|e| format!("{name} remote: {e}"))?;
        let (here, there) = (measured(&here), measured(&there));
        check(
            here.first().is_some_and(|l| l.starts_with(starts)) && here == there,
            || format!("{name} on {input:?}: local {here:#?}, remote {there:#?}"),
        )?;
    }
    node.wait_for_baseline(WAIT)?;
    tasklet_tests::assert_baseline(&local);
    Ok(())
}
