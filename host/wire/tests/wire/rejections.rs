//! Every way bytes are refused, one test each: the decoder answers with the typed cause, before
//! allocating for a length it was told, and stays failed.

use crate::support::*;
use tasklet_wire::limits::*;
use tasklet_wire::*;

const REPLY: u8 = 0x01;
const DATA: u8 = 0x02;

/// A frame from raw parts, its length taken from `body`.
fn frame(version: u8, flags: u8, opcode: u16, request_id: u32, body: &[u8]) -> Vec<u8> {
    let mut bytes = vec![version, flags];
    bytes.extend_from_slice(&opcode.to_be_bytes());
    bytes.extend_from_slice(&request_id.to_be_bytes());
    bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// A header announcing `len` body bytes, with none behind it.
fn header_only(flags: u8, opcode: Opcode, len: u32) -> Vec<u8> {
    let mut bytes = frame(PROTOCOL_VERSION, flags, opcode as u16, 1, &[]);
    bytes[8..12].copy_from_slice(&len.to_be_bytes());
    bytes
}

fn to_node_error(bytes: &[u8]) -> DecodeError {
    decode_whole(Direction::ToNode, bytes).1.unwrap_err()
}

fn to_client_error(bytes: &[u8]) -> DecodeError {
    decode_whole(Direction::ToClient, bytes).1.unwrap_err()
}

fn request_bytes(id: u32, request: &Request) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = encode_request(id, request, &mut out).unwrap();
    out
}

fn reply_bytes(id: u32, reply: &Reply) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = encode_reply(id, reply, &mut out).unwrap();
    out
}

fn sync_body() -> Vec<u8> {
    7u64.to_be_bytes().to_vec()
}

// ---- header ----

#[test]
fn unknown_version() {
    // 1 is the version HELLO's frames carry, and no other frame.
    for version in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 0xFF] {
        let bytes = frame(version, 0, Opcode::Sync as u16, 1, &sync_body());
        assert_eq!(
            to_node_error(&bytes),
            DecodeError::UnsupportedVersion {
                version,
                supported: 10
            }
        );
    }
}

#[test]
fn unknown_flag_bits() {
    for flags in [0x04, 0x80, 0xFC] {
        let bytes = frame(
            PROTOCOL_VERSION,
            flags,
            Opcode::Sync as u16,
            1,
            &sync_body(),
        );
        assert_eq!(
            to_node_error(&bytes),
            DecodeError::UnknownFlags { flags, known: 0x03 }
        );
    }
}

#[test]
fn unknown_opcode() {
    for opcode in [0x0003, 0x0205, 0x0614, 0x0703, 0xFFFF] {
        let bytes = frame(PROTOCOL_VERSION, 0, opcode, 1, &[]);
        assert_eq!(to_node_error(&bytes), DecodeError::UnknownOpcode { opcode });
    }
}

#[test]
fn frames_sent_the_wrong_way() {
    let reply_to_node = reply_bytes(1, &Reply::Sync);
    assert_eq!(
        to_node_error(&reply_to_node),
        DecodeError::WrongDirection {
            opcode: Opcode::Sync,
            direction: "reply"
        }
    );
    let request_to_client = request_bytes(
        1,
        &Request::Sync {
            session: SessionId(7),
        },
    );
    assert_eq!(
        to_client_error(&request_to_client),
        DecodeError::WrongDirection {
            opcode: Opcode::Sync,
            direction: "request"
        }
    );
    // Pipelined ops get no reply, not even a failed one.
    let launch_reply = frame(PROTOCOL_VERSION, REPLY, Opcode::Launch as u16, 1, &[0, 0]);
    assert_eq!(
        to_client_error(&launch_reply),
        DecodeError::WrongDirection {
            opcode: Opcode::Launch,
            direction: "reply"
        }
    );
    // Nor do they on a stream; nor do FORK, BRANCH and BRANCH_END.
    for opcode in [
        Opcode::StreamLaunch,
        Opcode::StreamWrite,
        Opcode::Fork,
        Opcode::Branch,
        Opcode::BranchEnd,
    ] {
        let reply = frame(PROTOCOL_VERSION, REPLY, opcode as u16, 1, &[0, 0]);
        assert_eq!(
            to_client_error(&reply),
            DecodeError::WrongDirection {
                opcode,
                direction: "reply"
            }
        );
    }
    // GOAWAY is the node's alone.
    let goaway_request = frame(PROTOCOL_VERSION, 0, Opcode::GoAway as u16, 0, &[]);
    assert_eq!(
        to_node_error(&goaway_request),
        DecodeError::WrongDirection {
            opcode: Opcode::GoAway,
            direction: "request"
        }
    );
}

// ---- lengths: refused before anything is allocated or waited for ----

#[test]
fn a_4_gib_frame_length_is_refused_at_the_header() {
    let mut decoder = Decoder::for_node(DecoderConfig::default());
    let bytes = header_only(0, Opcode::ModuleLoad, u32::MAX);
    assert_eq!(
        decoder.decode(&bytes),
        Err(DecodeError::FrameTooLong {
            len: u32::MAX,
            limit: MAX_FRAME_BODY
        })
    );
    let just_over = header_only(0, Opcode::ModuleLoad, MAX_FRAME_BODY + 1);
    assert_eq!(
        to_node_error(&just_over),
        DecodeError::FrameTooLong {
            len: MAX_FRAME_BODY + 1,
            limit: MAX_FRAME_BODY
        }
    );
}

#[test]
fn a_4_gib_field_length_is_refused_at_the_field() {
    // MODULE_LOAD: session, then the ptx's u32 length.
    let mut body = 3u64.to_be_bytes().to_vec();
    body.extend_from_slice(&u32::MAX.to_be_bytes());
    let bytes = frame(PROTOCOL_VERSION, 0, Opcode::ModuleLoad as u16, 1, &body);
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::FieldTooLong {
            field: "ptx",
            len: u32::MAX.into(),
            limit: MAX_MODULE_BYTES as u64
        }
    );
}

#[test]
fn list_counts_over_their_limit() {
    // LAUNCH with 4 Gi arguments announced.
    let mut body = Vec::new();
    for word in [1u64, 2] {
        body.extend_from_slice(&word.to_be_bytes());
    }
    for word in [0u32, 1, 1, 1, 1, 1, 1, 0, u32::MAX] {
        body.extend_from_slice(&word.to_be_bytes());
    }
    let bytes = frame(PROTOCOL_VERSION, 0, Opcode::Launch as u16, 1, &body);
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::TooManyItems {
            field: "args",
            count: u32::MAX.into(),
            limit: MAX_LAUNCH_ARGS as u64
        }
    );
    // MODULE_LOAD_SOURCE with one option too many.
    let too_many = Request::ModuleLoadSource {
        session: SessionId(1),
        source: String::new(),
        options: vec![String::new(); MAX_COMPILE_OPTIONS + 1],
    };
    assert_eq!(
        encode_request(1, &too_many, &mut Vec::new()),
        Err(EncodeError::TooManyItems {
            field: "options",
            count: 65,
            limit: 64
        })
    );
}

/// LEASE_ALLOC_GROUP's body: no device, no requirements, then `count`.
fn group_body(count: u32) -> Vec<u8> {
    let mut body = (1u64 << 20).to_be_bytes().to_vec();
    body.extend_from_slice(&60u32.to_be_bytes());
    body.extend_from_slice(&[0; 5]);
    body.extend_from_slice(&count.to_be_bytes());
    body
}

#[test]
fn a_group_of_more_leases_than_any_node_lends() {
    // Decoded: up to MAX_GROUP_LEASES; one more, or 4 Gi, is malformed.
    let ok = frame(
        PROTOCOL_VERSION,
        0,
        Opcode::LeaseAllocGroup as u16,
        1,
        &group_body(MAX_GROUP_LEASES as u32),
    );
    assert!(decode_whole(Direction::ToNode, &ok).1.is_ok());
    for count in [MAX_GROUP_LEASES as u32 + 1, u32::MAX] {
        let bytes = frame(
            PROTOCOL_VERSION,
            0,
            Opcode::LeaseAllocGroup as u16,
            1,
            &group_body(count),
        );
        assert_eq!(
            to_node_error(&bytes),
            DecodeError::TooManyItems {
                field: "count",
                count: count.into(),
                limit: MAX_GROUP_LEASES as u64
            }
        );
    }
    // Encoded: refused alike.
    let too_many = Request::LeaseAllocGroup(LeaseGroup {
        min_bytes: 1,
        seconds: 1,
        device: None,
        requires: LeaseRequirements::default(),
        count: MAX_GROUP_LEASES as u32 + 1,
    });
    assert_eq!(
        encode_request(1, &too_many, &mut Vec::new()),
        Err(EncodeError::TooManyItems {
            field: "count",
            count: 257,
            limit: 256
        })
    );
    // Cut before the count, or with a byte after it.
    let body = group_body(2);
    let cut = frame(
        PROTOCOL_VERSION,
        0,
        Opcode::LeaseAllocGroup as u16,
        1,
        &body[..body.len() - 1],
    );
    assert_eq!(
        to_node_error(&cut),
        DecodeError::Truncated { field: "count" }
    );
    let mut long = body.clone();
    long.push(0);
    let long = frame(
        PROTOCOL_VERSION,
        0,
        Opcode::LeaseAllocGroup as u16,
        1,
        &long,
    );
    assert_eq!(
        to_node_error(&long),
        DecodeError::TrailingBytes { count: 1 }
    );
}

#[test]
fn a_group_reply_of_too_many_or_missing_leases() {
    // Status OK, then a count of leases over the limit, with none behind it.
    let mut body = vec![0, 0];
    body.extend_from_slice(&(MAX_GROUP_LEASES as u32 + 1).to_be_bytes());
    let bytes = frame(
        PROTOCOL_VERSION,
        REPLY,
        Opcode::LeaseAllocGroup as u16,
        1,
        &body,
    );
    assert_eq!(
        to_client_error(&bytes),
        DecodeError::TooManyItems {
            field: "leases",
            count: 257,
            limit: 256
        }
    );
    // Two leases announced, one there (28 bytes): the count cannot fit what is left.
    let mut body = vec![0, 0, 0, 0, 0, 2];
    body.extend_from_slice(&[0; 28]);
    let bytes = frame(
        PROTOCOL_VERSION,
        REPLY,
        Opcode::LeaseAllocGroup as u16,
        1,
        &body,
    );
    assert_eq!(
        to_client_error(&bytes),
        DecodeError::Truncated { field: "leases" }
    );
    let too_many = Reply::LeaseAllocGroup {
        leases: vec![
            GroupLease {
                lease: LeaseId(1),
                device: 0,
                granted_bytes: 1,
                ttl_ms: 1
            };
            MAX_GROUP_LEASES + 1
        ],
    };
    assert_eq!(
        encode_reply(1, &too_many, &mut Vec::new()),
        Err(EncodeError::TooManyItems {
            field: "leases",
            count: 257,
            limit: 256
        })
    );
}

#[test]
fn a_copy_between_sessions_cut_short() {
    // Seven u64s; give six and a half.
    let body = [0u8; 52];
    let bytes = frame(PROTOCOL_VERSION, 0, Opcode::MemCopyBetween as u16, 1, &body);
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::Truncated { field: "len" }
    );
    let bytes = frame(
        PROTOCOL_VERSION,
        0,
        Opcode::MemCopyBetween as u16,
        1,
        &[0; 12],
    );
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::Truncated { field: "dst" }
    );
}

#[test]
fn a_fork_of_no_branches_or_too_many_or_cut_short() {
    for branches in [0u8, MAX_BRANCHES + 1, 0xFF] {
        let mut body = 9u64.to_be_bytes().to_vec();
        body.push(branches);
        let fork = frame(PROTOCOL_VERSION, 0, Opcode::Fork as u16, 1, &body);
        assert_eq!(
            to_node_error(&fork),
            DecodeError::InvalidValue {
                field: "branches",
                value: branches.into()
            }
        );
        let mut out = Vec::new();
        assert!(matches!(
            encode_request(1, &Request::Fork { fork: 9, branches }, &mut out),
            Err(EncodeError::InvalidValue {
                field: "branches",
                ..
            })
        ));
        assert!(out.is_empty(), "nothing written for a fork refused");
    }
    let cut = frame(PROTOCOL_VERSION, 0, Opcode::Branch as u16, 1, &[0; 7]);
    assert_eq!(
        to_node_error(&cut),
        DecodeError::Truncated { field: "fork" }
    );
}

#[test]
fn a_queue_op_of_an_unknown_tag_or_cut_short() {
    let queue = |body: &[u8]| frame(PROTOCOL_VERSION, 0, Opcode::QueueOp as u16, 1, body);
    // Session 1, then a tag past ELAPSED (10): every tag from 11 up is malformed.
    for tag in [11u8, 0xFF] {
        let mut body = 1u64.to_be_bytes().to_vec();
        body.push(tag);
        body.extend_from_slice(&[0; 16]);
        assert_eq!(
            to_node_error(&queue(&body)),
            DecodeError::InvalidValue {
                field: "op",
                value: tag.into()
            }
        );
    }
    // No tag at all; a WAIT (tag 3) without its event; a NEW_STREAM with a byte after it.
    assert_eq!(
        to_node_error(&queue(&[0; 8])),
        DecodeError::Truncated { field: "queue op" }
    );
    let mut wait = 1u64.to_be_bytes().to_vec();
    wait.push(3);
    wait.extend_from_slice(&[0; 12]);
    assert_eq!(
        to_node_error(&queue(&wait)),
        DecodeError::Truncated { field: "event" }
    );
    let mut long = 1u64.to_be_bytes().to_vec();
    long.extend_from_slice(&[0, 0]);
    assert_eq!(
        to_node_error(&queue(&long)),
        DecodeError::TrailingBytes { count: 1 }
    );
}

#[test]
fn stream_ops_cut_short_or_too_long() {
    let body =
        |fields: usize| -> Vec<u8> { (1..=fields as u64).flat_map(u64::to_be_bytes).collect() };
    // STREAM_WRITE and STREAM_READ: stream, session, buffer, offset, len (five u64s).
    for opcode in [Opcode::StreamWrite, Opcode::StreamRead] {
        let op = |body: &[u8]| frame(PROTOCOL_VERSION, 0, opcode as u16, 1, body);
        assert_eq!(
            to_node_error(&op(&[0; 7])),
            DecodeError::Truncated { field: "stream" }
        );
        assert_eq!(
            to_node_error(&op(&body(4))),
            DecodeError::Truncated { field: "len" }
        );
        let mut long = body(5);
        long.push(0);
        assert_eq!(
            to_node_error(&op(&long)),
            DecodeError::TrailingBytes { count: 1 }
        );
    }
    // STREAM_LAUNCH: the stream, then a LAUNCH whose checks hold as LAUNCH's do.
    let launch = |body: &[u8]| frame(PROTOCOL_VERSION, 0, Opcode::StreamLaunch as u16, 1, body);
    assert_eq!(
        to_node_error(&launch(&[])),
        DecodeError::Truncated { field: "stream" }
    );
    assert_eq!(
        to_node_error(&launch(&body(1))),
        DecodeError::Truncated { field: "session" }
    );
    let launch_of = |args: &[u8]| {
        let mut body = body(3);
        body.extend_from_slice(&[0; 4 + 12 + 12 + 4]);
        body.extend_from_slice(args);
        body
    };
    // An argument count past the limit, refused before anything is reserved for it.
    let many = (MAX_LAUNCH_ARGS as u32 + 1).to_be_bytes();
    assert!(matches!(
        to_node_error(&launch(&launch_of(&many))),
        DecodeError::TooManyItems { .. }
    ));
    // An unknown argument tag.
    let mut bad_tag = 1u32.to_be_bytes().to_vec();
    bad_tag.push(9);
    bad_tag.extend_from_slice(&[0; 16]);
    assert!(matches!(
        to_node_error(&launch(&launch_of(&bad_tag))),
        DecodeError::InvalidValue { .. }
    ));
    let mut long = launch_of(&0u32.to_be_bytes());
    long.push(0);
    assert_eq!(
        to_node_error(&launch(&long)),
        DecodeError::TrailingBytes { count: 1 }
    );
    assert!(
        decode_whole(Direction::ToNode, &launch(&launch_of(&0u32.to_be_bytes())))
            .1
            .is_ok()
    );
}

#[test]
fn a_queue_reply_of_an_unknown_answer() {
    // Status OK, then answer tag 5 (past ELAPSED's 4), or a READY whose flag is 2.
    let bytes = frame(
        PROTOCOL_VERSION,
        REPLY,
        Opcode::QueueOp as u16,
        1,
        &[0, 0, 5],
    );
    assert_eq!(
        to_client_error(&bytes),
        DecodeError::InvalidValue {
            field: "answer",
            value: 5
        }
    );
    let bytes = frame(
        PROTOCOL_VERSION,
        REPLY,
        Opcode::QueueOp as u16,
        1,
        &[0, 0, 3, 2],
    );
    assert!(matches!(
        to_client_error(&bytes),
        DecodeError::InvalidValue { field: "ready", .. }
    ));
    // A STREAM answer cut inside its id.
    let bytes = frame(
        PROTOCOL_VERSION,
        REPLY,
        Opcode::QueueOp as u16,
        1,
        &[0, 0, 1, 0, 0],
    );
    assert_eq!(
        to_client_error(&bytes),
        DecodeError::Truncated { field: "stream" }
    );
}

#[test]
fn chunk_lengths_out_of_range() {
    let mut stream = request_bytes(
        1,
        &Request::MemWrite {
            session: SessionId(1),
            buffer: BufferId(2),
            offset: 0,
            len: 10,
        },
    );
    let mut empty = stream.clone();
    empty.extend_from_slice(&header_only(DATA, Opcode::MemWrite, 0));
    assert_eq!(
        to_node_error(&empty),
        DecodeError::BadChunkLength {
            len: 0,
            limit: MAX_CHUNK
        }
    );
    stream.extend_from_slice(&header_only(DATA, Opcode::MemWrite, MAX_CHUNK + 1));
    assert_eq!(
        to_node_error(&stream),
        DecodeError::BadChunkLength {
            len: MAX_CHUNK + 1,
            limit: MAX_CHUNK
        }
    );
}

#[test]
fn streamed_total_over_the_receivers_limit() {
    let write = Request::MemWrite {
        session: SessionId(1),
        buffer: BufferId(2),
        offset: 0,
        len: 4097,
    };
    let mut decoder = Decoder::for_node(DecoderConfig {
        max_stream_bytes: 4096,
    });
    let (events, end) = decode_in_pieces(&mut decoder, &request_bytes(1, &write), &[5]);
    assert!(events.is_empty());
    assert_eq!(
        end,
        Err(DecodeError::StreamTooLong {
            field: "len",
            len: 4097,
            limit: 4096
        })
    );
    // The same on the client's side, for a reply.
    let read = Reply::MemRead { len: u64::MAX };
    assert_eq!(
        to_client_error(&reply_bytes(1, &read)),
        DecodeError::StreamTooLong {
            field: "len",
            len: u64::MAX,
            limit: DEFAULT_MAX_STREAM_BYTES
        }
    );
    // A write or a read on a stream announces its total as MEM_WRITE's and MEM_READ's do.
    let write = Request::StreamWrite {
        stream: 3,
        session: SessionId(1),
        buffer: BufferId(2),
        offset: 0,
        len: 4097,
    };
    let mut decoder = Decoder::for_node(DecoderConfig {
        max_stream_bytes: 4096,
    });
    let (events, end) = decode_in_pieces(&mut decoder, &request_bytes(1, &write), &[5]);
    assert!(events.is_empty());
    assert_eq!(
        end,
        Err(DecodeError::StreamTooLong {
            field: "len",
            len: 4097,
            limit: 4096
        })
    );
    let read = Reply::StreamRead { len: u64::MAX };
    assert_eq!(
        to_client_error(&reply_bytes(1, &read)),
        DecodeError::StreamTooLong {
            field: "len",
            len: u64::MAX,
            limit: DEFAULT_MAX_STREAM_BYTES
        }
    );
}

// ---- bodies ----

#[test]
fn truncated_field() {
    // SYNC's session is 8 bytes; give 5.
    let bytes = frame(
        PROTOCOL_VERSION,
        0,
        Opcode::Sync as u16,
        1,
        &[0, 0, 0, 0, 7],
    );
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::Truncated { field: "session" }
    );
    // A string announcing more than the body holds (within its limit).
    let mut body = vec![0, 0, 0, 40];
    body.extend_from_slice(b"short");
    let bytes = frame(PROTOCOL_VERSION, 0, Opcode::DeployPush as u16, 1, &body);
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::Truncated { field: "manifest" }
    );
}

#[test]
fn trailing_bytes() {
    let mut body = sync_body();
    body.push(0);
    let bytes = frame(PROTOCOL_VERSION, 0, Opcode::Sync as u16, 1, &body);
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::TrailingBytes { count: 1 }
    );
    // An empty request with a body.
    let bytes = frame(
        PROTOCOL_VERSION,
        0,
        Opcode::GetInventory as u16,
        1,
        &[1, 2, 3],
    );
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::TrailingBytes { count: 3 }
    );
    // An OK reply that has no fields, with one.
    let bytes = frame(PROTOCOL_VERSION, REPLY, Opcode::Free as u16, 1, &[0, 0, 9]);
    assert_eq!(
        to_client_error(&bytes),
        DecodeError::TrailingBytes { count: 1 }
    );
}

fn error_body(status: u16, message: &[u8], failed: Option<(u32, u16)>) -> Vec<u8> {
    let mut body = status.to_be_bytes().to_vec();
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(message);
    match failed {
        None => body.push(0),
        Some((id, opcode)) => {
            body.push(1);
            body.extend_from_slice(&id.to_be_bytes());
            body.extend_from_slice(&opcode.to_be_bytes());
        }
    }
    body
}

#[test]
fn error_message_over_its_cap() {
    let at_cap = frame(
        PROTOCOL_VERSION,
        REPLY,
        Opcode::Sync as u16,
        1,
        &error_body(12, &[b'x'; MAX_ERROR_MESSAGE], None),
    );
    assert_eq!(decode_whole(Direction::ToClient, &at_cap).1, Ok(()));
    let over = frame(
        PROTOCOL_VERSION,
        REPLY,
        Opcode::Sync as u16,
        1,
        &error_body(12, &[b'x'; MAX_ERROR_MESSAGE + 1], None),
    );
    assert_eq!(
        to_client_error(&over),
        DecodeError::FieldTooLong {
            field: "message",
            len: 1025,
            limit: MAX_ERROR_MESSAGE as u64
        }
    );
}

#[test]
fn peer_names_over_their_cap() {
    let hello = Request::Hello {
        min_version: 1,
        max_version: 1,
        agent: "a".repeat(MAX_PEER_NAME + 1),
    };
    assert_eq!(
        encode_request(1, &hello, &mut Vec::new()),
        Err(EncodeError::FieldTooLong {
            field: "agent",
            len: 257,
            limit: 256
        })
    );
    let mut body = vec![1, 1];
    body.extend_from_slice(&(MAX_PEER_NAME as u32 + 1).to_be_bytes());
    body.extend_from_slice(&[b'a'; MAX_PEER_NAME + 1]);
    let bytes = frame(1, 0, Opcode::Hello as u16, 1, &body);
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::FieldTooLong {
            field: "agent",
            len: 257,
            limit: 256
        }
    );
}

#[test]
fn unknown_and_reserved_statuses() {
    for status in [1, 5, 20, 0xFFFF] {
        let bytes = frame(
            PROTOCOL_VERSION,
            REPLY,
            Opcode::Sync as u16,
            1,
            &error_body(status, b"", None),
        );
        assert_eq!(
            to_client_error(&bytes),
            DecodeError::UnknownStatus { status }
        );
    }
}

#[test]
fn a_cause_only_in_gpu_submit_replies_and_only_a_known_status() {
    let mut with_cause = error_body(4, b"fault", None);
    with_cause.extend_from_slice(&[1, 0, 12]);
    assert_eq!(
        decode_whole(
            Direction::ToClient,
            &frame(
                PROTOCOL_VERSION,
                REPLY,
                Opcode::GpuSubmit as u16,
                9,
                &with_cause
            )
        )
        .1,
        Ok(())
    );
    // Elsewhere the byte is one too many.
    assert_eq!(
        to_client_error(&frame(
            PROTOCOL_VERSION,
            REPLY,
            Opcode::Sync as u16,
            9,
            &with_cause
        )),
        DecodeError::TrailingBytes { count: 3 }
    );
    // GPU_SUBMIT's failed reply must say whether a cause follows.
    let without = error_body(4, b"fault", None);
    assert_eq!(
        to_client_error(&frame(
            PROTOCOL_VERSION,
            REPLY,
            Opcode::GpuSubmit as u16,
            9,
            &without
        )),
        DecodeError::Truncated { field: "cause" }
    );
    let mut unknown = error_body(4, b"fault", None);
    unknown.extend_from_slice(&[1, 0, 5]);
    assert_eq!(
        to_client_error(&frame(
            PROTOCOL_VERSION,
            REPLY,
            Opcode::GpuSubmit as u16,
            9,
            &unknown
        )),
        DecodeError::UnknownStatus { status: 5 }
    );
    let mut error = ErrorReply::new(ErrorCode::LaunchFailed, "fault");
    error.cause = Some(ErrorCode::KernelFault);
    let reply = Reply::Error {
        opcode: Opcode::LeaseAlloc,
        error,
    };
    assert!(matches!(
        encode_reply(9, &reply, &mut Vec::new()),
        Err(EncodeError::InvalidValue { field: "cause", .. })
    ));
}

#[test]
fn failed_op_only_in_barrier_replies_and_only_pipelined() {
    let named = error_body(12, b"fault", Some((3, Opcode::Launch as u16)));
    assert_eq!(
        decode_whole(
            Direction::ToClient,
            &frame(PROTOCOL_VERSION, REPLY, Opcode::Sync as u16, 9, &named)
        )
        .1,
        Ok(())
    );
    assert_eq!(
        decode_whole(
            Direction::ToClient,
            &frame(PROTOCOL_VERSION, REPLY, Opcode::MemRead as u16, 9, &named)
        )
        .1,
        Ok(())
    );
    assert_eq!(
        to_client_error(&frame(
            PROTOCOL_VERSION,
            REPLY,
            Opcode::MemAlloc as u16,
            9,
            &named
        )),
        DecodeError::InvalidValue {
            field: "failed_op",
            value: 1
        }
    );
    let not_pipelined = error_body(12, b"fault", Some((3, Opcode::MemCopy as u16)));
    assert_eq!(
        to_client_error(&frame(
            PROTOCOL_VERSION,
            REPLY,
            Opcode::Sync as u16,
            9,
            &not_pipelined
        )),
        DecodeError::InvalidValue {
            field: "failed_op.opcode",
            value: Opcode::MemCopy as u64
        }
    );
    let unknown = error_body(12, b"fault", Some((3, 0x7777)));
    assert_eq!(
        to_client_error(&frame(
            PROTOCOL_VERSION,
            REPLY,
            Opcode::Sync as u16,
            9,
            &unknown
        )),
        DecodeError::InvalidValue {
            field: "failed_op.opcode",
            value: 0x7777
        }
    );
    // And the encoder will not write them.
    let mut error = ErrorReply::new(ErrorCode::KernelFault, "fault");
    error.failed_op = Some(FailedOp {
        request_id: 3,
        opcode: Opcode::Launch,
    });
    let reply = Reply::Error {
        opcode: Opcode::MemAlloc,
        error: error.clone(),
    };
    assert!(matches!(
        encode_reply(9, &reply, &mut Vec::new()),
        Err(EncodeError::InvalidValue {
            field: "failed_op",
            ..
        })
    ));
    error.failed_op = Some(FailedOp {
        request_id: 3,
        opcode: Opcode::Free,
    });
    let reply = Reply::Error {
        opcode: Opcode::Sync,
        error,
    };
    assert!(matches!(
        encode_reply(9, &reply, &mut Vec::new()),
        Err(EncodeError::InvalidValue {
            field: "failed_op.opcode",
            ..
        })
    ));
}

#[test]
fn goaway_rules() {
    let good = frame(
        PROTOCOL_VERSION,
        REPLY,
        Opcode::GoAway as u16,
        0,
        &error_body(19, b"draining", None),
    );
    assert_eq!(
        decode_whole(Direction::ToClient, &good).0,
        vec![Owned::GoAway(ErrorReply::new(
            ErrorCode::Draining,
            "draining"
        ))]
    );
    let with_id = frame(
        PROTOCOL_VERSION,
        REPLY,
        Opcode::GoAway as u16,
        4,
        &error_body(19, b"", None),
    );
    assert_eq!(
        to_client_error(&with_id),
        DecodeError::InvalidValue {
            field: "request id",
            value: 4
        }
    );
    let ok_status = frame(PROTOCOL_VERSION, REPLY, Opcode::GoAway as u16, 0, &[0, 0]);
    assert_eq!(
        to_client_error(&ok_status),
        DecodeError::InvalidValue {
            field: "status",
            value: 0
        }
    );
    let named = frame(
        PROTOCOL_VERSION,
        REPLY,
        Opcode::GoAway as u16,
        0,
        &error_body(17, b"", Some((1, Opcode::Launch as u16))),
    );
    assert_eq!(
        to_client_error(&named),
        DecodeError::InvalidValue {
            field: "failed_op",
            value: 1
        }
    );
    // GOAWAY never streams data.
    let data = frame(
        PROTOCOL_VERSION,
        REPLY | DATA,
        Opcode::GoAway as u16,
        0,
        &[1],
    );
    assert_eq!(
        to_client_error(&data),
        DecodeError::WrongDirection {
            opcode: Opcode::GoAway,
            direction: "reply"
        }
    );
}

#[test]
fn invalid_values() {
    // DEPLOY_HAS's reply: present must be 0 or 1.
    let bytes = frame(
        PROTOCOL_VERSION,
        REPLY,
        Opcode::DeployHas as u16,
        1,
        &[0, 0, 2],
    );
    assert_eq!(
        to_client_error(&bytes),
        DecodeError::InvalidValue {
            field: "present",
            value: 2
        }
    );
    // LEASE_ALLOC's device option tag.
    let mut body = [0u8; 12].to_vec();
    body.push(2);
    let bytes = frame(PROTOCOL_VERSION, 0, Opcode::LeaseAlloc as u16, 1, &body);
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::InvalidValue {
            field: "device",
            value: 2
        }
    );
    // A LAUNCH argument with tag 9 (the first unknown one).
    let mut launch = request_bytes(
        1,
        &Request::Launch(Launch {
            session: SessionId(1),
            module: ModuleId(2),
            kernel: 0,
            grid: [1; 3],
            block: [1; 3],
            shared_mem_bytes: 0,
            args: vec![KernelArg::U32(5)],
        }),
    );
    let tag_at = launch.len() - 5;
    launch[tag_at] = 9;
    assert_eq!(
        to_node_error(&launch),
        DecodeError::InvalidValue {
            field: "args[].tag",
            value: 9
        }
    );
}

#[test]
fn invalid_utf8_and_digests() {
    let mut body = vec![1, 1, 0, 0, 0, 2, 0xC3, 0x28];
    let bytes = frame(1, 0, Opcode::Hello as u16, 1, &body);
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::InvalidUtf8 { field: "agent" }
    );

    let upper = "AB".repeat(32);
    body = (upper.len() as u32).to_be_bytes().to_vec();
    body.extend_from_slice(upper.as_bytes());
    let bytes = frame(PROTOCOL_VERSION, 0, Opcode::DeployHas as u16, 1, &body);
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::InvalidDigest {
            len: DIGEST_HEX_LEN
        }
    );
    let short = "ab".repeat(31);
    body = (short.len() as u32).to_be_bytes().to_vec();
    body.extend_from_slice(short.as_bytes());
    let bytes = frame(PROTOCOL_VERSION, 0, Opcode::DeployHas as u16, 1, &body);
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::InvalidDigest {
            len: DIGEST_HEX_LEN
        }
    );
}

// ---- streamed data ----

fn write_header(id: u32, len: u64) -> Vec<u8> {
    request_bytes(
        id,
        &Request::MemWrite {
            session: SessionId(1),
            buffer: BufferId(2),
            offset: 0,
            len,
        },
    )
}

#[test]
fn data_with_nothing_announced() {
    let bytes = frame(PROTOCOL_VERSION, DATA, Opcode::MemWrite as u16, 3, &[1, 2]);
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::UnexpectedData {
            opcode: Opcode::MemWrite,
            request_id: 3
        }
    );
    // A failed reply announces nothing, even for an op whose OK reply streams.
    let mut bytes = frame(
        PROTOCOL_VERSION,
        REPLY,
        Opcode::MemRead as u16,
        3,
        &error_body(11, b"out of bounds", None),
    );
    bytes.extend_from_slice(&frame(
        PROTOCOL_VERSION,
        REPLY | DATA,
        Opcode::MemRead as u16,
        3,
        &[1],
    ));
    assert_eq!(
        to_client_error(&bytes),
        DecodeError::UnexpectedData {
            opcode: Opcode::MemRead,
            request_id: 3
        }
    );
}

#[test]
fn a_message_while_data_is_due() {
    let mut bytes = write_header(3, 10);
    bytes.extend_from_slice(&frame(
        PROTOCOL_VERSION,
        DATA,
        Opcode::MemWrite as u16,
        3,
        &[0; 4],
    ));
    bytes.extend_from_slice(&frame(
        PROTOCOL_VERSION,
        0,
        Opcode::Sync as u16,
        4,
        &sync_body(),
    ));
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::ExpectedData {
            opcode: Opcode::Sync,
            remaining: 6
        }
    );
}

#[test]
fn data_of_another_message() {
    let mut bytes = write_header(3, 10);
    bytes.extend_from_slice(&frame(
        PROTOCOL_VERSION,
        DATA,
        Opcode::MemWrite as u16,
        4,
        &[0; 4],
    ));
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::MismatchedData {
            opcode: Opcode::MemWrite,
            request_id: 4,
            open_opcode: Opcode::MemWrite,
            open_request_id: 3
        }
    );
    let mut bytes = write_header(3, 10);
    bytes.extend_from_slice(&frame(
        PROTOCOL_VERSION,
        DATA,
        Opcode::DeployPush as u16,
        3,
        &[0; 4],
    ));
    assert!(matches!(
        to_node_error(&bytes),
        DecodeError::MismatchedData {
            opcode: Opcode::DeployPush,
            ..
        }
    ));
}

#[test]
fn data_past_what_was_announced() {
    let mut bytes = write_header(3, 10);
    bytes.extend_from_slice(&frame(
        PROTOCOL_VERSION,
        DATA,
        Opcode::MemWrite as u16,
        3,
        &[0; 6],
    ));
    bytes.extend_from_slice(&frame(
        PROTOCOL_VERSION,
        DATA,
        Opcode::MemWrite as u16,
        3,
        &[0; 5],
    ));
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::ChunkOverrun {
            len: 5,
            remaining: 4
        }
    );
    // Once all of it has come, more is data with nothing announced.
    let mut bytes = write_header(3, 4);
    bytes.extend_from_slice(&frame(
        PROTOCOL_VERSION,
        DATA,
        Opcode::MemWrite as u16,
        3,
        &[0; 4],
    ));
    bytes.extend_from_slice(&frame(
        PROTOCOL_VERSION,
        DATA,
        Opcode::MemWrite as u16,
        3,
        &[0; 1],
    ));
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::UnexpectedData {
            opcode: Opcode::MemWrite,
            request_id: 3
        }
    );
}

#[test]
fn the_encoder_refuses_data_past_what_was_announced() {
    let mut out = Vec::new();
    let mut data = encode_request(
        3,
        &Request::DeployRun {
            digest: Digest([7; 32]),
            input_len: 5,
        },
        &mut out,
    )
    .unwrap()
    .unwrap();
    let before = out.len();
    assert_eq!(
        data.encode(&[0; 6], &mut out),
        Err(EncodeError::DataOverrun {
            len: 6,
            remaining: 5
        })
    );
    assert_eq!(out.len(), before);
    assert_eq!(
        data.chunk_header(0),
        Err(EncodeError::BadChunkLength {
            len: 0,
            limit: MAX_CHUNK
        })
    );
    assert_eq!(
        data.chunk_header(6),
        Err(EncodeError::DataOverrun {
            len: 6,
            remaining: 5
        })
    );
    data.encode(&[1, 2, 3, 4, 5], &mut out).unwrap();
    assert!(data.is_done());
    // Nothing announced, no encoder.
    let nothing = Request::MemWrite {
        session: SessionId(1),
        buffer: BufferId(1),
        offset: 0,
        len: 0,
    };
    assert_eq!(encode_request(4, &nothing, &mut out), Ok(None));
}

// ---- the end of a stream ----

#[test]
fn a_stream_that_ends_mid_frame() {
    let sync = frame(PROTOCOL_VERSION, 0, Opcode::Sync as u16, 1, &sync_body());
    let cases: [(&[u8], &str); 3] = [
        (&sync[..5], "inside a frame header"),
        (&sync[..FRAME_HEADER_LEN + 3], "inside a frame body"),
        (&sync[..sync.len() - 1], "inside a frame body"),
    ];
    for (bytes, place) in cases {
        assert_eq!(
            decode_whole(Direction::ToNode, bytes).1,
            Err(DecodeError::UnexpectedEnd { place })
        );
    }
    let mut write = write_header(3, 10);
    assert_eq!(
        decode_whole(Direction::ToNode, &write).1,
        Err(DecodeError::UnexpectedEnd {
            place: "with streamed data still due"
        })
    );
    write.extend_from_slice(
        &frame(PROTOCOL_VERSION, DATA, Opcode::MemWrite as u16, 3, &[0; 10])
            [..FRAME_HEADER_LEN + 4],
    );
    assert_eq!(
        decode_whole(Direction::ToNode, &write).1,
        Err(DecodeError::UnexpectedEnd {
            place: "inside a data frame"
        })
    );
}

#[test]
fn the_first_error_sticks() {
    let mut decoder = Decoder::for_node(DecoderConfig::default());
    let bad = frame(8, 0, Opcode::Sync as u16, 1, &sync_body());
    let err = decoder.decode(&bad).unwrap_err();
    assert_eq!(
        err,
        DecodeError::UnsupportedVersion {
            version: 8,
            supported: 10
        }
    );
    let good = frame(PROTOCOL_VERSION, 0, Opcode::Sync as u16, 1, &sync_body());
    assert_eq!(decoder.decode(&good), Err(err.clone()));
    assert_eq!(decoder.finish(), Err(err));
}

// ---- encoding limits ----

#[test]
fn oversized_fields_are_not_encoded_and_leave_the_buffer_as_it_was() {
    let mut out = vec![0xAA];
    let load = Request::ModuleLoad {
        session: SessionId(1),
        ptx: vec![0; MAX_MODULE_BYTES + 1],
    };
    assert_eq!(
        encode_request(1, &load, &mut out),
        Err(EncodeError::FieldTooLong {
            field: "ptx",
            len: MAX_MODULE_BYTES as u64 + 1,
            limit: MAX_MODULE_BYTES as u64
        })
    );
    assert_eq!(out, [0xAA]);
}

#[test]
fn a_body_over_the_frame_limit_is_not_encoded() {
    // Each field within its limit, the whole over MAX_FRAME_BODY.
    let param = KernelParam {
        name: "p".repeat(MAX_NAME),
        size: 8,
        align: 8,
        ptx_type: None,
        pointer: true,
    };
    let kernel = Kernel {
        name: "k".repeat(MAX_NAME),
        params: vec![param],
    };
    let module = LoadedModule {
        module: ModuleId(1),
        kernels: vec![kernel; MAX_KERNELS],
    };
    let mut out = Vec::new();
    let err = encode_reply(1, &Reply::ModuleLoad(module), &mut out).unwrap_err();
    assert!(
        matches!(
            err,
            EncodeError::FrameTooLong {
                limit: MAX_FRAME_BODY,
                ..
            }
        ),
        "{err}"
    );
    assert!(out.is_empty());
}

#[test]
fn replies_for_ops_without_one_are_not_encoded() {
    for opcode in [Opcode::Launch, Opcode::MemWrite, Opcode::GoAway] {
        let reply = Reply::Error {
            opcode,
            error: ErrorReply::new(ErrorCode::Internal, "x"),
        };
        assert!(matches!(
            encode_reply(1, &reply, &mut Vec::new()),
            Err(EncodeError::InvalidValue {
                field: "opcode",
                ..
            })
        ));
    }
}

#[test]
fn messages_name_the_field_and_the_limit() {
    let err = DecodeError::FieldTooLong {
        field: "ptx",
        len: 1 << 32,
        limit: MAX_MODULE_BYTES as u64,
    };
    assert_eq!(
        err.to_string(),
        "field ptx of 4294967296 bytes is over the limit of 16777216"
    );
    let err = DecodeError::FrameTooLong {
        len: u32::MAX,
        limit: MAX_FRAME_BODY,
    };
    assert_eq!(
        err.to_string(),
        "frame body of 4294967295 bytes is over the limit of 17825792"
    );
    let err = DecodeError::WrongDirection {
        opcode: Opcode::Launch,
        direction: "reply",
    };
    assert_eq!(err.to_string(), "LAUNCH (0x0604) is not sent as a reply");
}

#[test]
fn grant_rights_outside_the_defined_bits() {
    let mut body = Vec::new();
    body.extend_from_slice(&(1u64 << 20).to_be_bytes()); // memory
    body.extend_from_slice(&(1u64 << 30).to_be_bytes()); // max_vram
    body.extend_from_slice(&1u32.to_be_bytes()); // max_leases
    body.extend_from_slice(&60_000u64.to_be_bytes()); // max_lease_ms
    body.push(rights::ALL);
    let good = frame(PROTOCOL_VERSION, 0, Opcode::Grant as u16, 1, &body);
    assert_eq!(decode_whole(Direction::ToNode, &good).1, Ok(()));
    *body.last_mut().unwrap() = 0x20;
    assert_eq!(
        to_node_error(&frame(PROTOCOL_VERSION, 0, Opcode::Grant as u16, 1, &body)),
        DecodeError::InvalidValue {
            field: "rights",
            value: 0x20
        }
    );
    let grant = Grant {
        memory: 1,
        max_vram: 1,
        max_leases: 1,
        max_lease_ms: 1,
        rights: 0x80,
    };
    assert!(matches!(
        encode_request(1, &Request::Grant(grant), &mut Vec::new()),
        Err(EncodeError::InvalidValue {
            field: "rights",
            ..
        })
    ));
}

#[test]
fn gpu_submit_input_over_its_cap() {
    let mut submit = GpuSubmit {
        lease: LeaseId(1),
        ptx: b".version 8.0".to_vec(),
        kernel: "k".into(),
        grid: [1; 3],
        block: [1; 3],
        args: vec![],
        output_size: 4,
        output_offset: 0,
        input: vec![7; MAX_SUBMIT_INPUT + 1],
    };
    assert_eq!(
        encode_request(1, &Request::GpuSubmit(submit.clone()), &mut Vec::new()),
        Err(EncodeError::FieldTooLong {
            field: "input",
            len: MAX_SUBMIT_INPUT as u64 + 1,
            limit: MAX_SUBMIT_INPUT as u64
        })
    );
    // At the cap it goes; one byte over, announced by a peer, is refused before it is read.
    submit.input.truncate(MAX_SUBMIT_INPUT);
    let mut out = Vec::new();
    encode_request(1, &Request::GpuSubmit(submit.clone()), &mut out).unwrap();
    assert_eq!(decode_whole(Direction::ToNode, &out).1, Ok(()));
    submit.input.clear();
    let mut out = Vec::new();
    encode_request(1, &Request::GpuSubmit(submit), &mut out).unwrap();
    let mut body = out[FRAME_HEADER_LEN..out.len() - 4].to_vec();
    body.extend_from_slice(&(MAX_SUBMIT_INPUT as u32 + 1).to_be_bytes());
    let bytes = frame(PROTOCOL_VERSION, 0, Opcode::GpuSubmit as u16, 1, &body);
    assert_eq!(
        to_node_error(&bytes),
        DecodeError::FieldTooLong {
            field: "input",
            len: MAX_SUBMIT_INPUT as u64 + 1,
            limit: MAX_SUBMIT_INPUT as u64
        }
    );
}

#[test]
fn a_stream_read_reports_a_stream_op_as_a_barrier_does() {
    // STREAM_READ's failed reply may name a STREAM_WRITE or STREAM_LAUNCH (or a LAUNCH) that
    // failed; a QUEUE_OP's may not, nor may any reply name STREAM_READ itself.
    for opcode in [Opcode::StreamWrite, Opcode::StreamLaunch, Opcode::Launch] {
        let named = error_body(7, b"no", Some((3, opcode as u16)));
        let bytes = frame(
            PROTOCOL_VERSION,
            REPLY,
            Opcode::StreamRead as u16,
            9,
            &named,
        );
        assert_eq!(decode_whole(Direction::ToClient, &bytes).1, Ok(()));
        let bytes = frame(PROTOCOL_VERSION, REPLY, Opcode::QueueOp as u16, 9, &named);
        assert_eq!(
            to_client_error(&bytes),
            DecodeError::InvalidValue {
                field: "failed_op",
                value: 1
            }
        );
    }
    let named = error_body(7, b"no", Some((3, Opcode::StreamRead as u16)));
    let bytes = frame(PROTOCOL_VERSION, REPLY, Opcode::Sync as u16, 9, &named);
    assert_eq!(
        to_client_error(&bytes),
        DecodeError::InvalidValue {
            field: "failed_op.opcode",
            value: Opcode::StreamRead as u16 as u64
        }
    );
}
