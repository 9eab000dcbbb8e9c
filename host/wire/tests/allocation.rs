//! Lengths are checked before memory is taken: a peer that announces a large body, field or list
//! and sends little makes the decoder allocate for what was sent, not for what was announced.
//!
//! This binary counts every allocation (its own global allocator) and so holds one test, and
//! stays a binary of its own rather than a module of the `wire` tests: any other test running
//! beside it would be counted too.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use tasklet_wire::limits::MAX_FRAME_BODY;
use tasklet_wire::*;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(live, Ordering::SeqCst);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most memory in use at once while `work` ran, above what was in use before it.
fn peak_during(work: impl FnOnce()) -> usize {
    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    work();
    PEAK.load(Ordering::SeqCst) - before
}

fn header(opcode: Opcode, len: u32) -> [u8; 12] {
    FrameHeader {
        direction: Direction::ToNode,
        data: false,
        opcode,
        request_id: 1,
        len,
    }
    .to_bytes()
}

#[test]
fn announced_lengths_do_not_allocate() {
    // A body of MAX_FRAME_BODY announced, 1000 bytes sent.
    let mut input = header(Opcode::ModuleLoad, MAX_FRAME_BODY).to_vec();
    input.extend_from_slice(&[0; 1000]);
    let mut decoder = Decoder::for_node(DecoderConfig::default());
    let peak = peak_during(|| {
        let mut rest = &input[..];
        while !rest.is_empty() {
            let (used, event) = decoder.decode(rest).unwrap();
            assert!(event.is_none());
            rest = &rest[used..];
        }
    });
    assert!(peak < 4096, "{peak} bytes for a body of which 1000 arrived");

    // A list of 4096 launch arguments announced in a 60-byte body.
    let mut body = Vec::new();
    for word in [1u64, 2] {
        body.extend_from_slice(&word.to_be_bytes());
    }
    for word in [0u32, 1, 1, 1, 1, 1, 1, 0, 4096] {
        body.extend_from_slice(&word.to_be_bytes());
    }
    let mut input = header(Opcode::Launch, body.len() as u32).to_vec();
    input.extend_from_slice(&body);
    let mut decoder = Decoder::for_node(DecoderConfig::default());
    let peak = peak_during(|| {
        let err = decoder
            .decode(&input)
            .and_then(|(used, _)| decoder.decode(&input[used..]))
            .unwrap_err();
        assert_eq!(err, DecodeError::Truncated { field: "args" });
    });
    assert!(peak < 4096, "{peak} bytes for a list that was not there");

    // 1 GiB of streamed data announced: nothing is reserved for it.
    let write = Request::MemWrite {
        session: SessionId(1),
        buffer: BufferId(1),
        offset: 0,
        len: 1 << 30,
    };
    let mut input = Vec::new();
    let _ = encode_request(1, &write, &mut input).unwrap();
    let mut decoder = Decoder::for_node(DecoderConfig::default());
    let peak = peak_during(|| {
        let mut rest = &input[..];
        while !rest.is_empty() {
            let (used, _) = decoder.decode(rest).unwrap();
            rest = &rest[used..];
        }
    });
    assert!(decoder.in_data());
    assert!(peak < 4096, "{peak} bytes for announced data");
}
