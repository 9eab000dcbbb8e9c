//! The byte-for-byte examples docs/wire.md shows, pinned: if the layout changes, this fails and
//! the document must change with it.

use tasklet_wire::*;

fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

#[test]
fn sync_and_its_ok_reply() {
    let mut out = Vec::new();
    let _ = encode_request(
        5,
        &Request::Sync {
            session: SessionId(7),
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(
        out,
        hex("0a 00 06 05 00 00 00 05 00 00 00 08  00 00 00 00 00 00 00 07")
    );
    out.clear();
    let _ = encode_reply(5, &Reply::Sync, &mut out).unwrap();
    assert_eq!(out, hex("0a 01 06 05 00 00 00 05 00 00 00 02  00 00"));
}

#[test]
fn a_sync_that_reports_a_failed_launch() {
    let error = ErrorReply {
        code: ErrorCode::KernelFault,
        message: "fault".into(),
        failed_op: Some(FailedOp {
            request_id: 3,
            opcode: Opcode::Launch,
        }),
        cause: None,
    };
    let mut out = Vec::new();
    let _ = encode_reply(
        5,
        &Reply::Error {
            opcode: Opcode::Sync,
            error,
        },
        &mut out,
    )
    .unwrap();
    let expected = hex("0a 01 06 05 00 00 00 05 00 00 00 12
         00 0c  00 00 00 05 66 61 75 6c 74  01 00 00 00 03 06 04");
    assert_eq!(out, expected);
}

#[test]
fn a_mem_write_and_its_data() {
    let write = Request::MemWrite {
        session: SessionId(1),
        buffer: BufferId(2),
        offset: 0,
        len: 5,
    };
    let mut out = Vec::new();
    let mut data = encode_request(2, &write, &mut out).unwrap().unwrap();
    data.encode(b"hello", &mut out).unwrap();
    let expected = hex("0a 00 06 02 00 00 00 02 00 00 00 20
         00 00 00 00 00 00 00 01  00 00 00 00 00 00 00 02
         00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 05
         0a 02 06 02 00 00 00 02 00 00 00 05  68 65 6c 6c 6f");
    assert_eq!(out, expected);
}

#[test]
fn a_launch_with_typed_arguments() {
    let launch = Request::Launch(Launch {
        session: SessionId(1),
        module: ModuleId(3),
        kernel: 0,
        grid: [4, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
        args: vec![
            KernelArg::Buffer {
                buffer: BufferId(2),
                offset: 16,
            },
            KernelArg::F32(1.5),
        ],
    });
    let mut out = Vec::new();
    let _ = encode_request(9, &launch, &mut out).unwrap();
    let expected = hex("0a 00 06 04 00 00 00 09 00 00 00 4a
         00 00 00 00 00 00 00 01  00 00 00 00 00 00 00 03  00 00 00 00
         00 00 00 04 00 00 00 01 00 00 00 01  00 00 01 00 00 00 00 01 00 00 00 01
         00 00 00 00
         00 00 00 02
         00  00 00 00 00 00 00 00 02  00 00 00 00 00 00 00 10
         05  3f c0 00 00");
    assert_eq!(out, expected);
}

#[test]
fn goaway() {
    let mut out = Vec::new();
    encode_goaway(&ErrorReply::new(ErrorCode::Draining, "bye"), &mut out).unwrap();
    assert_eq!(
        out,
        hex("0a 01 00 00 00 00 00 00 00 00 00 0a  00 13  00 00 00 03 62 79 65  00")
    );
}

#[test]
fn a_deploy_run_reply_carries_the_whole_run_id() {
    let reply = Reply::DeployRun {
        run_id: 0x0011_2233_4455_6677_8899_aabb_ccdd_eeff,
        exit_status: 0,
        elapsed_us: 42,
        output_len: 2,
    };
    let mut out = Vec::new();
    let mut data = encode_reply(9, &reply, &mut out).unwrap().unwrap();
    data.encode(b"ok", &mut out).unwrap();
    let expected = hex("0a 01 07 02 00 00 00 09 00 00 00 26
         00 00
         00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff
         00 00 00 00  00 00 00 00 00 00 00 2a  00 00 00 00 00 00 00 02
         0a 03 07 02 00 00 00 09 00 00 00 02  6f 6b");
    assert_eq!(out, expected);
}

#[test]
fn a_gpu_submit_whose_kernel_faulted() {
    let mut error = ErrorReply::new(ErrorCode::LaunchFailed, "fault");
    error.cause = Some(ErrorCode::KernelFault);
    let mut out = Vec::new();
    let _ = encode_reply(
        5,
        &Reply::Error {
            opcode: Opcode::GpuSubmit,
            error,
        },
        &mut out,
    )
    .unwrap();
    let expected = hex("0a 01 06 00 00 00 00 05 00 00 00 0f
         00 04  00 00 00 05 66 61 75 6c 74  00  01 00 0c");
    assert_eq!(out, expected);
}

#[test]
fn a_hello_is_framed_as_version_1() {
    let mut out = Vec::new();
    let _ = encode_request(
        1,
        &Request::Hello {
            min_version: 2,
            max_version: 2,
            agent: "a".into(),
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(
        out,
        hex("01 00 00 01 00 00 00 01 00 00 00 07  02 02 00 00 00 01 61")
    );
}

#[test]
fn a_group_of_two_leases_and_its_reply() {
    let group = Request::LeaseAllocGroup(LeaseGroup {
        min_bytes: 1 << 20,
        seconds: 60,
        device: None,
        requires: LeaseRequirements::default(),
        count: 2,
    });
    let mut out = Vec::new();
    let _ = encode_request(3, &group, &mut out).unwrap();
    let expected = hex("0a 00 02 04 00 00 00 03 00 00 00 15
         00 00 00 00 00 10 00 00  00 00 00 3c  00  00 00 00 00  00 00 00 02");
    assert_eq!(out, expected);
    let lease = |lease, device| GroupLease {
        lease: LeaseId(lease),
        device,
        granted_bytes: 1 << 20,
        ttl_ms: 60_000,
    };
    let reply = Reply::LeaseAllocGroup {
        leases: vec![lease(7, 0), lease(8, 1)],
    };
    out.clear();
    let _ = encode_reply(3, &reply, &mut out).unwrap();
    let expected = hex("0a 01 02 04 00 00 00 03 00 00 00 3e  00 00  00 00 00 02
         00 00 00 00 00 00 00 07  00 00 00 00  00 00 00 00 00 10 00 00  00 00 00 00 00 00 ea 60
         00 00 00 00 00 00 00 08  00 00 00 01  00 00 00 00 00 10 00 00  00 00 00 00 00 00 ea 60");
    assert_eq!(out, expected);
}

#[test]
fn a_copy_between_two_sessions() {
    let copy = Request::MemCopyBetween {
        dst_session: SessionId(2),
        dst: BufferId(5),
        dst_offset: 0,
        src_session: SessionId(1),
        src: BufferId(3),
        src_offset: 16,
        len: 64,
    };
    let mut out = Vec::new();
    let _ = encode_request(4, &copy, &mut out).unwrap();
    let expected = hex("0a 00 06 0f 00 00 00 04 00 00 00 38
         00 00 00 00 00 00 00 02  00 00 00 00 00 00 00 05  00 00 00 00 00 00 00 00
         00 00 00 00 00 00 00 01  00 00 00 00 00 00 00 03  00 00 00 00 00 00 00 10
         00 00 00 00 00 00 00 40");
    assert_eq!(out, expected);
    out.clear();
    let _ = encode_reply(4, &Reply::MemCopyBetween, &mut out).unwrap();
    assert_eq!(out, hex("0a 01 06 0f 00 00 00 04 00 00 00 02  00 00"));
}

#[test]
fn a_record_on_a_stream_and_the_time_between_two_events() {
    // QUEUE_OP of session 2, request 6: record event 9 on stream 4 (tag 7: event, then stream).
    let record = Request::QueueOp(Queue {
        session: SessionId(2),
        op: QueueOp::Record {
            event: 9,
            stream: 4,
        },
    });
    let mut out = Vec::new();
    let _ = encode_request(6, &record, &mut out).unwrap();
    let expected = hex("0a 00 06 10 00 00 00 06 00 00 00 19
         00 00 00 00 00 00 00 02  07  00 00 00 00 00 00 00 09  00 00 00 00 00 00 00 04");
    assert_eq!(out, expected);
    out.clear();
    let _ = encode_reply(6, &Reply::QueueOp(QueueAnswer::Done), &mut out).unwrap();
    assert_eq!(out, hex("0a 01 06 10 00 00 00 06 00 00 00 03  00 00  00"));
    // A new stream (tag 0, no fields) and its reply: answer tag 1, the stream's id 4.
    let new_stream = Request::QueueOp(Queue {
        session: SessionId(2),
        op: QueueOp::NewStream,
    });
    out.clear();
    let _ = encode_request(7, &new_stream, &mut out).unwrap();
    assert_eq!(
        out,
        hex("0a 00 06 10 00 00 00 07 00 00 00 09  00 00 00 00 00 00 00 02  00")
    );
    out.clear();
    let _ = encode_reply(7, &Reply::QueueOp(QueueAnswer::Stream(4)), &mut out).unwrap();
    assert_eq!(
        out,
        hex("0a 01 06 10 00 00 00 07 00 00 00 0b  00 00  01  00 00 00 00 00 00 00 04")
    );
    // The time between two events: answer tag 4, 1500 ns.
    out.clear();
    let _ = encode_reply(8, &Reply::QueueOp(QueueAnswer::ElapsedNs(1500)), &mut out).unwrap();
    assert_eq!(
        out,
        hex("0a 01 06 10 00 00 00 08 00 00 00 0b  00 00  04  00 00 00 00 00 00 05 dc")
    );
}

#[test]
fn a_write_a_launch_and_a_read_on_a_stream() {
    // STREAM_WRITE of request 2: stream 4, then MEM_WRITE's fields (session 1, buffer 2,
    // offset 0, 5 bytes), then its one data frame.
    let write = Request::StreamWrite {
        stream: 4,
        session: SessionId(1),
        buffer: BufferId(2),
        offset: 0,
        len: 5,
    };
    let mut out = Vec::new();
    let mut data = encode_request(2, &write, &mut out).unwrap().unwrap();
    data.encode(b"hello", &mut out).unwrap();
    let expected = hex("0a 00 06 11 00 00 00 02 00 00 00 28
         00 00 00 00 00 00 00 04  00 00 00 00 00 00 00 01  00 00 00 00 00 00 00 02
         00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 05
         0a 02 06 11 00 00 00 02 00 00 00 05  68 65 6c 6c 6f");
    assert_eq!(out, expected);

    // STREAM_LAUNCH of request 9: stream 4, then LAUNCH's fields (session 1, module 3, kernel 0,
    // grid and block (1,1,1), no shared memory, no arguments).
    let launch = Request::StreamLaunch {
        stream: 4,
        launch: Launch {
            session: SessionId(1),
            module: ModuleId(3),
            kernel: 0,
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_mem_bytes: 0,
            args: Vec::new(),
        },
    };
    out.clear();
    assert!(encode_request(9, &launch, &mut out).unwrap().is_none());
    let expected = hex("0a 00 06 12 00 00 00 09 00 00 00 3c
         00 00 00 00 00 00 00 04  00 00 00 00 00 00 00 01  00 00 00 00 00 00 00 03  00 00 00 00
         00 00 00 01 00 00 00 01 00 00 00 01   00 00 00 01 00 00 00 01 00 00 00 01   00 00 00 00
         00 00 00 00");
    assert_eq!(out, expected);

    // STREAM_READ's OK reply to request 3: `len` 2, then the bytes `ok` in one data frame.
    out.clear();
    let mut data = encode_reply(3, &Reply::StreamRead { len: 2 }, &mut out)
        .unwrap()
        .unwrap();
    data.encode(b"ok", &mut out).unwrap();
    let expected = hex(
        "0a 01 06 13 00 00 00 03 00 00 00 0a  00 00  00 00 00 00 00 00 00 02
         0a 03 06 13 00 00 00 03 00 00 00 02  6f 6b",
    );
    assert_eq!(out, expected);
}

/// docs/wire.md gives the frames' version byte in three places; each is this crate's.
#[test]
fn the_document_gives_the_protocols_version() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/wire.md"))
        .expect("docs/wire.md");
    let v = PROTOCOL_VERSION;
    for said in [
        format!("This document is version {v}."),
        format!("| 0 | 1 | version | {v}; HELLO and its reply"),
        format!("| version byte other than {v} (1 on HELLO's frames) |"),
    ] {
        assert!(doc.contains(&said), "docs/wire.md does not say {said:?}");
    }
}
