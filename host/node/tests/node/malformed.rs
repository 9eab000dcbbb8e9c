//! Garbage on the port: the connection that sent it is told PROTOCOL_ERROR and closed, and the
//! node goes on serving everyone else.

use crate::support::*;
use std::time::{Duration, Instant};
use tasklet_wire::{encode_request, ErrorCode, Opcode, Reply, Request, SessionId};

/// A frame header from raw parts.
fn header(version: u8, flags: u8, opcode: u16, request_id: u32, len: u32) -> Vec<u8> {
    let mut bytes = vec![version, flags];
    bytes.extend_from_slice(&opcode.to_be_bytes());
    bytes.extend_from_slice(&request_id.to_be_bytes());
    bytes.extend_from_slice(&len.to_be_bytes());
    bytes
}

fn hello_bytes() -> Vec<u8> {
    let mut out = Vec::new();
    let _ = encode_request(1, &hello(), &mut out).unwrap();
    out
}

/// Each kind of garbage, sent after a proper HELLO (and once before it).
fn garbage() -> Vec<(&'static str, Vec<u8>, bool)> {
    // A deterministic, varied byte string (xorshift).
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let random: Vec<u8> = (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let mut truncated = Vec::new();
    let _ = encode_request(2, &Request::GetInventory, &mut truncated).unwrap();
    let mut sync = Vec::new();
    let _ = encode_request(
        2,
        &Request::Sync {
            session: tasklet_wire::SessionId(1),
        },
        &mut sync,
    )
    .unwrap();
    truncated.extend_from_slice(&sync[..sync.len() - 3]);
    vec![
        ("random bytes", random, false),
        (
            "random bytes before HELLO",
            (0..64).map(|i| (i * 37) as u8).collect(),
            true,
        ),
        ("a truncated frame", truncated, false),
        (
            "an oversized length",
            header(
                tasklet_wire::PROTOCOL_VERSION,
                0,
                Opcode::ModuleLoad as u16,
                2,
                u32::MAX,
            ),
            false,
        ),
        (
            "an unknown version",
            header(9, 0, Opcode::Sync as u16, 2, 8),
            false,
        ),
        (
            "an unknown opcode",
            header(tasklet_wire::PROTOCOL_VERSION, 0, 0x0999, 2, 0),
            false,
        ),
        (
            "unknown flags",
            header(
                tasklet_wire::PROTOCOL_VERSION,
                0x80,
                Opcode::Sync as u16,
                2,
                8,
            ),
            false,
        ),
        (
            "a request before HELLO",
            header(
                tasklet_wire::PROTOCOL_VERSION,
                0,
                Opcode::GetInventory as u16,
                1,
                0,
            ),
            true,
        ),
    ]
}

pub fn garbage_closes_only_its_connection() -> TestResult {
    let node = TestNode::start();
    let mut bystander = node.client("dev");
    let lease = bystander
        .lease_alloc(1 << 20, 60, None)
        .map_err(|e| e.to_string())?;
    for (what, bytes, before_hello) in garbage() {
        let mut raw = RawClient::connect(&node, "team");
        if !before_hello {
            raw.send_bytes(&hello_bytes());
            raw.next_reply()
                .map_err(|e| format!("{what}: HELLO: {e}"))?;
        }
        raw.send_bytes(&bytes);
        // A truncated frame is malformed only once the stream ends inside it.
        raw.finish();
        raw.closed_for_breaking_the_protocol(what, "")?;
        // The bystander is served throughout, its lease intact.
        let devices = bystander
            .inventory()
            .map_err(|e| format!("after {what}: {e}"))?;
        check(devices.first().is_some_and(|d| d.leases == 1), || {
            format!("after {what}: {devices:?}")
        })?;
    }
    // Datagrams that are not QUIC at all are dropped by the transport.
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    for (i, (_, bytes, _)) in garbage().iter().enumerate() {
        for size in [1, 13, 1200] {
            let datagram: Vec<u8> = bytes.iter().cycle().skip(i).take(size).copied().collect();
            socket
                .send_to(&datagram, node.addr)
                .map_err(|e| e.to_string())?;
        }
    }
    let devices = bystander
        .inventory()
        .map_err(|e| format!("after raw datagrams: {e}"))?;
    check(devices.first().is_some_and(|d| d.leases == 1), || {
        format!("{devices:?}")
    })?;
    bystander.mem_free(lease.lease).map_err(|e| e.to_string())?;
    check(node.node().control().metrics().protocol_errors >= 8, || {
        format!("{:?}", node.node().control().metrics())
    })?;
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A stream the client resets inside a frame is malformed, as one that ends there is: the
/// connection is closed with PROTOCOL_ERROR. Reset between frames it is merely gone: the
/// connection serves on.
pub fn a_stream_reset_inside_a_frame_is_malformed_and_between_frames_is_not() -> TestResult {
    let node = TestNode::start();
    let mut frame = Vec::new();
    encode_request(
        2,
        &Request::LeaseAlloc {
            min_bytes: 1 << 20,
            seconds: 60,
            device: None,
            requires: Default::default(),
        },
        &mut frame,
    )
    .map_err(|e| e.to_string())?;
    let mut cut = RawClient::connect(&node, "dev");
    cut.send_bytes(&hello_bytes());
    cut.next_reply().map_err(|e| format!("HELLO: {e}"))?;
    cut.send_bytes(&frame[..frame.len() - 3]);
    // Time for the bytes to reach the node before the reset, which drops what is unsent.
    std::thread::sleep(Duration::from_millis(300));
    cut.reset();
    let (code, reason) = cut.closed()?;
    check(
        code == ErrorCode::ProtocolError as u64 && reason.contains("reset"),
        || format!("a stream reset inside a frame: closed with {code}: {reason}"),
    )?;

    let mut between = RawClient::connect(&node, "dev");
    between.send_bytes(&hello_bytes());
    between.next_reply().map_err(|e| format!("HELLO: {e}"))?;
    between.reset();
    std::thread::sleep(Duration::from_millis(300));
    between.new_stream()?;
    let lease = between.lease(3, 1 << 20);
    check(lease.is_ok(), || {
        format!("after a stream reset between frames: {lease:?}")
    })?;
    drop(between);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// After the node said GOAWAY for a protocol error, nothing more on that connection is served:
/// a lease asked for on another stream, in the moments before the close, is not granted.
pub fn nothing_is_served_after_a_goaway() -> TestResult {
    let node = TestNode::start();
    let mut raw = RawClient::connect(&node, "dev");
    raw.request(1, &hello())?;
    raw.send_bytes(&[0xff; 64]);
    match raw.next_reply() {
        Err(e) if e.starts_with("GOAWAY PROTOCOL_ERROR") => {}
        other => return Err(format!("no GOAWAY for garbage: {other:?}").into()),
    }
    // The close comes after a grace for the GOAWAY to arrive: ask within it.
    let asked = raw.new_stream().and_then(|()| {
        raw.request(
            2,
            &Request::LeaseAlloc {
                min_bytes: 1 << 20,
                seconds: 60,
                device: None,
                requires: Default::default(),
            },
        )
    });
    check(asked.is_err(), || {
        format!("a lease was granted after the GOAWAY: {asked:?}")
    })?;
    check(node.accounting().leases == 0, || {
        format!("{:?}", node.accounting())
    })?;
    Ok(())
}

/// Frames started on many streams and never finished hold at most the connection's queue
/// budget (64 MiB), counted from their first bytes: the node reads no more of them once it is
/// spent, serves other clients meanwhile, and closes the connection at the stall timeout, after
/// which nothing is held.
pub fn unfinished_frames_hold_at_most_the_connections_budget() -> TestResult {
    const BUDGET: u64 = 64 << 20;
    // The stall timeout must outlast the client's own writing of the frames below (on a loaded
    // 2-core machine, a debug build, 120 MiB through QUIC once took longer than 3 s), and the
    // idle timeout the stall timeout (the stalled client sends nothing more).
    let node = TestNode::with(Setup {
        stall_timeout: Duration::from_secs(6),
        idle_timeout: Duration::from_secs(10),
        ..Setup::default()
    });
    let mut raw = RawClient::connect(&node, "dev");
    raw.request(1, &hello())?;
    let mut frame = Vec::new();
    let load = Request::ModuleLoad {
        session: SessionId(1),
        ptx: vec![b'x'; 15 << 20],
    };
    encode_request(2, &load, &mut frame).map_err(|e| e.to_string())?;
    // 6 streams × 15 MiB: past the budget by half of it. What the node does not take stays in
    // QUIC's window.
    let _open: Vec<_> = (0..6)
        .map(|_| raw.open_stream_with(&frame[..frame.len() - 1000]))
        .collect::<Result<_, _>>()?;
    let control = node.node().control();
    let start = Instant::now();
    let mut most = 0;
    while start.elapsed() < Duration::from_secs(1) {
        let held = control.status().request_bytes;
        most = most.max(held);
        check(held <= BUDGET, || {
            format!("{held} bytes of unfinished frames held, past the {BUDGET}-byte budget")
        })?;
        std::thread::sleep(Duration::from_millis(20));
    }
    check(most >= 3 * (15 << 20), || {
        format!("the unfinished frames were not counted: at most {most} bytes held")
    })?;
    let mut other = node.client("team");
    other
        .inventory()
        .map_err(|e| format!("another client: {e}"))?;
    let (_, reason) = raw.closed()?;
    check(reason.contains("middle of a frame"), || reason.clone())?;
    let start = Instant::now();
    while control.status().request_bytes > 0 {
        check(start.elapsed() < WAIT, || {
            format!(
                "{} bytes still held after the close",
                control.status().request_bytes
            )
        })?;
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A client that asks for replies and never reads them holds at most 16 MiB of them queued in
/// the node (besides what QUIC keeps in flight): the connection's thread waits for room, other
/// clients are served meanwhile, and when the client goes its replies and lease go with it.
pub fn unread_replies_hold_at_most_the_connections_reply_budget() -> TestResult {
    const REPLY_BUDGET: u64 = 16 << 20;
    // Reads of a staging buffer's size: once the connection's staging buffers are all held by
    // unread replies, each piece is read into a buffer of its own.
    const READ: u64 = 4 << 20;
    let node = TestNode::start();
    let mut raw = RawClient::connect(&node, "dev");
    raw.request(1, &hello())?;
    let lease = raw.lease(2, READ)?;
    let session = match raw.request(3, &Request::SessionOpen { lease })? {
        (Reply::SessionOpen { session }, _) => session,
        other => return Err(format!("{other:?}").into()),
    };
    let buffer = match raw.request(
        4,
        &Request::MemAlloc {
            session,
            bytes: READ,
        },
    )? {
        (Reply::MemAlloc { buffer }, _) => buffer,
        other => return Err(format!("{other:?}").into()),
    };
    // 40 reads of 4 MiB never read back: 160 MiB of replies, far more than QUIC's window for
    // the stream (16 MiB) and the node's budget together.
    let mut asks = Vec::new();
    for id in 0..40 {
        let read = Request::MemRead {
            session,
            buffer,
            offset: 0,
            len: READ,
        };
        encode_request(10 + id, &read, &mut asks).map_err(|e| e.to_string())?;
    }
    raw.send_bytes(&asks);
    let control = node.node().control();
    // Until the queue has about filled (however slowly this machine reads the device), and 4 s
    // more, in which each further read would add 4 MiB (a staging buffer is waited for 1 s):
    // it never passes the budget.
    let start = Instant::now();
    let (mut most, mut full_at) = (0, None);
    while full_at.is_none_or(|at: Instant| at.elapsed() < Duration::from_secs(4)) {
        let queued = control.status().reply_bytes;
        most = most.max(queued);
        check(queued <= REPLY_BUDGET + 1024, || {
            format!("{queued} bytes of unread replies queued, past the {REPLY_BUDGET}-byte budget")
        })?;
        if full_at.is_none() && queued >= REPLY_BUDGET - READ {
            full_at = Some(Instant::now());
        }
        check(start.elapsed() < WAIT * 2, || {
            format!("the unread replies were not counted: at most {most} bytes queued")
        })?;
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut other = node.client("team");
    other
        .inventory()
        .map_err(|e| format!("another client: {e}"))?;
    drop(raw);
    node.wait_for_baseline(WAIT)?;
    let start = Instant::now();
    while control.status().reply_bytes > 0 {
        check(start.elapsed() < WAIT, || {
            format!(
                "{} reply bytes still queued after the client went",
                control.status().reply_bytes
            )
        })?;
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Uploads left unfinished past the connection's budget are let go with their connection:
/// eight DEPLOY_PUSHes announcing 60 MiB each, their data sent a piece on each in turn, take the
/// whole budget between them and all wait for more; when the client goes, the node frees their
/// bytes and the connection's lease, counts the lease dropped, and drains at once.
pub fn abandoned_uploads_past_the_budget_go_with_their_connection() -> TestResult {
    const COMPONENT: u64 = 60 << 20;
    const PIECE: usize = 1 << 20;
    let node = TestNode::with(Setup {
        store: true,
        metrics: true,
        ..Setup::default()
    });
    let mut raw = RawClient::connect(&node, "dev");
    raw.request(1, &hello())?;
    raw.lease(2, 1 << 20)?;
    let (manifest, _) = pushable("iota");
    let mut uploads = Vec::new();
    for id in 0..8 {
        let push = Request::DeployPush {
            manifest: manifest.clone(),
            component_len: COMPONENT,
        };
        let mut head = Vec::new();
        let data = encode_request(10 + id, &push, &mut head)
            .map_err(|e| e.to_string())?
            .ok_or("a push streams its component")?;
        let (send, recv) = raw.open_stream_with(&head)?;
        uploads.push((send, recv, data));
    }
    // 14 MiB on each, a piece at a time on each in turn: 112 MiB, of which the budget takes 64
    // and QUIC's windows hold the rest.
    for _ in 0..14 {
        for (send, _, data) in &mut uploads {
            let mut piece = Vec::new();
            data.encode(&[0u8; PIECE], &mut piece)
                .map_err(|e| e.to_string())?;
            raw.write_on(send, &piece)?;
        }
    }
    let control = node.node().control();
    let start = Instant::now();
    while control.status().request_bytes < (64 << 20) - (1 << 20) {
        check(start.elapsed() < WAIT, || {
            format!("the uploads never took the budget: {:?}", control.status())
        })?;
        std::thread::sleep(Duration::from_millis(20));
    }
    raw.connection.close(0u32.into(), b"gone");
    drop(uploads);
    drop(raw);
    let start = Instant::now();
    loop {
        let status = control.status();
        if status.request_bytes == 0 && status.connections == 0 && node.accounting().leases == 0 {
            break;
        }
        check(start.elapsed() < WAIT, || {
            format!("the connection's uploads or lease outlived it: {status:?}")
        })?;
        std::thread::sleep(Duration::from_millis(20));
    }
    let (samples, text) = crate::metrics::scrape(&node)?;
    let count = |name: &str| samples.get(&format!("{name}{{tenant=\"dev\"}}")).copied();
    check(
        count("gpu_lease_acquired") == Some(1.0) && count("gpu_lease_dropped") == Some(1.0),
        || format!("acquired and dropped do not meet:\n{text}"),
    )?;
    node.drain_and_wait(Duration::from_secs(5))?;
    Ok(())
}
