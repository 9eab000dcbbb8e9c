use super::*;
use crate::contract::messages::GraphOp;

fn sample_requests() -> Vec<Request<'static>> {
    vec![
        Request::Ping,
        Request::Alloc { bytes: 1 << 40 },
        Request::Free {
            addr: 0xdead_beef_0000,
        },
        Request::Write {
            addr: 256,
            len: 4096,
            after: None,
        },
        Request::Read {
            addr: u64::MAX,
            len: 0,
            after: Some(0),
        },
        Request::Write {
            addr: 512,
            len: 1,
            after: Some(u64::MAX),
        },
        Request::WriteInline {
            addr: 4096,
            data: &[1, 2, 3, 255],
            after: Some(7),
        },
        Request::WriteInline {
            addr: 0,
            data: &[],
            after: None,
        },
        Request::Copy {
            dst: 1,
            src: 2,
            len: 3,
        },
        Request::LoadModule {
            ptx: ".version 8.0\n.target sm_80\n// ünïcode",
        },
        Request::LoadSource {
            source: "__global__ void k(){}",
            options: vec!["-arch=sm_80", "", "-DX=1"],
        },
        Request::LoadSource {
            source: "",
            options: vec![],
        },
        Request::LoadModuleCached {
            ptx: ".version 8.0\n.target sm_80\n",
            image: &[0x7f, b'E', b'L', b'F', 0, 1],
        },
        Request::LoadModuleCached {
            ptx: "",
            image: &[],
        },
        Request::LoadSourceCached {
            source: "__global__ void k(){}",
            options: vec!["-arch=sm_90", ""],
        },
        Request::UnloadModule { id: 7 },
        Request::Launch(Launch {
            module: 3,
            kernel: 0,
            grid: [4, 1, 1],
            block: [128, 2, 1],
            shared_mem_bytes: 1024,
            args: &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
            deadline: Duration::from_secs(2),
        }),
        // Every varint at its widest.
        Request::Launch(Launch {
            module: u32::MAX,
            kernel: u32::MAX,
            grid: [u32::MAX, 65_535, 1 << 21],
            block: [1024, 127, 128],
            shared_mem_bytes: 227 * 1024,
            args: &[0xff; 300],
            deadline: Duration::from_nanos(u64::MAX),
        }),
        Request::GraphCreate {
            ops: vec![
                GraphOp::Launch(Launch {
                    module: 3,
                    kernel: 1,
                    grid: [2, 1, 1],
                    block: [64, 1, 1],
                    shared_mem_bytes: 0,
                    args: &[7; 24],
                    deadline: Duration::from_millis(5),
                }),
                GraphOp::Copy {
                    dst: 1 << 40,
                    src: 8,
                    len: u64::MAX,
                },
                GraphOp::Fill {
                    addr: 4096,
                    len: 64,
                    value: 0xdead_beef,
                },
            ],
        },
        Request::GraphCreate { ops: vec![] },
        Request::GraphSetArgs {
            graph: 2,
            node: 7,
            args: &[1, 2, 3],
        },
        Request::GraphReplay {
            graph: u32::MAX,
            times: 4096,
            writes: &[5; 32],
        },
        Request::GraphDestroy { graph: 1 },
        Request::MapDevice {
            memory: 9,
            offset: 4096,
            len: u64::MAX,
        },
        Request::UnmapDevice { addr: 1 << 32 },
        Request::AllocShareable { bytes: 1 << 33 },
        Request::Export { addr: u64::MAX },
        Request::CopyFromPeer {
            dst: 0x7000_0000,
            handle: &[0xa5; 64],
            offset: 4096,
            len: 1 << 28,
        },
        Request::LaunchPersistent {
            launch: Launch {
                module: 2,
                kernel: 0,
                grid: [4, 1, 1],
                block: [32, 1, 1],
                shared_mem_bytes: 0,
                args: &[3; 16],
                deadline: Duration::from_secs(1),
            },
            memory: u64::MAX,
            control: 256,
            status_memory: 3,
            status: 512,
        },
        Request::Sync,
        Request::Reset,
        Request::Info,
        Request::AttachMemory {
            id: 9,
            capacity: 4 << 30,
        },
        Request::DetachMemory { id: u64::MAX },
        Request::WriteFrom {
            addr: 0x7000,
            memory: 3,
            offset: 65536,
            len: 1 << 28,
            after: Some(7),
        },
        Request::ReadInto {
            addr: u64::MAX,
            memory: 0,
            offset: u64::MAX,
            len: 0,
            after: None,
        },
        Request::RecordMark { mark: 255 },
        Request::MarkElapsed {
            start: 0,
            end: u32::MAX,
        },
        Request::QueryMark { mark: 3 },
        Request::WaitMark { mark: 7 },
    ]
}

fn sample_responses() -> Vec<Response> {
    vec![
        Response::Ok,
        Response::Allocated { addr: 0x1000 },
        Response::Graph { id: 42 },
        Response::Exported {
            handle: vec![7; 64],
        },
        Response::Elapsed { nanos: u64::MAX },
        Response::MarkDone { done: true },
        Response::MarkDone { done: false },
        Response::Module(LoadedModule {
            id: 1,
            kernels: vec![].into(),
            variable_bytes: 7,
            text_bytes: 11,
        }),
        Response::CachedModule {
            module: LoadedModule {
                id: 3,
                kernels: vec![KernelInfo {
                    name: "k".into(),
                    params: vec![],
                }]
                .into(),
                variable_bytes: 7,
                text_bytes: 11,
            },
            compiled: Compiled {
                ptx: ".version 9.0\n".into(),
                image: vec![0, 1, 2, 255],
                image_refused: true,
            },
        },
        Response::CachedModule {
            module: LoadedModule {
                id: 4,
                kernels: vec![].into(),
                variable_bytes: 7,
                text_bytes: 11,
            },
            compiled: Compiled::default(),
        },
        Response::Module(LoadedModule {
            id: 2,
            kernels: vec![
                KernelInfo {
                    name: "iota".into(),
                    params: vec![
                        ParamInfo {
                            name: "out".into(),
                            size: 8,
                            align: 8,
                            pointer_sized: true,
                            ty: ParamType::Unsigned,
                            used_as_address: true,
                        },
                        ParamInfo {
                            name: "n".into(),
                            size: 4,
                            align: 4,
                            pointer_sized: false,
                            ty: ParamType::Float,
                            used_as_address: false,
                        },
                    ],
                },
                KernelInfo {
                    name: "empty".into(),
                    params: vec![],
                },
            ]
            .into(),
            variable_bytes: 7,
            text_bytes: 11,
        }),
        Response::Info(WorkerInfo {
            backend: "emu".into(),
            device: "PTX emulator".into(),
            memory_total: 1 << 30,
            memory_used: 512,
            allocations: 2,
            modules: 1,
            memory_requested: 300,
            device_memory: 1 << 30,
            compute_capability: (8, 0),
            uuid: String::new(),
            driver_version: 0,
            pinned_data: false,
            launch_limits: LaunchLimits::SM_80,
        }),
        Response::Info(WorkerInfo {
            backend: "cuda".into(),
            device: "NVIDIA H200".into(),
            memory_total: 140 << 30,
            memory_used: 1 << 21,
            allocations: 1,
            modules: 3,
            memory_requested: 1 << 20,
            device_memory: 141 << 30,
            compute_capability: (9, 0),
            uuid: "GPU-01234567-89ab-cdef-0123-456789abcdef".into(),
            driver_version: 13000,
            pinned_data: true,
            launch_limits: LaunchLimits {
                max_threads_per_block: 1024,
                max_block: [1024, 1024, 64],
                max_grid: [2_147_483_647, 65535, 65535],
                max_shared_per_block: 232_448,
                max_param_bytes: 32_764,
            },
        }),
    ]
    .into_iter()
    .chain(ErrorKind::ALL.into_iter().map(|kind| Response::Error {
        kind,
        message: format!("{kind} happened"),
    }))
    .collect()
}

#[test]
fn requests_round_trip() {
    for (i, req) in sample_requests().iter().enumerate() {
        let mut buf = Vec::new();
        encode_request(i as u64 * 1000 + 1, req, &mut buf);
        let (id, back) = decode_request(&buf).unwrap_or_else(|e| panic!("{req:?}: {e}"));
        assert_eq!(id, i as u64 * 1000 + 1);
        assert_eq!(&back, req);
    }
}

#[test]
fn responses_round_trip() {
    for (i, resp) in sample_responses().iter().enumerate() {
        let mut buf = Vec::new();
        encode_response(u64::MAX - i as u64, resp, &mut buf);
        let (id, back) = decode_response(&buf).unwrap_or_else(|e| panic!("{resp:?}: {e}"));
        assert_eq!(id, u64::MAX - i as u64);
        assert_eq!(&back, resp);
    }
}

#[test]
fn every_truncation_is_a_typed_error() {
    for req in sample_requests() {
        let mut buf = Vec::new();
        encode_request(9, &req, &mut buf);
        for cut in 0..buf.len() {
            assert!(
                matches!(
                    decode_request(&buf[..cut]),
                    Err(DecodeError::Truncated { .. })
                ),
                "{req:?} cut at {cut}"
            );
        }
    }
    for resp in sample_responses() {
        let mut buf = Vec::new();
        encode_response(9, &resp, &mut buf);
        for cut in 0..buf.len() {
            assert!(
                matches!(
                    decode_response(&buf[..cut]),
                    Err(DecodeError::Truncated { .. })
                ),
                "{resp:?} cut at {cut}"
            );
        }
    }
}

#[test]
fn trailing_bytes_unknown_tags_and_bad_values() {
    let mut buf = Vec::new();
    encode_request(1, &Request::Ping, &mut buf);
    buf.push(0);
    assert_eq!(
        decode_request(&buf),
        Err(DecodeError::TrailingBytes { extra: 1 })
    );

    let mut buf = vec![200u8];
    buf.push(1); // id 1, a one-byte varint
    assert_eq!(
        decode_request(&buf),
        Err(DecodeError::UnknownTag {
            what: "request",
            tag: 200
        })
    );
    assert_eq!(
        decode_response(&buf),
        Err(DecodeError::UnknownTag {
            what: "response",
            tag: 200
        })
    );

    let mut buf = vec![RESP_ERROR];
    buf.push(1); // id 1, a one-byte varint
    buf.push(99);
    buf.extend_from_slice(&0u32.to_le_bytes());
    assert_eq!(
        decode_response(&buf),
        Err(DecodeError::UnknownTag {
            what: "error kind",
            tag: 99
        })
    );

    // Invalid UTF-8 in a module's PTX.
    let mut buf = vec![REQ_LOAD_MODULE];
    buf.push(1); // id 1, a one-byte varint
    buf.extend_from_slice(&2u32.to_le_bytes());
    buf.extend_from_slice(&[0xff, 0xfe]);
    assert!(matches!(
        decode_request(&buf),
        Err(DecodeError::InvalidUtf8 { what: "ptx", .. })
    ));

    // A flags byte no parameter encodes to: an unknown type, or unknown flag bits.
    let resp = Response::Module(LoadedModule {
        id: 1,
        kernels: vec![KernelInfo {
            name: "k".into(),
            params: vec![ParamInfo {
                name: "p".into(),
                size: 8,
                align: 8,
                pointer_sized: true,
                ty: ParamType::Aggregate,
                used_as_address: false,
            }],
        }]
        .into(),
        variable_bytes: 7,
        text_bytes: 11,
    });
    let mut buf = Vec::new();
    encode_response(1, &resp, &mut buf);
    for bad in [0x50, 0x04, 0x08] {
        *buf.last_mut().unwrap() = bad;
        assert!(matches!(
            decode_response(&buf),
            Err(DecodeError::InvalidValue { .. })
        ));
    }
    *buf.last_mut().unwrap() = 2;
    assert!(matches!(
        decode_response(&buf),
        Ok((_, Response::Module { .. }))
    ));

    // A copy's order flag other than 0 (none) or 1 (an ordinal follows).
    let mut buf = Vec::new();
    let write = Request::Write {
        addr: 1,
        len: 2,
        after: None,
    };
    encode_request(1, &write, &mut buf);
    *buf.last_mut().unwrap() = 2;
    assert_eq!(
        decode_request(&buf),
        Err(DecodeError::InvalidValue {
            what: "copy order flag",
            value: 2
        })
    );
}

/// A launch frame as the host encodes it, for `empty()` with an argument block of `args`.
fn launch_frame(args: &[u8]) -> Vec<u8> {
    let launch = Launch {
        module: 1,
        kernel: 0,
        grid: [1, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
        args,
        deadline: Duration::from_secs(10),
    };
    let mut buf = Vec::new();
    encode_request(1_000_000, &Request::Launch(launch), &mut buf);
    buf
}

#[test]
fn a_launch_with_a_small_argument_block_is_one_cache_line_in_the_ring() {
    // Two pointers and a u32: what a typical kernel takes.
    assert_eq!(
        crate::contract::channel::record_size(launch_frame(&[0; 20]).len()),
        64
    );
    assert_eq!(
        crate::contract::channel::record_size(launch_frame(&[]).len()),
        64
    );
}

#[test]
fn varints_past_their_type_are_refused() {
    let frame = launch_frame(&[]);
    // The module id is the varint after the tag and the id (1,000,000: three bytes).
    let module_at = 4;
    assert_eq!(frame[module_at], 1);
    // Five bytes of value > u32::MAX for the module id.
    let mut wide = frame[..module_at].to_vec();
    wide.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x1f]);
    wide.extend_from_slice(&frame[module_at + 1..]);
    assert!(matches!(
        decode_request(&wide),
        Err(DecodeError::InvalidValue {
            what: "module id",
            ..
        })
    ));
    // Eleven continuation bytes: longer than any u64.
    let mut long = frame[..module_at].to_vec();
    long.extend_from_slice(&[0x80; 11]);
    long.extend_from_slice(&frame[module_at..]);
    assert!(matches!(
        decode_request(&long),
        Err(DecodeError::InvalidValue {
            what: "module id",
            ..
        })
    ));
    // A tenth byte carrying more than the 64th bit.
    let mut over = frame[..module_at].to_vec();
    over.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]);
    over.extend_from_slice(&frame[module_at + 1..]);
    assert!(matches!(
        decode_request(&over),
        Err(DecodeError::InvalidValue { .. })
    ));
    // Five bytes of value > u32::MAX for the kernel index, the varint after the module id.
    let mut wide = frame[..module_at + 1].to_vec();
    wide.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x1f]);
    wide.extend_from_slice(&frame[module_at + 2..]);
    assert!(matches!(
        decode_request(&wide),
        Err(DecodeError::InvalidValue {
            what: "kernel index",
            ..
        })
    ));
    // An argument block whose length runs past the frame: kernel 0, dimensions (1, 1, 1) and
    // (1, 1, 1), no shared memory, then 127 bytes of arguments announced and five there.
    let mut past = frame[..module_at + 1].to_vec();
    past.extend_from_slice(&[0, 1, 1, 1, 1, 1, 1, 0, 0x7f]);
    past.extend_from_slice(b"empty");
    assert!(matches!(
        decode_request(&past),
        Err(DecodeError::Truncated {
            what: "argument block",
            ..
        })
    ));
}

#[test]
fn forged_counts_do_not_allocate() {
    // A module response that claims 4 billion kernels in a 28-byte frame.
    let mut buf = vec![RESP_MODULE];
    buf.push(1); // id 1, a one-byte varint
    buf.extend_from_slice(&1u32.to_le_bytes());
    buf.extend_from_slice(&0u64.to_le_bytes()); // no variables
    buf.extend_from_slice(&0u64.to_le_bytes()); // no text
    buf.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        decode_response(&buf),
        Err(DecodeError::Truncated {
            what: "kernel count",
            ..
        })
    ));
    // A string length far past the end.
    let mut buf = vec![RESP_ERROR];
    buf.push(1); // id 1, a one-byte varint
    buf.push(ErrorKind::Unsupported.to_wire());
    buf.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        decode_response(&buf),
        Err(DecodeError::Truncated { .. })
    ));
    // Options count in a load-source request.
    let mut buf = vec![REQ_LOAD_SOURCE];
    buf.push(1); // id 1, a one-byte varint
    buf.extend_from_slice(&0u32.to_le_bytes());
    buf.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        decode_request(&buf),
        Err(DecodeError::Truncated {
            what: "option count",
            ..
        })
    ));
}

#[test]
fn garbage_never_panics() {
    // A deterministic xorshift stream of frames: random bytes, and valid frames with bytes flipped.
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut valid = Vec::new();
    for r in sample_requests() {
        let mut b = Vec::new();
        encode_request(5, &r, &mut b);
        valid.push(b);
    }
    for r in sample_responses() {
        let mut b = Vec::new();
        encode_response(5, &r, &mut b);
        valid.push(b);
    }
    for i in 0..20_000 {
        let mut frame = if i % 2 == 0 {
            let len = (next() % 64) as usize;
            (0..len).map(|_| next() as u8).collect::<Vec<u8>>()
        } else {
            valid[(next() % valid.len() as u64) as usize].clone()
        };
        if !frame.is_empty() {
            let at = (next() % frame.len() as u64) as usize;
            frame[at] = next() as u8;
        }
        let _ = decode_request(&frame);
        let _ = decode_response(&frame);
    }
}

#[test]
fn long_error_messages_are_cut_on_char_boundaries() {
    let msg = "é".repeat(MAX_ERROR_MESSAGE);
    let mut buf = Vec::new();
    encode_response(
        1,
        &Response::Error {
            kind: ErrorKind::LoadFailed,
            message: msg,
        },
        &mut buf,
    );
    let (_, resp) = decode_response(&buf).unwrap();
    match resp {
        Response::Error { message, .. } => {
            assert!(message.len() <= MAX_ERROR_MESSAGE);
            assert!(message.len() >= MAX_ERROR_MESSAGE - 1);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cached_modules_refused_flag_is_zero_or_one() {
    let resp = Response::CachedModule {
        module: LoadedModule {
            id: 1,
            kernels: vec![].into(),
            variable_bytes: 7,
            text_bytes: 11,
        },
        compiled: Compiled {
            ptx: String::new(),
            image: vec![1, 2, 3],
            image_refused: false,
        },
    };
    let mut buf = Vec::new();
    encode_response(1, &resp, &mut buf);
    *buf.last_mut().unwrap() = 2;
    assert_eq!(
        decode_response(&buf),
        Err(DecodeError::InvalidValue {
            what: "image refused flag",
            value: 2
        })
    );
    *buf.last_mut().unwrap() = 1;
    let Ok((_, Response::CachedModule { compiled, .. })) = decode_response(&buf) else {
        panic!("decodes")
    };
    assert!(compiled.image_refused);
    assert_eq!(compiled.image, vec![1, 2, 3]);
}
