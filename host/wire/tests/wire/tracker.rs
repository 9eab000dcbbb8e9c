//! The client's tracker: ids, matching replies, and pipelined ops settled by barriers.

use tasklet_wire::*;

fn launch(session: u64) -> Request {
    Request::Launch(Launch {
        session: SessionId(session),
        module: ModuleId(1),
        kernel: 0,
        grid: [1; 3],
        block: [32, 1, 1],
        shared_mem_bytes: 0,
        args: vec![KernelArg::Buffer {
            buffer: BufferId(4),
            offset: 0,
        }],
    })
}

fn write(session: u64) -> Request {
    Request::MemWrite {
        session: SessionId(session),
        buffer: BufferId(4),
        offset: 0,
        len: 16,
    }
}

fn sync(session: u64) -> Request {
    Request::Sync {
        session: SessionId(session),
    }
}

fn failed(code: ErrorCode, opcode: Opcode, failed_op: Option<FailedOp>) -> Reply {
    Reply::Error {
        opcode,
        error: ErrorReply {
            code,
            message: "x".into(),
            failed_op,
            cause: None,
        },
    }
}

#[test]
fn ids_start_at_1_and_replies_match_once() {
    let mut tracker = ClientTracker::new(16);
    let a = tracker.start(&Request::GetInventory).unwrap();
    let b = tracker
        .start(&Request::LeaseInfo { lease: LeaseId(3) })
        .unwrap();
    assert_eq!((a, b), (1, 2));
    assert_eq!(tracker.awaiting_reply(), 2);

    let done = tracker
        .complete(
            a,
            &Reply::Inventory {
                devices: vec![],
                draining: false,
            },
        )
        .unwrap();
    assert_eq!(
        done,
        Completion {
            opcode: Opcode::GetInventory,
            settled: vec![],
            failed: None
        }
    );
    // A second reply to the same request, and a reply to one never sent.
    assert_eq!(
        tracker.complete(
            a,
            &Reply::Inventory {
                devices: vec![],
                draining: false
            }
        ),
        Err(TrackError::UnknownRequest { request_id: a })
    );
    assert_eq!(
        tracker.complete(99, &Reply::Sync),
        Err(TrackError::UnknownRequest { request_id: 99 })
    );
    // A failed reply settles a call as well as an OK one.
    tracker
        .complete(b, &failed(ErrorCode::LeaseExpired, Opcode::LeaseInfo, None))
        .unwrap();
    assert_eq!(tracker.awaiting_reply(), 0);
}

#[test]
fn a_reply_of_another_op_is_refused_and_changes_nothing() {
    let mut tracker = ClientTracker::new(16);
    let id = tracker
        .start(&Request::SessionOpen { lease: LeaseId(1) })
        .unwrap();
    assert_eq!(
        tracker.complete(id, &Reply::SessionClose),
        Err(TrackError::OpcodeMismatch {
            request_id: id,
            expected: Opcode::SessionOpen,
            got: Opcode::SessionClose
        })
    );
    assert_eq!(tracker.awaiting_reply(), 1);
    tracker
        .complete(
            id,
            &Reply::SessionOpen {
                session: SessionId(5),
            },
        )
        .unwrap();
}

#[test]
fn pipelined_ops_await_their_sessions_barrier() {
    let mut tracker = ClientTracker::new(16);
    let l1 = tracker.start(&launch(1)).unwrap();
    let w1 = tracker.start(&write(1)).unwrap();
    let l2 = tracker.start(&launch(2)).unwrap();
    // No reply is awaited for them, and none is accepted.
    assert_eq!(tracker.awaiting_reply(), 0);
    assert_eq!(
        tracker.complete(l1, &Reply::Sync),
        Err(TrackError::UnknownRequest { request_id: l1 })
    );
    let unsynced: Vec<_> = tracker
        .unsynced(SessionId(1))
        .iter()
        .map(|op| (op.request_id, op.opcode))
        .collect();
    assert_eq!(unsynced, [(l1, Opcode::Launch), (w1, Opcode::MemWrite)]);

    let s1 = tracker.start(&sync(1)).unwrap();
    // Sent after the SYNC: the next barrier's.
    let l3 = tracker.start(&launch(1)).unwrap();
    assert_eq!(tracker.unsynced(SessionId(1)).len(), 1);

    let done = tracker.complete(s1, &Reply::Sync).unwrap();
    let settled: Vec<_> = done.settled.iter().map(|op| op.request_id).collect();
    assert_eq!(settled, [l1, w1]);
    assert_eq!(done.failed, None);
    // Session 2's launch and session 1's later one are still unsettled.
    assert_eq!(tracker.unsynced(SessionId(2))[0].request_id, l2);
    assert_eq!(tracker.unsynced(SessionId(1))[0].request_id, l3);
}

#[test]
fn a_failed_barrier_names_one_of_the_ops_it_covers() {
    let mut tracker = ClientTracker::new(16);
    let w = tracker.start(&write(1)).unwrap();
    let l = tracker.start(&launch(1)).unwrap();
    let read = Request::MemRead {
        session: SessionId(1),
        buffer: BufferId(4),
        offset: 0,
        len: 8,
    };
    let r = tracker.start(&read).unwrap();

    // Naming an op it does not cover (or the right id with the wrong opcode) is refused.
    for wrong in [
        FailedOp {
            request_id: 77,
            opcode: Opcode::Launch,
        },
        FailedOp {
            request_id: l,
            opcode: Opcode::MemWrite,
        },
    ] {
        assert_eq!(
            tracker.complete(
                r,
                &failed(ErrorCode::KernelFault, Opcode::MemRead, Some(wrong))
            ),
            Err(TrackError::UnknownFailedOp {
                request_id: r,
                failed: wrong
            })
        );
    }
    let named = FailedOp {
        request_id: l,
        opcode: Opcode::Launch,
    };
    let done = tracker
        .complete(
            r,
            &failed(ErrorCode::KernelFault, Opcode::MemRead, Some(named)),
        )
        .unwrap();
    assert_eq!(
        done.settled
            .iter()
            .map(|op| op.request_id)
            .collect::<Vec<_>>(),
        [w, l]
    );
    assert_eq!(
        done.failed,
        Some(PostedOp {
            request_id: l,
            opcode: Opcode::Launch,
            session: SessionId(1)
        })
    );
}

#[test]
fn streamed_reply_lengths_must_match_the_request() {
    let mut tracker = ClientTracker::new(16);
    let read = Request::MemRead {
        session: SessionId(1),
        buffer: BufferId(4),
        offset: 0,
        len: 8,
    };
    let r = tracker.start(&read).unwrap();
    assert_eq!(
        tracker.complete(r, &Reply::MemRead { len: 9 }),
        Err(TrackError::LengthMismatch {
            request_id: r,
            expected: 8,
            got: 9
        })
    );
    tracker.complete(r, &Reply::MemRead { len: 8 }).unwrap();

    let submit = Request::GpuSubmit(GpuSubmit {
        lease: LeaseId(1),
        ptx: b".version 8.0".to_vec(),
        kernel: "k".into(),
        grid: [1; 3],
        block: [1; 3],
        args: vec![],
        output_size: 64,
        output_offset: 0,
        input: vec![],
    });
    let g = tracker.start(&submit).unwrap();
    assert_eq!(
        tracker.complete(g, &Reply::GpuSubmit { output_len: 0 }),
        Err(TrackError::LengthMismatch {
            request_id: g,
            expected: 64,
            got: 0
        })
    );
    // A failed reply carries no data, so there is no length to check.
    tracker
        .complete(g, &failed(ErrorCode::LaunchFailed, Opcode::GpuSubmit, None))
        .unwrap();
}

#[test]
fn session_close_settles_without_reporting() {
    let mut tracker = ClientTracker::new(16);
    let l = tracker.start(&launch(3)).unwrap();
    let c = tracker
        .start(&Request::SessionClose {
            session: SessionId(3),
        })
        .unwrap();
    assert!(tracker.unsynced(SessionId(3)).is_empty());
    let done = tracker.complete(c, &Reply::SessionClose).unwrap();
    assert_eq!(
        done.settled
            .iter()
            .map(|op| op.request_id)
            .collect::<Vec<_>>(),
        [l]
    );
    assert_eq!(done.failed, None);
}

#[test]
fn the_limit_counts_calls_and_unsettled_ops() {
    let mut tracker = ClientTracker::new(3);
    let a = tracker.start(&launch(1)).unwrap();
    let _ = tracker.start(&write(1)).unwrap();
    let s = tracker.start(&sync(1)).unwrap();
    assert_eq!(
        tracker.start(&launch(1)),
        Err(TrackError::TooManyOutstanding { limit: 3 })
    );
    tracker.complete(s, &Reply::Sync).unwrap();
    // The SYNC's reply freed all three ids; the next is new, not a reused one.
    let next = tracker.start(&launch(1)).unwrap();
    assert!(next > s && a < next);
}

#[test]
fn disconnect_fails_everything_in_flight() {
    let mut tracker = ClientTracker::new(16);
    let mut ids = vec![
        tracker.start(&launch(1)).unwrap(),
        tracker.start(&Request::GetInventory).unwrap(),
        tracker.start(&write(2)).unwrap(),
        tracker.start(&sync(1)).unwrap(),
    ];
    ids.sort_unstable();
    assert_eq!(tracker.disconnect(), ids);
    assert_eq!(tracker.awaiting_reply(), 0);
    assert!(tracker.unsynced(SessionId(2)).is_empty());
    assert!(tracker.disconnect().is_empty());
}

#[test]
fn forgetting_a_session_frees_its_ops() {
    let mut tracker = ClientTracker::new(2);
    let l = tracker.start(&launch(9)).unwrap();
    let w = tracker.start(&write(9)).unwrap();
    assert!(tracker.start(&Request::GetInventory).is_err());
    let forgotten: Vec<_> = tracker
        .forget_session(SessionId(9))
        .iter()
        .map(|op| op.request_id)
        .collect();
    assert_eq!(forgotten, [l, w]);
    tracker.start(&Request::GetInventory).unwrap();
}

#[test]
fn a_read_on_a_stream_settles_the_stream_ops_before_it() {
    let mut tracker = ClientTracker::new(16);
    let on_stream = |request: Request| match request {
        Request::Launch(launch) => Request::StreamLaunch { stream: 9, launch },
        Request::MemWrite {
            session,
            buffer,
            offset,
            len,
        } => Request::StreamWrite {
            stream: 9,
            session,
            buffer,
            offset,
            len,
        },
        other => other,
    };
    let w = tracker.start(&on_stream(write(1))).unwrap();
    let l = tracker.start(&on_stream(launch(1))).unwrap();
    let plain = tracker.start(&launch(1)).unwrap();
    assert_eq!(tracker.unsynced(SessionId(1)).len(), 3);
    let read = Request::StreamRead {
        stream: 9,
        session: SessionId(1),
        buffer: BufferId(4),
        offset: 0,
        len: 16,
    };
    let r = tracker.start(&read).unwrap();
    assert!(tracker.unsynced(SessionId(1)).is_empty());
    // Its reply announces the length asked for, or it is refused.
    assert!(matches!(
        tracker.complete(r, &Reply::StreamRead { len: 15 }),
        Err(TrackError::LengthMismatch { .. })
    ));
    let failure = FailedOp {
        request_id: l,
        opcode: Opcode::StreamLaunch,
    };
    let done = tracker
        .complete(
            r,
            &failed(
                ErrorCode::InvalidArgument,
                Opcode::StreamRead,
                Some(failure),
            ),
        )
        .unwrap();
    let settled: Vec<RequestId> = done.settled.iter().map(|op| op.request_id).collect();
    assert_eq!(settled, vec![w, l, plain]);
    assert_eq!(done.failed.map(|op| op.request_id), Some(l));
}
