//! A transfer spread over several streams (FORK, BRANCH, BRANCH_END): the session's order kept,
//! a refusal reported where it would be on one stream, and every misuse of the markers a
//! protocol error that closes only its connection.

use crate::metrics::scrape;
use crate::support::*;
use std::time::Duration;
use tasklet_remote::RemoteGpu;
use tasklet_runtime::gpu::{BufferId, GpuService, LeaseRequest, SessionId};
use tasklet_runtime::{GpuError, Manifest};
use tasklet_wire::{encode_request, ErrorCode, Opcode, Reply, Request};

const MIB: u64 = 1 << 20;

/// Large enough that the client spreads it (`SPREAD_MIN` is 32 MiB).
const SPREAD: u64 = 40 * MIB;

fn pattern(len: u64, seed: u64) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4093 + seed) as u8).collect()
}

/// The streams these tests' clients spread a transfer over.
const STREAMS: usize = 4;

/// A session on the node holding two buffers of [`SPREAD`] bytes.
fn two_buffers(
    node: &TestNode,
) -> Result<(RemoteGpu, SessionId, BufferId, BufferId), libtest_mimic::Failed> {
    let mut gpu = RemoteGpu::new(node.client("dev")).with_transfer_streams(STREAMS);
    let lease = gpu.lease_acquire(LeaseRequest {
        min_vram: 2 * SPREAD + MIB,
        secs: 60,
        device: None,
    })?;
    let session = gpu.session_open(lease)?;
    let (a, b) = (
        gpu.mem_alloc(session, SPREAD)?,
        gpu.mem_alloc(session, SPREAD)?,
    );
    Ok((gpu, session, a, b))
}

/// A spread write, then a small write over its first bytes, a copy and a spread read: each sees
/// what came before it in the session, as on one stream.
pub fn spread_transfers_keep_the_sessions_order() -> TestResult {
    let node = TestNode::with(Setup {
        metrics: true,
        ..Setup::default()
    });
    let (mut gpu, session, a, b) = two_buffers(&node)?;
    let data = pattern(SPREAD, 0);
    gpu.mem_write(session, a, 0, &data)?;
    // On the session's own stream, after the FORK: it lands after every part.
    gpu.mem_write(session, a, 0, b"after the parts")?;
    gpu.mem_copy(session, (b, 0), (a, 0), SPREAD)?;
    let mut expected = data.clone();
    expected[..15].copy_from_slice(b"after the parts");
    let back = gpu.mem_read(session, b, 0, SPREAD)?;
    check(back == expected, || {
        let first = back.iter().zip(&expected).position(|(x, y)| x != y);
        format!("the copy read back differs from byte {first:?} on")
    })?;
    // A spread read of part of a buffer, after a pipelined write the first part overlaps.
    gpu.mem_write(session, b, MIB, b"just before")?;
    let tail = gpu.mem_read(session, b, MIB, SPREAD - MIB)?;
    check(tail.starts_with(b"just before"), || {
        "a spread read did not see the write sent before it".into()
    })?;
    check(tail[11..] == expected[MIB as usize + 11..], || {
        "a spread read of a span came back changed".into()
    })?;
    let (samples, text) = scrape(&node)?;
    let count = |op: &str| {
        samples
            .get(&format!(
                "tasklet_requests_total{{op=\"{op}\",tenant=\"dev\"}}"
            ))
            .copied()
            .unwrap_or(0.0)
    };
    // Three transfers spread (a write, two reads), each over the client's streams.
    let branches = (3 * STREAMS) as f64;
    check(
        count("FORK") == 3.0 && count("BRANCH") == branches && count("BRANCH_END") == branches,
        || format!("the transfers were not spread as expected; the scrape:\n{text}"),
    )?;
    drop(gpu);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A refused write before a spread read is reported by the read, naming the write, and the
/// session goes on; a write too large for its buffer is refused whole, in the local words.
pub fn a_refusal_before_a_spread_read_is_reported_by_the_read() -> TestResult {
    let node = TestNode::start();
    let (mut gpu, session, a, b) = two_buffers(&node)?;
    let data = pattern(SPREAD, 3);
    gpu.mem_write(session, b, 0, &data)?;
    // Does not fit: sent whole, refused at the node.
    gpu.mem_write(session, a, 8, &data)?;
    match gpu.mem_read(session, b, 0, SPREAD) {
        Err(GpuError::OutOfBounds(why)) => check(
            why.contains("reported for MEM_WRITE")
                && why.contains(&format!("bytes 8..{}", SPREAD + 8)),
            || format!("the refusal says {why:?}"),
        )?,
        other => return Err(format!("the read after a refused write: {other:?}").into()),
    }
    let back = gpu.mem_read(session, b, 0, SPREAD)?;
    check(back == data, || {
        "the read after the refusal came back changed".into()
    })?;
    // Nothing of the refused write landed.
    let untouched = gpu.mem_read(session, a, 0, SPREAD)?;
    check(untouched.iter().all(|&x| x == 0), || {
        "a write that did not fit changed its buffer".into()
    })?;
    drop(gpu);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A raw connection that said HELLO, with a session holding one buffer of `size` bytes.
fn raw_session(node: &TestNode, size: u64) -> Result<(RawClient, Request, Request), String> {
    let mut raw = RawClient::connect(node, "dev");
    raw.request(1, &hello())?;
    let lease = raw.lease(2, size)?;
    let session = match raw.request(3, &Request::SessionOpen { lease })? {
        (Reply::SessionOpen { session }, _) => session,
        other => return Err(format!("session: {other:?}")),
    };
    let buffer = match raw.request(
        4,
        &Request::MemAlloc {
            session,
            bytes: size,
        },
    )? {
        (Reply::MemAlloc { buffer }, _) => buffer,
        other => return Err(format!("alloc: {other:?}")),
    };
    let write = |len| Request::MemWrite {
        session,
        buffer,
        offset: 0,
        len,
    };
    let read = Request::MemRead {
        session,
        buffer,
        offset: 0,
        len: size,
    };
    Ok((raw, write(size), read))
}

/// The session and buffer of `raw_session`'s write.
fn target(write: &Request) -> (tasklet_wire::SessionId, tasklet_wire::BufferId) {
    match write {
        Request::MemWrite {
            session, buffer, ..
        } => (*session, *buffer),
        _ => unreachable!("raw_session's write"),
    }
}

fn frames(requests: &[(u32, Request)], data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (id, request) in requests {
        if let Ok(Some(mut encoder)) = encode_request(*id, request, &mut out) {
            encoder.encode(data, &mut out).expect("the data announced");
        }
    }
    out
}

/// A branch that comes before its FORK waits for it: the FORK's stream's write, sent before the
/// FORK, is served before the branch's, and the read after it sees the branch's.
pub fn a_branch_before_its_fork_waits_for_it() -> TestResult {
    let node = TestNode::start();
    let size = MIB;
    let (mut raw, write, read) = raw_session(&node, size)?;
    let first = pattern(size, 1);
    let branch_data = pattern(size, 2);
    // The session's stream: a write of `first`, not yet followed by the FORK.
    raw.send_bytes(&frames(&[(5, write.clone())], &first));
    let branch = frames(
        &[
            (6, Request::Branch { fork: 77 }),
            (7, write),
            (8, Request::BranchEnd { fork: 77 }),
        ],
        &branch_data,
    );
    let _stream = raw.open_stream_with(&branch)?;
    std::thread::sleep(Duration::from_millis(300));
    raw.send_bytes(&frames(
        &[(
            9,
            Request::Fork {
                fork: 77,
                branches: 1,
            },
        )],
        &[],
    ));
    let (reply, data) = raw.request(10, &read)?;
    check(matches!(reply, Reply::MemRead { .. }), || {
        format!("the read: {reply:?}")
    })?;
    check(data == branch_data, || {
        "the read after the FORK did not see its branch's write over the earlier one".into()
    })?;
    Ok(())
}

/// Each misuse of FORK, BRANCH and BRANCH_END closes its connection with PROTOCOL_ERROR naming
/// it; the node serves a new connection after each.
pub fn every_misuse_of_a_fork_is_a_protocol_error() -> TestResult {
    let node = TestNode::start();
    type Misuse = fn(&mut RawClient) -> Result<Vec<(quinn::SendStream, quinn::RecvStream)>, String>;
    let cases: [(&str, Misuse, String); 4] = [
        (
            "a BRANCH_END outside a branch",
            |raw| {
                raw.send_bytes(&frames(&[(5, Request::BranchEnd { fork: 1 })], &[]));
                Ok(Vec::new())
            },
            "BRANCH_END of fork 1 outside any branch".into(),
        ),
        (
            "a FORK inside a branch",
            |raw| {
                raw.send_bytes(&frames(
                    &[(
                        5,
                        Request::Fork {
                            fork: 2,
                            branches: 1,
                        },
                    )],
                    &[],
                ));
                let branch = frames(
                    &[
                        (6, Request::Branch { fork: 2 }),
                        (
                            7,
                            Request::Fork {
                                fork: 3,
                                branches: 1,
                            },
                        ),
                    ],
                    &[],
                );
                Ok(vec![raw.open_stream_with(&branch)?])
            },
            "FORK inside a branch of fork 2".into(),
        ),
        (
            "more BRANCHes than the FORK announced",
            |raw| {
                raw.send_bytes(&frames(
                    &[(
                        5,
                        Request::Fork {
                            fork: 6,
                            branches: 1,
                        },
                    )],
                    &[],
                ));
                let branch = frames(&[(6, Request::Branch { fork: 6 })], &[]);
                Ok(vec![
                    raw.open_stream_with(&branch)?,
                    raw.open_stream_with(&branch)?,
                ])
            },
            "more BRANCHes of fork 6 than the 1 it may have".into(),
        ),
        (
            "a stream that ends inside a branch",
            |raw| {
                raw.send_bytes(&frames(
                    &[(
                        5,
                        Request::Fork {
                            fork: 7,
                            branches: 1,
                        },
                    )],
                    &[],
                ));
                let branch = frames(&[(6, Request::Branch { fork: 7 })], &[]);
                let (mut send, recv) = raw.open_stream_with(&branch)?;
                send.finish().map_err(|e| e.to_string())?;
                Ok(vec![(send, recv)])
            },
            "the stream ended inside a branch of fork 7".into(),
        ),
    ];
    for (what, misuse, said) in cases {
        let mut raw = RawClient::connect(&node, "dev");
        raw.request(1, &hello())
            .map_err(|e| format!("{what}: {e}"))?;
        let _streams = misuse(&mut raw).map_err(|e| format!("{what}: {e}"))?;
        let (code, reason) = raw.closed().map_err(|e| format!("{what}: {e}"))?;
        check(
            code == ErrorCode::ProtocolError as u64 && reason.contains(&said),
            || format!("{what}: closed with {code} {reason:?}, not PROTOCOL_ERROR saying {said:?}"),
        )?;
        // The node goes on serving.
        let mut other = RawClient::connect(&node, "dev");
        other
            .request(1, &hello())
            .map_err(|e| format!("after {what}: {e}"))?;
    }
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A BRANCH whose FORK has not come and a FORK whose branches have not begun wait, with no
/// deadline of their own (the FORK's stream may be held up behind the session's earlier work),
/// past the stall timeout; the connection goes on, and its end ends them with nothing left held.
pub fn forks_and_branches_wait_for_each_other_until_the_connection_ends() -> TestResult {
    let node = TestNode::start();
    let stall = Setup::default().stall_timeout;
    let (mut raw, _, _) = raw_session(&node, MIB)?;
    raw.send_bytes(&frames(
        &[(
            5,
            Request::Fork {
                fork: 1,
                branches: 2,
            },
        )],
        &[],
    ));
    let branch = frames(&[(6, Request::Branch { fork: 1 })], &[]);
    let lone = frames(&[(7, Request::Branch { fork: 2 })], &[]);
    let streams = [raw.open_stream_with(&branch)?, raw.open_stream_with(&lone)?];
    std::thread::sleep(stall + Duration::from_millis(500));
    // Still open, and serving its other streams.
    raw.new_stream()?;
    let (reply, _) = raw.request(8, &Request::GetInventory)?;
    check(matches!(reply, Reply::Inventory { .. }), || {
        format!("an inventory while forks wait: {reply:?}")
    })?;
    drop(streams);
    raw.connection.close(0u32.into(), b"done");
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// Two reads of several pieces each, pipelined on one stream (and a read on another stream
/// between them): each reply's data follows it whole, the other stream's read sent beside them.
pub fn large_reads_pipelined_on_one_stream_come_back_whole() -> TestResult {
    let node = TestNode::start();
    let size = 12 * MIB;
    let (mut raw, write, read) = raw_session(&node, size)?;
    let data = pattern(size, 5);
    let first_half = match &read {
        Request::MemRead {
            session, buffer, ..
        } => Request::MemRead {
            session: *session,
            buffer: *buffer,
            offset: 0,
            len: size / 2,
        },
        _ => unreachable!("raw_session's read"),
    };
    let (session, _) = target(&write);
    raw.send_bytes(&frames(&[(5, write)], &data));
    // Across streams there is no order: the write is done before the other stream's read.
    raw.request(9, &Request::Sync { session })?;
    let (mut other, mut other_recv) = raw.open_stream_with(&frames(&[(8, read.clone())], &[]))?;
    raw.send_bytes(&frames(&[(6, read), (7, first_half)], &[]));
    for (what, expected) in [
        ("the first read", &data[..]),
        ("the second", &data[..size as usize / 2]),
    ] {
        let (reply, back) = raw.next_reply().map_err(|e| format!("{what}: {e}"))?;
        check(
            matches!(reply, Reply::MemRead { .. }) && back == expected,
            || {
                format!(
                    "{what}: {reply:?} with {} bytes, not the bytes written",
                    back.len()
                )
            },
        )?;
    }
    let _ = other.finish();
    let (reply, beside) = raw.reply_on(&mut other_recv)?;
    check(
        matches!(reply, Reply::MemRead { .. }) && beside == data,
        || {
            format!(
                "the other stream's read: {reply:?} with {} bytes",
                beside.len()
            )
        },
    )?;
    Ok(())
}

/// A tasklet's 40 MiB write, read into its own memory and read as a list, through the node:
/// each spread over the client's streams, the bytes checked by the tasklet itself.
pub fn a_tasklets_large_transfers_through_the_node_are_spread() -> TestResult {
    let node = TestNode::with(Setup {
        metrics: true,
        ..Setup::default()
    });
    let local = local_host();
    let manifest = Manifest::load(&tasklet("testing/gpubench")).map_err(|e| e.to_string())?;
    let compiled = local.load(manifest.clone()).map_err(|e| e.to_string())?;
    let gpu = RemoteGpu::for_manifest(node.client("dev"), &manifest)
        .map_err(|e| e.to_string())?
        .with_transfer_streams(STREAMS);
    let input = format!("bulk {SPREAD} 1");
    let out = local
        .runner()
        .run(&compiled, input.as_bytes(), Box::new(gpu))
        .map_err(|e| format!("gpubench remote: {e}"))?;
    let out = String::from_utf8_lossy(&out);
    check(
        out.starts_with(&format!("bulk_bytes {SPREAD}\n")) && !out.contains("error"),
        || format!("gpubench {input:?} through the node printed {out:?}"),
    )?;
    let (samples, text) = scrape(&node)?;
    let forks = samples
        .get("tasklet_requests_total{op=\"FORK\",tenant=\"dev\"}")
        .copied()
        .unwrap_or(0.0);
    // The write, the read into the tasklet's memory and the read of a list, at least (the
    // tasklet may warm up with more).
    check(forks >= 3.0, || {
        format!("{forks} transfers spread, not 3 or more; the scrape:\n{text}")
    })?;
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A client spreading over the most streams a fork may have (16), besides its session's stream
/// and the ones it keeps for deployments: the node lets it open them all, and the transfers
/// come back whole. (With the node allowing 16 streams a connection, the sixteenth branch was
/// never opened and the write waited forever.)
pub fn a_transfer_spreads_over_the_most_branches_a_fork_may_have() -> TestResult {
    let node = TestNode::start();
    let most = usize::from(tasklet_wire::limits::MAX_BRANCHES);
    let mut client = node.client("dev");
    client.set_deadline(Some(std::time::Instant::now() + WAIT));
    let mut gpu = RemoteGpu::new(client).with_transfer_streams(most);
    let lease = gpu.lease_acquire(LeaseRequest {
        min_vram: SPREAD + MIB,
        secs: 60,
        device: None,
    })?;
    let session = gpu.session_open(lease)?;
    let buffer = gpu.mem_alloc(session, SPREAD)?;
    let data = pattern(SPREAD, 3);
    gpu.mem_write(session, buffer, 0, &data)?;
    let back = gpu.mem_read(session, buffer, 0, SPREAD)?;
    check(back == data, || {
        let first = back.iter().zip(&data).position(|(x, y)| x != y);
        format!("spread over {most} streams, the read differs from byte {first:?} on")
    })?;
    drop(gpu);
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// Large reads on two streams of a raw client, not in any fork, read one reply to its end
/// before the other: each is sent whole in turn, so the first is never held behind the
/// second's unread data. (Interleaved piece by piece, the second's pieces filled its stream's
/// window and the connection's 16 MiB reply budget, and the GPU thread, holding the first
/// reply, waited on them until the connection ended.)
pub fn large_reads_on_two_streams_may_be_read_one_after_the_other() -> TestResult {
    // Larger than a stream's window and the reply budget together, twice over.
    let size = 96 * MIB;
    // 96 MiB each way through a debug build, beside the other tests on a busy CI machine: the
    // suite's 2 s stall and 3 s idle timeouts would be about that machine, not this order.
    let node = TestNode::with(Setup {
        idle_timeout: Duration::from_secs(30),
        stall_timeout: Duration::from_secs(30),
        ..Setup::default()
    });
    let (mut raw, write, read) = raw_session(&node, size)?;
    let (session, _) = target(&write);
    let data = pattern(size, 9);
    raw.send_bytes(&frames(&[(5, write)], &data));
    raw.request(6, &Request::Sync { session })?;
    let (mut first, mut first_recv) = raw.open_stream_with(&frames(&[(7, read.clone())], &[]))?;
    // The first read under way (and held: nothing reads it yet) before the second comes.
    std::thread::sleep(Duration::from_millis(300));
    let (mut second, mut second_recv) = raw.open_stream_with(&frames(&[(8, read)], &[]))?;
    let _ = (first.finish(), second.finish());
    for (what, recv) in [
        ("the first", &mut first_recv),
        ("the second", &mut second_recv),
    ] {
        let (reply, back) = raw
            .reply_on(recv)
            .map_err(|e| format!("{what} read: {e}"))?;
        check(
            matches!(reply, Reply::MemRead { .. }) && back == data,
            || format!("{what} read: {reply:?} with {} bytes", back.len()),
        )?;
    }
    drop((first, second));
    raw.connection.close(0u32.into(), b"done");
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// Writes of several pieces whose end would pass the largest offset (a raw client's; the
/// Rust client's own check refuses them before sending) are refused whole, reported at the
/// next barrier in the local words, and the connection goes on.
pub fn a_write_whose_end_would_wrap_is_refused_and_the_session_goes_on() -> TestResult {
    let node = TestNode::start();
    let size = 8 * MIB;
    let (mut raw, write, read) = raw_session(&node, size)?;
    let (session, buffer) = target(&write);
    let data = pattern(size, 4);
    let mut id = 10;
    for offset in [u64::MAX - 10, u64::MAX - size + 1, u64::MAX] {
        let wraps = Request::MemWrite {
            session,
            buffer,
            offset,
            len: size,
        };
        raw.send_bytes(&frames(&[(id, wraps)], &data));
        match raw.request(id + 1, &Request::Sync { session })? {
            (Reply::Error { opcode, error }, _) => {
                let words = format!(
                    "bytes {offset}..{} are outside the buffer's {size} bytes",
                    u128::from(offset) + u128::from(size)
                );
                check(
                    error.code == ErrorCode::OutOfBounds
                        && error.message == words
                        && error
                            .failed_op
                            .is_some_and(|op| op.opcode == Opcode::MemWrite),
                    || format!("at {offset}: {opcode:?} {error:?}"),
                )?
            }
            other => return Err(format!("at {offset}: {other:?}").into()),
        }
        id += 2;
    }
    raw.send_bytes(&frames(&[(id, write)], &data));
    let (reply, back) = raw.request(id + 1, &read)?;
    check(
        matches!(reply, Reply::MemRead { .. }) && back == data,
        || format!("after the refusals: {reply:?}, {} bytes", back.len()),
    )?;
    raw.connection.close(0u32.into(), b"done");
    node.wait_for_baseline(WAIT)?;
    Ok(())
}

/// A write refused at its first piece drops its later pieces, even when a barrier on another
/// stream reports the refusal (and so clears it) while the rest of the write's data is still
/// arriving: a wrapping write's later pieces would otherwise land at small offsets.
pub fn a_refused_write_drops_its_later_pieces_whatever_a_barrier_reports_meanwhile() -> TestResult {
    let node = TestNode::start();
    let size = 8 * MIB;
    let (mut raw, write, read) = raw_session(&node, size)?;
    let (session, buffer) = target(&write);
    // Wraps past the largest offset: its second piece would land 4 MiB - 11 bytes in.
    let wraps = Request::MemWrite {
        session,
        buffer,
        offset: u64::MAX - 10,
        len: size,
    };
    let data = vec![0xee; size as usize];
    let (half, rest) = data.split_at(size as usize / 2);
    let mut head = Vec::new();
    let mut encoder = encode_request(10, &wraps, &mut head)
        .map_err(|e| e.to_string())?
        .ok_or("a write carries data")?;
    encoder.encode(half, &mut head).map_err(|e| e.to_string())?;
    raw.send_bytes(&head);
    // The first piece refused, a SYNC on another stream reports it.
    let mut sync = Vec::new();
    encode_request(20, &Request::Sync { session }, &mut sync).map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(200));
    let (mut other, mut other_recv) = raw.open_stream_with(&sync)?;
    let _ = other.finish();
    match raw.reply_on(&mut other_recv)? {
        (Reply::Error { error, .. }, _) => check(error.code == ErrorCode::OutOfBounds, || {
            format!("{error:?}")
        })?,
        other => return Err(format!("the SYNC beside the write: {other:?}").into()),
    }
    let mut tail = Vec::new();
    encoder.encode(rest, &mut tail).map_err(|e| e.to_string())?;
    raw.send_bytes(&tail);
    let (reply, back) = raw.request(11, &read)?;
    check(
        matches!(reply, Reply::MemRead { .. }) && back.iter().all(|&b| b == 0),
        || {
            let landed = back.iter().position(|&b| b != 0);
            format!("{reply:?}: the refused write's bytes landed from {landed:?} on")
        },
    )?;
    raw.connection.close(0u32.into(), b"done");
    node.wait_for_baseline(WAIT)?;
    Ok(())
}
