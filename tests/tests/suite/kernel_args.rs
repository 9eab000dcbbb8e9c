//! Launch arguments against the kernel's declared parameters, through a tasklet's GPU service on
//! this node (`LocalGpu`, as a tasklet or a remote client uses it) on the suite's backend: a
//! scalar of the wrong type, a number or bytes for a parameter the kernel uses as an address, and
//! a buffer of another session are refused naming the parameter; a struct passed by value that
//! holds two device pointers (bytes plus buffer relocations) reaches the kernel with the buffers'
//! addresses in place, and relocations outside the struct, misaligned or past their buffer are
//! refused. The same struct built by a tasklet with the SDK's `CStruct` (the `sdk-check`
//! tasklet) goes through the contract's `relocated` argument.

use tasklet_runtime::gpu::{
    BufferId, GpuService, KernelArg, LaunchConfig, LeaseRequest, ParamKind, Relocation,
};
use tasklet_runtime::GpuError;
use tasklet_tests::{
    assert_baseline, assert_gpu_error, load, manifest, probe_lines, probe_session, run_ok,
    test_host,
};

const IOTA_PTX: &str = include_str!("../../../kernels/iota.ptx");
const FAULTS_PTX: &str = include_str!("../../../kernels/faults.ptx");
/// `scaled_sum(int* out, Operands ops, unsigned n)` with `struct Operands { const int* a; const
/// int* b; int scale; }` (24 bytes: a at 0, b at 8, scale at 16): out[i] = a[i] * scale + b[i].
const STRUCT_POINTERS_PTX: &str = include_str!("../../../kernels/struct_pointers.ptx");

const ONE_THREAD: LaunchConfig = LaunchConfig {
    grid: [1, 1, 1],
    block: [1, 1, 1],
    shared_mem_bytes: 0,
};

fn buffer(buffer: BufferId) -> KernelArg<'static> {
    KernelArg::Buffer { buffer, offset: 0 }
}

#[track_caller]
fn assert_error(r: Result<impl std::fmt::Debug, GpuError>, name: &str, says: &[&str]) {
    let e = r.expect_err("an error");
    assert_eq!(e.name(), name, "{e}");
    for s in says {
        assert!(e.message().contains(s), "{s:?} not in: {e}");
    }
}

#[test]
fn a_scalar_of_the_wrong_type_is_refused_naming_the_parameter_and_both_types() {
    let host = test_host!();
    let (mut gpu, s) = probe_session(&host);
    let m = gpu.module_load(s, IOTA_PTX).expect("iota loads");
    let out = gpu.mem_alloc(s, 64).expect("alloc");
    // iota(unsigned* out, unsigned n)
    let r = gpu.launch(
        s,
        m,
        "iota",
        &ONE_THREAD,
        &[buffer(out), KernelArg::F32(16.0)],
    );
    assert_error(
        r,
        "invalid-argument",
        &[
            "argument 1 (\"iota_param_1\") of kernel \"iota\" is an f32, but the parameter is declared .u32",
            "pass a u32 or an i32",
        ],
    );
    let r = gpu.launch(
        s,
        m,
        "iota",
        &ONE_THREAD,
        &[buffer(out), KernelArg::F64(1.0)],
    );
    assert_error(r, "invalid-argument", &["is an f64", "declared .u32"]);
    // Either signedness of the width is the same bits, and runs.
    gpu.launch(s, m, "iota", &ONE_THREAD, &[buffer(out), KernelArg::I32(4)])
        .expect("an i32 for a .u32");
    gpu.sync(s).expect("sync");
    drop(gpu);
    assert_baseline(&host);
}

#[test]
fn a_number_or_bytes_for_a_parameter_used_as_an_address_is_refused() {
    let host = test_host!();
    let (mut gpu, s) = probe_session(&host);
    let iota = gpu.module_load(s, IOTA_PTX).expect("iota loads");
    let out = gpu.mem_alloc(s, 64).expect("alloc");
    for arg in [
        KernelArg::U64(0x7f00_0000_0000),
        KernelArg::I64(1 << 40),
        KernelArg::Bytes(&[0; 8]),
    ] {
        let r = gpu.launch(s, iota, "iota", &ONE_THREAD, &[arg, KernelArg::U32(4)]);
        assert_error(
            r,
            "invalid-argument",
            &[
                "argument 0 (\"iota_param_0\") of kernel \"iota\"",
                "the kernel uses the parameter as a global address: pass a buffer of this session",
            ],
        );
    }
    // The signature says which parameters those are: a 64-bit index is not one, and still takes
    // a u64 (write_out_of_bounds(unsigned* out, unsigned long long offset) writes out[offset]).
    let faults = gpu.module_load(s, FAULTS_PTX).expect("faults loads");
    let sig = gpu
        .module_signatures(s, faults)
        .into_iter()
        .find(|k| k.name == "write_out_of_bounds")
        .expect("listed");
    let kinds: Vec<ParamKind> = sig.params.iter().map(|p| p.kind).collect();
    assert_eq!(kinds, [ParamKind::Pointer, ParamKind::Value]);
    gpu.launch(
        s,
        faults,
        "write_out_of_bounds",
        &ONE_THREAD,
        &[buffer(out), KernelArg::U64(3)],
    )
    .expect("a u64 index");
    gpu.sync(s).expect("in bounds");
    assert_eq!(
        gpu.mem_read(s, out, 12, 4).expect("read"),
        1u32.to_le_bytes()
    );
    drop(gpu);
    assert_baseline(&host);
}

#[test]
fn a_buffer_of_another_session_is_refused_as_an_argument_and_as_a_relocation() {
    let host = test_host!();
    let (mut gpu, s) = probe_session(&host);
    let lease = gpu
        .lease_acquire(LeaseRequest {
            min_vram: 1 << 20,
            secs: 60,
            device: None,
        })
        .expect("a second lease");
    let other = gpu.session_open(lease).expect("another session");
    let foreign = gpu.mem_alloc(other, 64).expect("alloc there");
    let own = gpu.mem_alloc(s, 64).expect("alloc here");
    let iota = gpu.module_load(s, IOTA_PTX).expect("iota loads");
    let r = gpu.launch(
        s,
        iota,
        "iota",
        &ONE_THREAD,
        &[buffer(foreign), KernelArg::U32(4)],
    );
    assert_error(
        r,
        "invalid-argument",
        &[
            "argument 0 (\"iota_param_0\") of kernel \"iota\": buffer",
            "belongs to another session",
        ],
    );
    let m = gpu
        .module_load(s, STRUCT_POINTERS_PTX)
        .expect("struct_pointers loads");
    let relocations = [
        Relocation {
            at: 0,
            buffer: own,
            offset: 0,
        },
        Relocation {
            at: 8,
            buffer: foreign,
            offset: 0,
        },
    ];
    let ops = operands(1);
    let args = [
        buffer(own),
        KernelArg::Relocated {
            bytes: &ops,
            relocations: &relocations,
        },
        KernelArg::U32(1),
    ];
    let r = gpu.launch(s, m, "scaled_sum", &ONE_THREAD, &args);
    assert_error(
        r,
        "invalid-argument",
        &[
            "argument 1 (\"scaled_sum_param_1\") of kernel \"scaled_sum\"",
            "belongs to another session",
        ],
    );
    drop(gpu);
    assert_baseline(&host);
}

/// `Operands`' 24 bytes with `scale` set and the pointers left for relocations.
fn operands(scale: i32) -> Vec<u8> {
    let mut bytes = vec![0u8; 24];
    bytes[16..20].copy_from_slice(&scale.to_le_bytes());
    bytes
}

fn ints(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn a_struct_by_value_holding_two_device_pointers_reaches_the_kernel_with_their_addresses() {
    let host = test_host!();
    let (mut gpu, s) = probe_session(&host);
    let n = 300usize;
    let a: Vec<i32> = (0..n as i32).collect();
    let b: Vec<i32> = (0..n as i32).map(|i| 1000 - 3 * i).collect();
    let bytes = (n * 4) as u64;
    let (ab, bb, out) = (
        gpu.mem_alloc(s, bytes).expect("a"),
        gpu.mem_alloc(s, bytes + 16).expect("b"),
        gpu.mem_alloc(s, bytes).expect("out"),
    );
    gpu.mem_write(s, ab, 0, &ints(&a)).expect("write a");
    // b's elements start 16 bytes into its buffer: the relocation's offset says so.
    gpu.mem_write(s, bb, 16, &ints(&b)).expect("write b");
    let m = gpu
        .module_load(s, STRUCT_POINTERS_PTX)
        .expect("struct_pointers loads");
    let sig = gpu.module_signatures(s, m);
    let kinds: Vec<(u32, ParamKind)> = sig[0].params.iter().map(|p| (p.size, p.kind)).collect();
    assert_eq!(
        kinds,
        [
            (8, ParamKind::Pointer),
            (24, ParamKind::Value),
            (4, ParamKind::Value)
        ]
    );
    let relocations = [
        Relocation {
            at: 0,
            buffer: ab,
            offset: 0,
        },
        Relocation {
            at: 8,
            buffer: bb,
            offset: 16,
        },
    ];
    let ops = operands(7);
    let args = [
        buffer(out),
        KernelArg::Relocated {
            bytes: &ops,
            relocations: &relocations,
        },
        KernelArg::U32(n as u32),
    ];
    let config = LaunchConfig {
        grid: [(n as u32).div_ceil(128), 1, 1],
        block: [128, 1, 1],
        shared_mem_bytes: 0,
    };
    gpu.launch(s, m, "scaled_sum", &config, &args)
        .expect("launch");
    gpu.sync(s).expect("sync");
    let got = gpu.mem_read(s, out, 0, bytes).expect("read");
    let expected: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x * 7 + y).collect();
    assert_eq!(got, ints(&expected));
    // The parameter the kernel writes through (`out`) cannot be given as bytes, even beside a
    // well-formed struct.
    let r = gpu.launch(
        s,
        m,
        "scaled_sum",
        &config,
        &[KernelArg::Bytes(&[0; 8]), args[1], args[2]],
    );
    assert_error(
        r,
        "invalid-argument",
        &["uses the parameter as a global address"],
    );
    drop(gpu);
    assert_baseline(&host);
}

#[test]
fn relocations_outside_the_struct_misaligned_or_past_their_buffer_are_refused() {
    let host = test_host!();
    let (mut gpu, s) = probe_session(&host);
    let (a, out) = (
        gpu.mem_alloc(s, 64).expect("a"),
        gpu.mem_alloc(s, 64).expect("out"),
    );
    let m = gpu
        .module_load(s, STRUCT_POINTERS_PTX)
        .expect("struct_pointers loads");
    let ops = operands(1);
    let one = |at, offset| Relocation {
        at,
        buffer: a,
        offset,
    };
    let cases = [
        (
            one(24, 0),
            "invalid-argument",
            "relocation 0 at byte 24 is not an 8-byte-aligned place within its 24 bytes",
        ),
        (
            one(20, 0),
            "invalid-argument",
            "relocation 0 at byte 20 is not an 8-byte-aligned place",
        ),
        (
            one(4, 0),
            "invalid-argument",
            "relocation 0 at byte 4 is not an 8-byte-aligned place",
        ),
        (
            one(1 << 31, 0),
            "invalid-argument",
            "is not an 8-byte-aligned place",
        ),
        (
            one(8, 65),
            "out-of-bounds",
            "relocation 0: offset 65 is past the end of its 64-byte buffer",
        ),
    ];
    for (reloc, name, says) in &cases {
        let relocations = [*reloc];
        let args = [
            buffer(out),
            KernelArg::Relocated {
                bytes: &ops,
                relocations: &relocations,
            },
            KernelArg::U32(1),
        ];
        let r = gpu.launch(s, m, "scaled_sum", &ONE_THREAD, &args);
        assert_error(
            r,
            name,
            &[
                says,
                "argument 1 (\"scaled_sum_param_1\") of kernel \"scaled_sum\"",
            ],
        );
    }
    // Relocated bytes are length-checked as bytes are.
    let short = [0u8; 16];
    let relocations = [one(0, 0)];
    let args = [
        buffer(out),
        KernelArg::Relocated {
            bytes: &short,
            relocations: &relocations,
        },
        KernelArg::U32(1),
    ];
    let r = gpu.launch(s, m, "scaled_sum", &ONE_THREAD, &args);
    assert_error(
        r,
        "invalid-argument",
        &["is 16 bytes, the parameter takes 24"],
    );
    // Nothing refused reached the device: the session still works.
    gpu.mem_write(s, out, 0, &[1, 2, 3, 4]).expect("write");
    gpu.sync(s).expect("sync");
    drop(gpu);
    assert_baseline(&host);
}

#[test]
fn a_cstruct_with_buffer_fields_from_a_tasklet_reaches_the_kernel_through_relocations() {
    let host = test_host!();
    let tasklet = load(&host, manifest("testing/sdk-check"));
    let n = 5;
    let lines = probe_lines(&run_ok(&host, &tasklet, &format!("struct-pointers {n}")));
    // a[i] * 7 + b[4 + i] with a[i] = i and b[4 + i] = 1000 - 3i.
    let expected: Vec<String> = (0..n).map(|i| (1000 + 4 * i).to_string()).collect();
    match lines.first() {
        Some((status, what, detail)) if status == "ok" && what == "struct-pointers" => {
            assert_eq!(
                detail,
                &format!("size=24 pointers=0,8 {}", expected.join(" "))
            )
        }
        _ => panic!("line 0 is not `ok struct-pointers …`: {lines:?}"),
    }
    // b's pointer 5 elements past its end: refused by the host, naming the relocation.
    assert_gpu_error(
        &lines,
        1,
        "out-of-bounds",
        "relocation 1: offset 40 is past the end of its 36-byte buffer",
    );
    assert_baseline(&host);
}
