//! DeviceMemory semantics and load-time validation.

use crate::support::*;
use tasklet_ptx::{DeviceMemory, MemError, Module};

#[test]
fn allocations_are_aligned_distinct_nonzero_and_never_reused() {
    let mem = DeviceMemory::new();
    let mut seen = Vec::new();
    for size in [1u64, 7, 256, 1000, 4096, 1 << 20, 3] {
        let p = mem.alloc(size).unwrap();
        assert_ne!(p, 0);
        assert_eq!(p % 256, 0);
        assert!(!seen.contains(&p));
        seen.push(p);
    }
    for &p in &seen {
        mem.free(p).unwrap();
    }
    for _ in 0..10 {
        let p = mem.alloc(16).unwrap();
        assert!(!seen.contains(&p), "address {p:#x} reused");
        seen.push(p);
    }
    // Allocations never touch: there is a gap after each.
    seen.sort();
    for w in seen.windows(2) {
        assert!(w[1] - w[0] > 1 << 16);
    }
}

#[test]
fn new_memory_reads_as_zero() {
    let mem = DeviceMemory::new();
    let p = mem.alloc(4096).unwrap();
    mem.write(p, &[0xab; 4096]).unwrap();
    mem.free(p).unwrap();
    let q = mem.alloc(4096).unwrap();
    assert_eq!(download_bytes(&mem, q, 4096), vec![0u8; 4096]);
    mem.clear();
    let r = mem.alloc(100).unwrap();
    assert_eq!(download_bytes(&mem, r, 100), vec![0u8; 100]);
}

#[test]
fn host_accesses_are_bounds_checked() {
    let mem = DeviceMemory::new();
    let p = mem.alloc(100).unwrap();
    mem.write(p + 90, &[1; 10]).unwrap();
    assert!(matches!(
        mem.write(p + 91, &[1; 10]),
        Err(MemError::OutOfBounds { .. })
    ));
    let mut b = [0u8; 10];
    assert!(matches!(
        mem.read(p + 95, &mut b),
        Err(MemError::OutOfBounds { .. })
    ));
    assert!(matches!(
        mem.read(p - 1, &mut b),
        Err(MemError::OutOfBounds { .. })
    ));
    assert!(matches!(
        mem.read(0, &mut b),
        Err(MemError::OutOfBounds { .. })
    ));
    assert!(matches!(
        mem.read(u64::MAX - 3, &mut b),
        Err(MemError::OutOfBounds { .. })
    ));
    assert!(matches!(
        mem.free(p + 8),
        Err(MemError::NotAllocated { .. })
    ));
    assert!(matches!(mem.alloc(0), Err(MemError::AllocFailed { .. })));
    assert!(matches!(
        mem.alloc(u64::MAX),
        Err(MemError::AllocFailed { .. })
    ));
    mem.free(p).unwrap();
    assert!(matches!(mem.free(p), Err(MemError::NotAllocated { .. })));
    assert!(mem.write(p, &[1]).is_err());
}

#[test]
fn copy_and_unaligned_host_io() {
    let mem = DeviceMemory::new();
    let a = mem.alloc(1000).unwrap();
    let b = mem.alloc(1000).unwrap();
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    mem.write(a, &data).unwrap();
    mem.copy(b + 3, a + 5, 900).unwrap();
    assert_eq!(download_bytes(&mem, b + 3, 900), data[5..905].to_vec());
    // Overlapping copy behaves like memmove.
    mem.copy(a + 1, a, 999).unwrap();
    assert_eq!(download_bytes(&mem, a + 1, 999), data[..999].to_vec());
    assert!(mem.copy(b, a, 1001).is_err());
    assert!(mem.copy(b + 1, a, 1000).is_err());
}

#[test]
fn memory_is_usable_from_many_threads() {
    let mem = DeviceMemory::new();
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let mem = &mem;
            s.spawn(move || {
                for i in 0..200 {
                    let p = mem.alloc(64 + i).unwrap();
                    mem.write(p, &[t; 64]).unwrap();
                    assert_eq!(download_bytes(mem, p, 64), vec![t; 64]);
                    mem.free(p).unwrap();
                }
            });
        }
    });
}

fn load_err(src: &str) -> (u32, String) {
    match Module::parse(src) {
        Ok(_) => panic!("loaded:\n{src}"),
        Err(e) => (e.line, e.message),
    }
}

const HEAD: &str = ".version 9.0\n.target sm_80\n.address_size 64\n";

#[test]
fn malformed_ptx_is_a_load_error_naming_the_line() {
    let body = |insts: &str| {
        format!("{HEAD}.visible .entry k(\n.param .u64 p\n)\n{{\n.reg .b32 %r<4>;\n.reg .pred %p<2>;\n{insts}\nret;\n}}\n")
    };
    // Lines: 1-3 header, 4 .entry, 5 param, 6 ), 7 {, 8 .reg, 9 .reg, 10 first instruction.
    let cases: Vec<(String, u32, &str)> = vec![
        (body("frobnicate.b32 %r1, %r2;"), 10, "frobnicate"),
        (
            body("mov.u32 %r1, 1;\nadd.u32.bogus %r1, %r1, %r2;"),
            11,
            "bogus",
        ),
        (body("add.u32 %r1, %r9, %r2;"), 10, "%r9"),
        (body("bra $L_missing;"), 10, "$L_missing"),
        (body("add.u32 %r1, %r2;"), 10, "operands"),
        (body("add.u32 %r1, %r2, %r3"), 11, ""),
        (body("setp.eq.u32 %r1, %r2, %r3;"), 10, "predicate"),
        (body("@%r1 bra $x;\n$x:"), 10, "predicate"),
        (body("mov.u32 %tid.x, 1;"), 10, "special"),
        (body("div.f32 %r1, %r2, %r3;"), 10, "rounding"),
        (body("cvt.f32.u32 %r1, %r2;"), 10, "rn"),
        (body("ld.global.u32 %r1, [%r2+];"), 10, ""),
        (body("shfl.up.b32 %r1, %r2, 1, 0;"), 10, "shfl.sync"),
        (body("mov.u32 %r1, 0f3F80;"), 10, "malformed number"),
        (body("call.uni foo, ();"), 10, "foo"),
        (
            format!("{HEAD}.visible .entry k()\n{{\nret;\n"),
            6,
            "unterminated",
        ),
        (
            format!("{HEAD}.visible .entry k()\n{{\nret;\n}}\n}}\n"),
            8,
            "",
        ),
        (format!("{HEAD}.bogus 1;\n"), 4, ".bogus"),
        (format!("{HEAD}.address_size 32\n"), 4, "address_size"),
        (
            format!("{HEAD}.visible .entry k(.param .u64 p)\n{{\n/* never closed"),
            6,
            "comment",
        ),
    ];
    for (src, line, needle) in cases {
        let (l, msg) = load_err(&src);
        assert_eq!(l, line, "{msg}\n{src}");
        assert!(
            msg.contains(needle),
            "message {msg:?} should mention {needle:?}\n{src}"
        );
    }
}

/// Operands and initializers nested without end (a few kilobytes of `((((…`, `!!!!…`, `{{{{…`)
/// are a load error naming the line, from the module parser and from `entry_signatures` (which
/// a node runs on its connection's thread) alike, never a stack overflow that aborts the process:
/// parsed here on a thread with a small stack, where 600 levels overflowed before the bound.
/// Nesting up to the bound still parses.
#[test]
fn operands_nested_without_end_are_a_load_error_not_a_stack_overflow() {
    let body = |inst: &str| {
        format!("{HEAD}.visible .entry k(\n.param .u64 p\n)\n{{\n.reg .b32 %r<4>;\n.reg .pred %p<2>;\n{inst}\nret;\n}}\n")
    };
    let deep = 5_000;
    let cases = [
        body(&format!(
            "mov.u32 %r1, {}1{};",
            "(".repeat(deep),
            ")".repeat(deep)
        )),
        body(&format!(
            "mov.u32 %r1, {}1{};",
            "{".repeat(deep),
            "}".repeat(deep)
        )),
        body(&format!("mov.pred %p1, {}%p0;", "!".repeat(deep))),
        body(&format!("mov.u32 %r1, {};", vec!["%r2"; deep].join("|"))),
        format!(
            "{HEAD}.global .u32 g[1] = {}1{};\n",
            "{".repeat(deep),
            "}".repeat(deep)
        ),
    ];
    let parsed = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            cases
                .iter()
                .map(|src| {
                    let module = Module::parse(src).err().map(|e| (e.line, e.message));
                    let signatures = tasklet_ptx::entry_signatures(src).err().map(|e| e.message);
                    (module, signatures)
                })
                .collect::<Vec<_>>()
        })
        .unwrap()
        .join()
        .expect("the parser overflowed its stack or panicked");
    for (module, signatures) in parsed {
        let (line, message) = module.expect("a module nested 5,000 deep loaded");
        assert!(line == 10 || line == 4, "line {line}: {message}");
        assert!(message.contains("nested more than 32 deep"), "{message}");
        // `entry_signatures` reads a body it cannot parse for the signatures alone: the
        // nesting in a body leaves them readable, the one in a module-level initializer not.
        if let Some(signatures) = signatures {
            assert!(
                signatures.contains("nested more than 32 deep"),
                "{signatures}"
            );
        }
    }
    // 32 levels are within the bound: the parser takes them (lowering then judges the operand).
    let within = body(&format!(
        "mov.u32 %r1, {}1{};",
        "(".repeat(31),
        ")".repeat(31)
    ));
    let (_, message) = load_err(&within);
    assert!(!message.contains("nested"), "{message}");
}

#[test]
fn an_unsupported_instruction_in_an_unlaunched_kernel_still_fails_the_load() {
    let mut src = kernel_src("vector_add");
    src.push_str("\n.visible .entry other()\n{\n\ttex.1d.v4.s32.s32 {%r1, %r2, %r3, %r4}, [t, {%r1}];\n\tret;\n}\n");
    let line = src.lines().position(|l| l.contains("tex.1d")).unwrap() as u32 + 1;
    let (l, msg) = load_err(&src);
    assert_eq!(l, line);
    assert!(msg.contains("tex"), "{msg}");
}

#[test]
fn arbitrary_bytes_never_panic() {
    let base = kernel_src("faults");
    let mut rng = Rng(99);
    for i in 0..2000 {
        let mut b = base.clone().into_bytes();
        // Mutate a few bytes, or truncate.
        for _ in 0..(1 + i % 4) {
            let at = rng.next_u32() as usize % b.len();
            b[at] = b" %.[]{};,0123456789abcdefx@!-+<>|\n"[rng.next_u32() as usize % 34];
        }
        if i % 7 == 0 {
            let cut = rng.next_u32() as usize % b.len();
            b.truncate(cut);
        }
        let s = String::from_utf8_lossy(&b);
        let _ = Module::parse(&s);
    }
    let _ = Module::parse("");
    let _ = Module::parse("\u{0}\u{ffff}");
}

#[test]
fn debug_sections_and_line_info_are_skipped() {
    let src = format!(
        "{HEAD}.file 1 \"/tmp/k.cu\"\n.visible .entry k(.param .u64 p)\n{{\n.reg .b64 %rd<3>;\n.loc 1 5 3, function_name $L__info_string0, inlined_at 1 2 3\nld.param.u64 %rd1, [p];\n.pragma \"nounroll\";\nret;\n}}\n.section .debug_str\n{{\n$L__info_string0:\n.b8 107,0\n}}\n"
    );
    let m = Module::parse(&src).unwrap();
    assert_eq!(m.kernels().len(), 1);
}

/// A block's state of its own (registers, local memory) is bounded in host memory, whatever the
/// kernel declares: 500,000 registers a thread take 128 MB a warp, so a block of 2 warps runs
/// and one of 3 is refused before anything is allocated, naming what it would need.
#[test]
fn a_blocks_registers_and_local_memory_are_bounded() {
    let ptx = "
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out)
{
    .reg .b64 %x<500000>;
    .reg .b64 %rd<2>;
    .reg .b32 %r<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, 7;
    st.global.u32 [%rd1], %r1;
    ret;
}
";
    let m = Module::parse(ptx).expect("parses");
    let mem = DeviceMemory::new();
    let out = mem.alloc(4).unwrap();
    launch(&m, &mem, "k", [4, 1, 1], [64, 1, 1], &[A::U64(out)]).expect("two warps fit");
    assert_eq!(download_u32(&mem, out, 1), [7]);
    match launch(&m, &mem, "k", [1, 1, 1], [96, 1, 1], &[A::U64(out)]) {
        Err(tasklet_ptx::ExecError::InvalidLaunch(why)) => {
            assert!(
                why.contains("per-thread state") && why.contains("(5000"),
                "{why}"
            )
        }
        other => panic!("three warps of 128 MB each: {other:?}"),
    }
}
