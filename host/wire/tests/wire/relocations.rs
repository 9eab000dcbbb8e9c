//! LAUNCH's relocated argument (tag 8): a by-value struct's bytes and the buffer relocations the
//! node fills in. Round trips, the byte layout docs/wire.md shows, and the limits on both sides.

use crate::support::*;
use tasklet_wire::*;

fn launch(args: Vec<KernelArg>) -> Request {
    Request::Launch(Launch {
        session: SessionId(1),
        module: ModuleId(2),
        kernel: 0,
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
        args,
    })
}

fn relocated(bytes: Vec<u8>, relocations: Vec<Relocation>) -> KernelArg {
    KernelArg::Relocated { bytes, relocations }
}

fn encoded(request: &Request) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = encode_request(7, request, &mut out).unwrap();
    out
}

#[test]
fn relocated_arguments_round_trip() {
    let two = vec![
        Relocation {
            at: 0,
            buffer: BufferId(u64::MAX),
            offset: 0,
        },
        Relocation {
            at: 8,
            buffer: BufferId(3),
            offset: 1 << 40,
        },
    ];
    let request = launch(vec![
        relocated(vec![0xAB; 24], two),
        relocated(Vec::new(), Vec::new()),
        KernelArg::U32(5),
    ]);
    let (events, end) = decode_whole(Direction::ToNode, &encoded(&request));
    assert_eq!(end, Ok(()));
    assert_eq!(events, vec![Owned::Request(7, request)]);
}

#[test]
fn a_relocated_argument_is_its_tag_bytes_and_relocations() {
    let arg = relocated(
        vec![1, 2, 3, 4, 5, 6, 7, 8],
        vec![Relocation {
            at: 0,
            buffer: BufferId(0x0102),
            offset: 0x10,
        }],
    );
    let bytes = encoded(&launch(vec![arg]));
    let mut tail = vec![8u8];
    tail.extend_from_slice(&8u32.to_be_bytes());
    tail.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    tail.extend_from_slice(&1u32.to_be_bytes());
    tail.extend_from_slice(&0u32.to_be_bytes());
    tail.extend_from_slice(&0x0102u64.to_be_bytes());
    tail.extend_from_slice(&0x10u64.to_be_bytes());
    assert!(
        bytes.ends_with(&tail),
        "{:02x?} does not end with {tail:02x?}",
        bytes
    );
}

#[test]
fn relocations_past_the_limit_are_refused_on_both_sides() {
    let one = Relocation {
        at: 0,
        buffer: BufferId(1),
        offset: 0,
    };
    let too_many = launch(vec![relocated(vec![0; 8], vec![one; MAX_RELOCATIONS + 1])]);
    assert_eq!(
        encode_request(1, &too_many, &mut Vec::new()),
        Err(EncodeError::TooManyItems {
            field: "args[].relocations",
            count: MAX_RELOCATIONS as u64 + 1,
            limit: MAX_RELOCATIONS as u64
        })
    );
    // A count patched past the limit, and one past what the frame holds.
    let bytes = encoded(&launch(vec![relocated(vec![0; 8], vec![one])]));
    let count_at = bytes.len() - 20 - 4;
    assert_eq!(&bytes[count_at..count_at + 4], &1u32.to_be_bytes());
    let patched = |count: u32| {
        let mut b = bytes.clone();
        b[count_at..count_at + 4].copy_from_slice(&count.to_be_bytes());
        decode_whole(Direction::ToNode, &b).1
    };
    assert_eq!(
        patched(MAX_RELOCATIONS as u32 + 1),
        Err(DecodeError::TooManyItems {
            field: "args[].relocations",
            count: MAX_RELOCATIONS as u64 + 1,
            limit: MAX_RELOCATIONS as u64
        })
    );
    assert_eq!(
        patched(2),
        Err(DecodeError::Truncated {
            field: "args[].relocations"
        })
    );
}
