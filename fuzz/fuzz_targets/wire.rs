//! Bytes → `tasklet_wire::Decoder`, either side: may fail, must never panic, must reach the same
//! verdict and the same messages and data whether fed whole or cut into pieces, and what it
//! accepts must re-encode to the same bytes.
//!
//! The first input byte steers: bit 0 picks the side (node or client), bit 1 the mode, the rest
//! the piece size. In *raw* mode the remaining bytes are the stream. In *framed* mode they are
//! cut into frames with headers that pass (`op`, `kind`, `len`, then `len` body bytes), so that
//! the body decoders see noise without the fuzzer first having to find a valid header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tasklet_wire::{
    encode_goaway, encode_reply, encode_request, Decoder, DecoderConfig, Direction, Event,
    FrameHeader, Opcode,
};

/// An event with its data owned; consecutive data of one message merged.
#[derive(Debug, PartialEq, Eq)]
enum Owned {
    Message(Vec<u8>),
    Data(u32, Opcode, Vec<u8>),
}

struct Outcome {
    events: Vec<Owned>,
    verdict: Result<(), tasklet_wire::DecodeError>,
    /// The frames the events came from, re-encoded (meaningful when fed whole).
    reencoded: Vec<u8>,
}

fn decode(direction: Direction, input: &[u8], piece: usize) -> Outcome {
    let mut decoder = Decoder::new(direction, DecoderConfig::default());
    let mut outcome = Outcome {
        events: Vec::new(),
        verdict: Ok(()),
        reencoded: Vec::new(),
    };
    for mut piece in input.chunks(piece.max(1)) {
        while !piece.is_empty() {
            match decoder.decode(piece) {
                Ok((used, event)) => {
                    assert!(used > 0 && used <= piece.len());
                    piece = &piece[used..];
                    if let Some(event) = event {
                        record(direction, event, &mut outcome);
                    }
                }
                Err(err) => {
                    outcome.verdict = Err(err);
                    return outcome;
                }
            }
        }
    }
    outcome.verdict = decoder.finish();
    outcome
}

fn record(direction: Direction, event: Event, outcome: &mut Outcome) {
    let start = outcome.reencoded.len();
    let out = &mut outcome.reencoded;
    match event {
        Event::Request {
            request_id,
            request,
        } => {
            let _ = encode_request(request_id, &request, out).expect("a decoded request encodes");
        }
        Event::Reply { request_id, reply } => {
            let _ = encode_reply(request_id, &reply, out).expect("a decoded reply encodes");
        }
        Event::GoAway(error) => encode_goaway(&error, out).expect("a decoded GOAWAY encodes"),
        Event::Data {
            request_id,
            opcode,
            bytes,
            ..
        } => {
            let header = FrameHeader {
                direction,
                data: true,
                opcode,
                request_id,
                len: bytes.len() as u32,
            };
            out.extend_from_slice(&header.to_bytes());
            out.extend_from_slice(bytes);
            if let Some(Owned::Data(id, op, data)) = outcome.events.last_mut() {
                if *id == request_id && *op == opcode {
                    data.extend_from_slice(bytes);
                    return;
                }
            }
            outcome
                .events
                .push(Owned::Data(request_id, opcode, bytes.to_vec()));
            return;
        }
    }
    outcome
        .events
        .push(Owned::Message(outcome.reencoded[start..].to_vec()));
}

/// Framed mode: `op, kind, len_hi, len_lo, body…` repeated; `kind` bit 0 marks a data frame and
/// its other bits are the request id.
fn frames(direction: Direction, mut spec: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let [op, kind, len_hi, len_lo, rest @ ..] = spec {
        let opcode = Opcode::ALL[usize::from(*op) % Opcode::ALL.len()];
        let len = usize::from(u16::from_be_bytes([*len_hi, *len_lo])).min(rest.len());
        let (body, after) = rest.split_at(len);
        let header = FrameHeader {
            direction,
            data: kind & 1 == 1,
            opcode,
            request_id: u32::from(kind >> 1),
            len: len as u32,
        };
        out.extend_from_slice(&header.to_bytes());
        out.extend_from_slice(body);
        spec = after;
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let direction = if control & 1 == 0 {
        Direction::ToNode
    } else {
        Direction::ToClient
    };
    let framed;
    let input = if control & 2 == 0 {
        rest
    } else {
        framed = frames(direction, rest);
        &framed[..]
    };
    let piece = usize::from(control >> 2) + 1;

    let whole = decode(direction, input, usize::MAX);
    let cut = decode(direction, input, piece);
    assert_eq!(
        whole.verdict, cut.verdict,
        "verdict depends on how the bytes were cut"
    );
    assert_eq!(
        whole.events, cut.events,
        "events depend on how the bytes were cut"
    );
    if whole.verdict.is_ok() {
        assert_eq!(
            whole.reencoded, input,
            "accepted bytes re-encode differently"
        );
    }
});
