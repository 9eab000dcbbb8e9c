//! Bytes from anywhere: random, random bodies behind valid headers, and valid streams with bytes
//! changed. The decoder never panics, reaches the same verdict however the bytes are cut, and
//! what it accepts is canonical: encoding what it decoded gives back the same bytes.

use crate::support::*;
use proptest::collection::vec;
use proptest::prelude::*;
use tasklet_wire::*;

/// Decodes `input` whole, then in `cuts`, in `direction`; checks both agree, and that a stream
/// accepted whole re-encodes to itself.
fn check(direction: Direction, input: &[u8], cuts: &[usize]) -> Result<(), TestCaseError> {
    let mut decoder = Decoder::new(direction, DecoderConfig::default());
    let mut frames = Vec::new();
    let mut rest = input;
    let mut verdict = Ok(());
    while !rest.is_empty() {
        match decoder.decode(rest) {
            Ok((used, event)) => {
                rest = &rest[used..];
                if let Some(event) = event {
                    reencode(direction, &event, &mut frames);
                }
            }
            Err(err) => {
                verdict = Err(err);
                break;
            }
        }
    }
    if verdict.is_ok() {
        verdict = decoder.finish();
    }
    if verdict.is_ok() {
        prop_assert_eq!(&frames[..], input, "accepted bytes re-encode differently");
    }

    let (whole, whole_verdict) = decode_whole(direction, input);
    prop_assert_eq!(&whole_verdict, &verdict);
    let mut decoder = Decoder::new(direction, DecoderConfig::default());
    let (pieces, pieces_verdict) = decode_in_pieces(&mut decoder, input, cuts);
    prop_assert_eq!(pieces_verdict, whole_verdict);
    prop_assert_eq!(pieces, whole);
    Ok(())
}

/// The frame an event came from, assuming whole frames were fed (one data event per frame).
fn reencode(direction: Direction, event: &Event, out: &mut Vec<u8>) {
    let written = match event {
        Event::Request {
            request_id,
            request,
        } => encode_request(*request_id, request, out).map(drop),
        Event::Reply { request_id, reply } => encode_reply(*request_id, reply, out).map(drop),
        Event::GoAway(error) => encode_goaway(error, out),
        Event::Data {
            request_id,
            opcode,
            bytes,
            ..
        } => {
            let header = FrameHeader {
                direction,
                data: true,
                opcode: *opcode,
                request_id: *request_id,
                len: bytes.len() as u32,
            };
            out.extend_from_slice(&header.to_bytes());
            out.extend_from_slice(bytes);
            Ok(())
        }
    };
    written.expect("a decoded message encodes");
}

fn direction() -> impl Strategy<Value = Direction> {
    prop_oneof![Just(Direction::ToNode), Just(Direction::ToClient)]
}

/// A header that passes every header check, with `body` behind it.
fn framed(
    direction: Direction,
    data: bool,
    opcode: Opcode,
    request_id: u32,
    body: &[u8],
) -> Vec<u8> {
    let header = FrameHeader {
        direction,
        data,
        opcode,
        request_id,
        len: body.len() as u32,
    };
    let mut bytes = header.to_bytes().to_vec();
    bytes.extend_from_slice(body);
    bytes
}

/// A valid stream of requests or replies, with its data.
fn valid_stream() -> impl Strategy<Value = (Direction, Vec<u8>)> {
    let requests = vec((any::<u32>(), request_with_data()), 1..6).prop_map(|items| {
        let mut out = Vec::new();
        for (id, (request, data)) in items {
            let encoder = encode_request(id, &request, &mut out).unwrap();
            encode_data(encoder, &data, &[700], &mut out);
        }
        (Direction::ToNode, out)
    });
    let replies = vec((any::<u32>(), reply_with_data()), 1..6).prop_map(|items| {
        let mut out = Vec::new();
        for (id, (reply, data)) in items {
            let encoder = encode_reply(id, &reply, &mut out).unwrap();
            encode_data(encoder, &data, &[700], &mut out);
        }
        (Direction::ToClient, out)
    });
    prop_oneof![requests, replies]
}

#[derive(Debug, Clone)]
enum Mutation {
    Set(usize, u8),
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, u8),
    Remove(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Set(at, byte)),
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip(at, bit)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Insert(at, byte)),
        any::<usize>().prop_map(Mutation::Remove),
    ]
}

fn apply(bytes: &mut Vec<u8>, mutation: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    let len = bytes.len();
    match *mutation {
        Mutation::Set(at, byte) => bytes[at % len] = byte,
        Mutation::Flip(at, bit) => bytes[at % len] ^= 1 << bit,
        Mutation::Truncate(at) => bytes.truncate(at % len),
        Mutation::Insert(at, byte) => bytes.insert(at % (len + 1), byte),
        Mutation::Remove(at) => {
            bytes.remove(at % len);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(direction in direction(), input in bytes(4096), cuts in cuts()) {
        check(direction, &input, &cuts)?;
    }

    /// Random bodies behind headers that pass, so the body decoders see noise too.
    #[test]
    fn random_bodies(
        direction in direction(),
        frames in vec((proptest::sample::select(Opcode::ALL.to_vec()), any::<bool>(), any::<u32>(), bytes(300)), 1..6),
        cuts in cuts(),
    ) {
        let mut input = Vec::new();
        for (opcode, data, id, mut body) in frames {
            if data && body.is_empty() {
                body.push(0);
            }
            input.extend_from_slice(&framed(direction, data, opcode, id, &body));
        }
        check(direction, &input, &cuts)?;
    }

    /// Reply bodies that start with a plausible status, so error bodies are reached often.
    #[test]
    fn random_reply_bodies(
        opcode in proptest::sample::select(Opcode::ALL.to_vec()),
        status in prop_oneof![Just(0u16), 1u16..24],
        id in any::<u32>(),
        rest in bytes(300),
        cuts in cuts(),
    ) {
        let mut body = status.to_be_bytes().to_vec();
        body.extend_from_slice(&rest);
        let input = framed(Direction::ToClient, false, opcode, id, &body);
        check(Direction::ToClient, &input, &cuts)?;
    }

    #[test]
    fn valid_streams_changed((direction, mut input) in valid_stream(), mutations in vec(mutation(), 1..4), cuts in cuts()) {
        for mutation in &mutations {
            apply(&mut input, mutation);
        }
        check(direction, &input, &cuts)?;
    }

    #[test]
    fn valid_streams_unchanged((direction, input) in valid_stream(), cuts in cuts()) {
        let (_, verdict) = decode_whole(direction, &input);
        prop_assert_eq!(verdict, Ok(()));
        check(direction, &input, &cuts)?;
    }
}
