//! Hand-written PTX for features and faults that nvcc output exercises only indirectly.

use crate::support::*;
use tasklet_ptx::{DeviceMemory, ExecError, Module};

const HEAD: &str = ".version 8.5\n.target sm_80\n.address_size 64\n";

fn run_one(body: &str, regs: &str, out_words: usize, block: u32) -> Result<Vec<u32>, ExecError> {
    let src = format!(
        "{HEAD}.visible .entry k(.param .u64 out)\n{{\n.reg .pred %p<8>;\n.reg .b32 %r<32>;\n.reg .b64 %rd<16>;\n.reg .f32 %f<8>;\n{regs}\n.shared .align 16 .b8 sm[256];\n.local .align 8 .b8 lm[64];\nld.param.u64 %rd1, [out];\nmov.u32 %r0, %tid.x;\n{body}\nret;\n}}\n"
    );
    let m = Module::parse(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let mem = DeviceMemory::new();
    let out = mem.alloc((out_words * 4) as u64).unwrap();
    launch(&m, &mem, "k", [1, 1, 1], [block, 1, 1], &[A::U64(out)])?;
    Ok(download_u32(&mem, out, out_words))
}

#[test]
fn vectors_generic_shared_and_local() {
    // Each thread writes a v4 into shared via a generic pointer, reads it back through the
    // shared window, stages it in local memory and stores it out as v2 pairs.
    let body = "
        mov.u32 %r1, sm;
        shl.b32 %r2, %r0, 4;
        add.u32 %r3, %r1, %r2;
        cvt.u64.u32 %rd2, %r3;
        cvta.shared.u64 %rd3, %rd2;
        add.u32 %r4, %r0, 100;
        add.u32 %r5, %r0, 200;
        st.v4.u32 [%rd3], {%r0, %r4, %r5, %r2};
        bar.sync 0;
        ld.shared.v4.u32 {%r6, %r7, %r8, %r9}, [%r3];
        mov.u64 %rd4, lm;
        cvta.local.u64 %rd5, %rd4;
        st.u32 [%rd5+12], %r7;
        ld.local.u32 %r10, [lm+12];
        mul.wide.u32 %rd6, %r0, 16;
        add.s64 %rd7, %rd1, %rd6;
        st.global.v2.u32 [%rd7], {%r6, %r10};
        st.global.v2.u32 [%rd7+8], {%r8, %r9};";
    let got = run_one(body, "", 64, 16).unwrap();
    for t in 0..16u32 {
        assert_eq!(
            &got[t as usize * 4..t as usize * 4 + 4],
            &[t, t + 100, t + 200, t * 16]
        );
    }
}

#[test]
fn predicates_dual_destinations_and_selects() {
    let body = "
        setp.lt.u32 %p1|%p2, %r0, 5;
        setp.ne.and.u32 %p3, %r0, 2, %p1;
        selp.u32 %r1, 10, 20, %p2;
        selp.u32 %r2, 1, 0, %p3;
        not.pred %p4, %p3;
        @%p4 add.u32 %r2, %r2, 100;
        mov.b64 %rd2, {%r1, %r2};
        mov.b64 {%r3, %r4}, %rd2;
        add.u32 %r5, %r3, %r4;
        mul.wide.u32 %rd3, %r0, 4;
        add.s64 %rd4, %rd1, %rd3;
        st.global.u32 [%rd4], %r5;";
    let got = run_one(body, "", 8, 8).unwrap();
    for t in 0..8u32 {
        let p1 = t < 5;
        let p3 = t != 2 && p1;
        let r1 = if !p1 { 10 } else { 20 };
        let r2 = if p3 { 1 } else { 100 };
        assert_eq!(got[t as usize], r1 + r2, "t={t}");
    }
}

fn fault_message(body: &str) -> (u32, String) {
    match run_one(body, "", 4, 32) {
        Err(ExecError::Fault { site, message }) => (site.line, message),
        other => panic!("expected a fault, got {other:?}"),
    }
}

#[test]
fn memory_faults() {
    // Shared out of range (the fast path must fall back and report it).
    let (_, m) = fault_message("mov.u32 %r1, 256; ld.shared.u32 %r2, [%r1];");
    assert!(m.contains("shared"), "{m}");
    let (_, m) = fault_message("mov.u32 %r1, 252; st.shared.v2.u32 [%r1], {%r0, %r0};");
    assert!(m.contains("misaligned"), "{m}");
    // Misaligned global access.
    let (_, m) = fault_message("ld.global.u32 %r2, [%rd1+2];");
    assert!(m.contains("misaligned"), "{m}");
    // Local beyond the declared frame.
    let (_, m) = fault_message("ld.local.u32 %r2, [lm+64];");
    assert!(m.contains("out-of-bounds"), "{m}");
    // Kernel params are read-only; reading past them faults.
    let (_, m) = fault_message("st.param.u32 [out], %r0;");
    assert!(m.contains("read-only"), "{m}");
    let (_, m) = fault_message("ld.param.u32 %r2, [out+8];");
    assert!(m.contains("out-of-bounds"), "{m}");
    // A generic pointer into nothing.
    let (_, m) = fault_message("mov.u64 %rd2, 0x7fff00000000; ld.u32 %r2, [%rd2];");
    assert!(m.contains("out-of-bounds"), "{m}");
    let (_, m) = fault_message("trap;");
    assert!(m.contains("trap"), "{m}");
}

#[test]
fn guarded_exit_and_reconvergence() {
    // Odd lanes exit early; the even ones continue through a loop whose trip count differs per
    // lane, then all remaining lanes ballot together.
    let body = "
        and.b32 %r1, %r0, 1;
        setp.ne.u32 %p1, %r1, 0;
        @%p1 exit;
        mov.u32 %r2, 0;
        $loop:
        add.u32 %r2, %r2, 1;
        setp.lt.u32 %p2, %r2, %r0;
        @%p2 bra $loop;
        activemask.b32 %r3;
        mul.wide.u32 %rd3, %r0, 4;
        add.s64 %rd4, %rd1, %rd3;
        add.u32 %r4, %r2, %r3;
        st.global.u32 [%rd4], %r4;";
    let got = run_one(body, "", 32, 32).unwrap();
    for t in 0..32u32 {
        let want = if t % 2 == 1 {
            0
        } else {
            t.max(1).wrapping_add(0x5555_5555)
        };
        assert_eq!(got[t as usize], want, "t={t}");
    }
}

#[test]
fn recursion_is_refused_at_load() {
    let src = format!(
        "{HEAD}.func (.param .b32 r) f(.param .b32 a)\n{{\n.reg .b32 %r<3>;\nld.param.b32 %r1, [a];\n{{\n.param .b32 p;\nst.param.b32 [p], %r1;\n.param .b32 q;\ncall.uni (q), f, (p);\nld.param.b32 %r2, [q];\n}}\nst.param.b32 [r], %r2;\nret;\n}}\n"
    );
    let e = Module::parse(&src).err().expect("recursion must not load");
    assert!(e.message.contains("recursive"), "{e}");
    assert_eq!(e.line, 12);
}
