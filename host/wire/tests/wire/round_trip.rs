//! Round trips: every message (and the data it streams) decodes to what was encoded, and a byte
//! stream means the same whatever pieces it is cut into, on either side.

use crate::support::*;
use proptest::collection::vec;
use proptest::prelude::*;
use tasklet_wire::*;

fn encode_requests(items: &[(RequestId, Request, Vec<u8>)], data_cuts: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    for (id, request, data) in items {
        let encoder = encode_request(*id, request, &mut out).unwrap();
        encode_data(encoder, data, data_cuts, &mut out);
    }
    out
}

fn encode_replies(items: &[(RequestId, Reply, Vec<u8>)], data_cuts: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    for (id, reply, data) in items {
        let encoder = encode_reply(*id, reply, &mut out).unwrap();
        encode_data(encoder, data, data_cuts, &mut out);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_request_round_trips((request, data) in request_with_data(), id in any::<u32>()) {
        let items = [(id, request, data)];
        let bytes = encode_requests(&items, &[usize::MAX]);
        let (events, end) = decode_whole(Direction::ToNode, &bytes);
        prop_assert_eq!(end, Ok(()));
        prop_assert_eq!(events, expected_requests(&items));
    }

    #[test]
    fn every_reply_round_trips((reply, data) in reply_with_data(), id in any::<u32>()) {
        let items = [(id, reply, data)];
        let bytes = encode_replies(&items, &[usize::MAX]);
        let (events, end) = decode_whole(Direction::ToClient, &bytes);
        prop_assert_eq!(end, Ok(()));
        prop_assert_eq!(events, expected_replies(&items));
    }

    #[test]
    fn goaway_round_trips(code in error_code(), message in text(300)) {
        let error = ErrorReply::new(code, message);
        let mut bytes = Vec::new();
        encode_goaway(&error, &mut bytes).unwrap();
        let (events, end) = decode_whole(Direction::ToClient, &bytes);
        prop_assert_eq!(end, Ok(()));
        prop_assert_eq!(events, vec![Owned::GoAway(error)]);
    }

    #[test]
    fn request_streams_mean_the_same_in_any_pieces(
        items in vec((any::<u32>(), request_with_data()), 1..12),
        data_cuts in cuts(),
        feed_cuts in cuts(),
    ) {
        let items: Vec<_> = items.into_iter().map(|(id, (request, data))| (id, request, data)).collect();
        let bytes = encode_requests(&items, &data_cuts);
        let (whole, end) = decode_whole(Direction::ToNode, &bytes);
        prop_assert_eq!(end, Ok(()));
        prop_assert_eq!(&whole, &expected_requests(&items));

        let mut decoder = Decoder::for_node(DecoderConfig::default());
        let (pieces, end) = decode_in_pieces(&mut decoder, &bytes, &feed_cuts);
        prop_assert_eq!(end, Ok(()));
        prop_assert_eq!(&pieces, &whole);

        let mut decoder = Decoder::for_node(DecoderConfig::default());
        let (bytewise, end) = decode_in_pieces(&mut decoder, &bytes, &[1]);
        prop_assert_eq!(end, Ok(()));
        prop_assert_eq!(&bytewise, &whole);
    }

    #[test]
    fn reply_streams_mean_the_same_in_any_pieces(
        items in vec((any::<u32>(), reply_with_data()), 1..12),
        goaway in proptest::option::of((error_code(), text(40))),
        data_cuts in cuts(),
        feed_cuts in cuts(),
    ) {
        let items: Vec<_> = items.into_iter().map(|(id, (reply, data))| (id, reply, data)).collect();
        let mut bytes = encode_replies(&items, &data_cuts);
        let mut expected = expected_replies(&items);
        if let Some((code, message)) = goaway {
            let error = ErrorReply::new(code, message);
            encode_goaway(&error, &mut bytes).unwrap();
            expected.push(Owned::GoAway(error));
        }
        let (whole, end) = decode_whole(Direction::ToClient, &bytes);
        prop_assert_eq!(end, Ok(()));
        prop_assert_eq!(&whole, &expected);

        let mut decoder = Decoder::for_client(DecoderConfig::default());
        let (pieces, end) = decode_in_pieces(&mut decoder, &bytes, &feed_cuts);
        prop_assert_eq!(end, Ok(()));
        prop_assert_eq!(&pieces, &whole);

        let mut decoder = Decoder::for_client(DecoderConfig::default());
        let (bytewise, end) = decode_in_pieces(&mut decoder, &bytes, &[1]);
        prop_assert_eq!(end, Ok(()));
        prop_assert_eq!(&bytewise, &whole);
    }

    /// Data events hand out the bytes as they arrive: their `remaining` counts down to 0 exactly
    /// at the last byte, however the input is cut.
    #[test]
    fn data_remaining_counts_down(len in 1usize..5000, data_cuts in cuts(), feed_cuts in cuts()) {
        let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        let write = Request::MemWrite { session: SessionId(1), buffer: BufferId(2), offset: 3, len: len as u64 };
        let mut bytes = Vec::new();
        let encoder = encode_request(9, &write, &mut bytes).unwrap();
        encode_data(encoder, &data, &data_cuts, &mut bytes);

        let mut decoder = Decoder::for_node(DecoderConfig::default());
        let mut got = Vec::new();
        let mut rest = &bytes[..];
        let mut cut = feed_cuts.iter().copied().cycle();
        while !rest.is_empty() {
            let size = cut.next().unwrap_or(1).clamp(1, rest.len());
            let (mut piece, after) = rest.split_at(size);
            rest = after;
            while !piece.is_empty() {
                let (used, event) = decoder.decode(piece).unwrap();
                piece = &piece[used..];
                if let Some(Event::Data { request_id, opcode, bytes, remaining }) = event {
                    prop_assert_eq!((request_id, opcode), (9, Opcode::MemWrite));
                    prop_assert!(!bytes.is_empty());
                    got.extend_from_slice(bytes);
                    prop_assert_eq!(remaining, (len - got.len()) as u64);
                    prop_assert_eq!(decoder.in_data(), remaining > 0);
                }
            }
        }
        decoder.finish().unwrap();
        prop_assert_eq!(got, data);
    }
}

#[test]
fn error_message_is_cut_at_a_char_boundary_when_encoded() {
    let long = "é".repeat(limits::MAX_ERROR_MESSAGE); // 2 bytes each: twice the cap
    let reply = Reply::Error {
        opcode: Opcode::MemAlloc,
        error: ErrorReply::new(ErrorCode::Internal, long.clone()),
    };
    let mut bytes = Vec::new();
    encode_reply(4, &reply, &mut bytes).unwrap();
    let (events, end) = decode_whole(Direction::ToClient, &bytes);
    end.unwrap();
    let [Owned::Reply(4, Reply::Error { error, .. })] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(error.message.len(), limits::MAX_ERROR_MESSAGE);
    assert!(long.starts_with(&error.message));
}

/// A 256 MiB MEM_WRITE goes through in 1 MiB frames without either end holding it whole: the
/// decoder hands out every byte, in order, from a reused input buffer.
#[test]
fn a_256_mib_write_streams_through() {
    const TOTAL: u64 = 256 << 20;
    const PERIOD: usize = 251;
    // Byte i of the data is i % PERIOD; any span of it is a slice of `pattern`.
    let chunk_len = limits::MAX_CHUNK as usize;
    let pattern: Vec<u8> = (0..chunk_len + PERIOD)
        .map(|i| (i % PERIOD) as u8)
        .collect();
    let span = |at: u64, len: usize| &pattern[(at % PERIOD as u64) as usize..][..len];

    let write = Request::MemWrite {
        session: SessionId(5),
        buffer: BufferId(6),
        offset: 0,
        len: TOTAL,
    };
    let mut wire = Vec::new();
    let mut encoder = encode_request(77, &write, &mut wire).unwrap().unwrap();
    let mut decoder = Decoder::for_node(DecoderConfig {
        max_stream_bytes: TOTAL,
    });
    let (mut sent, mut received, mut frames) = (0u64, 0u64, 0);
    while !encoder.is_done() {
        encoder.encode(span(sent, chunk_len), &mut wire).unwrap();
        sent += chunk_len as u64;
        frames += 1;
        let mut input = &wire[..];
        while !input.is_empty() {
            let (used, event) = decoder.decode(input).unwrap();
            input = &input[used..];
            match event {
                Some(Event::Request { request, .. }) => assert_eq!(request, write),
                Some(Event::Data { bytes, .. }) => {
                    assert!(
                        bytes == span(received, bytes.len()),
                        "data differs at byte {received}"
                    );
                    received += bytes.len() as u64;
                }
                None => {}
                other => panic!("{other:?}"),
            }
        }
        wire.clear();
    }
    decoder.finish().unwrap();
    assert_eq!((received, frames), (TOTAL, 256));
}

/// The properties above are only as good as the strategies: every request kind, and every reply
/// kind both OK and failed, must come up.
#[test]
fn the_strategies_cover_every_message_kind() {
    use proptest::strategy::ValueTree;
    use std::collections::HashSet;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (requests, replies) = (request(), reply());
    let mut seen_requests = HashSet::new();
    let mut seen_replies = HashSet::new();
    for _ in 0..4000 {
        seen_requests.insert(requests.new_tree(&mut runner).unwrap().current().opcode());
        let reply = replies.new_tree(&mut runner).unwrap().current();
        seen_replies.insert((reply.opcode(), matches!(reply, Reply::Error { .. })));
    }
    let all_requests: HashSet<_> = Opcode::ALL
        .into_iter()
        .filter(|op| op.is_request())
        .collect();
    assert_eq!(seen_requests, all_requests);
    let all_replies: HashSet<_> = Opcode::ALL
        .into_iter()
        .filter(|op| op.has_reply())
        .flat_map(|op| [(op, false), (op, true)])
        .collect();
    assert_eq!(seen_replies, all_replies);
}

/// A frame body cut over several reads is pending, with its announced length, from its first
/// bytes to its last: what a node counts against a connection's budget meanwhile.
#[test]
fn a_body_gathered_over_reads_is_pending_with_its_length() {
    let request = Request::ModuleLoad {
        session: SessionId(7),
        ptx: vec![b'x'; 100_000],
    };
    let mut out = Vec::new();
    let _ = encode_request(3, &request, &mut out).unwrap();
    let mut decoder = Decoder::for_node(DecoderConfig::default());
    assert_eq!(decoder.body_pending(), None);
    // The header and a little of the body.
    let cut = limits::FRAME_HEADER_LEN + 10;
    let (used, event) = decoder.decode(&out[..cut]).unwrap();
    let (more, event2) = match event {
        None if used < cut => decoder.decode(&out[used..cut]).unwrap(),
        other => (0, other),
    };
    assert!(event2.is_none() && used + more == cut);
    let body = u32::try_from(out.len() - limits::FRAME_HEADER_LEN).unwrap();
    assert_eq!(decoder.body_pending(), Some(body));
    let (_, event) = decoder.decode(&out[cut..]).unwrap();
    assert!(matches!(event, Some(Event::Request { request_id: 3, .. })));
    assert_eq!(decoder.body_pending(), None, "whole: nothing gathered");
}
