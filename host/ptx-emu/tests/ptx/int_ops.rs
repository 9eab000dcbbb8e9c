//! Integer instructions added after the corpus: `mul24.hi`, `mad24.hi`, `dp2a.lo/.hi` (found
//! missing by the fuzzer's grammar), against reference implementations.

use crate::support::*;
use tasklet_ptx::{DeviceMemory, Module};

const PTX: &str = r#"
.version 8.0
.target sm_80
.address_size 64

.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pout)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<10>;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd1, %r1, 4;
    ld.param.u64 %rd2, [pa];
    ld.param.u64 %rd3, [pb];
    ld.param.u64 %rd4, [pc];
    add.s64 %rd2, %rd2, %rd1;
    add.s64 %rd3, %rd3, %rd1;
    add.s64 %rd4, %rd4, %rd1;
    ld.global.u32 %r2, [%rd2];
    ld.global.u32 %r3, [%rd3];
    ld.global.u32 %r4, [%rd4];
    ld.param.u64 %rd5, [pout];
    mul.wide.u32 %rd6, %r1, 40;
    add.s64 %rd5, %rd5, %rd6;
    mul24.hi.u32 %r5, %r2, %r3;
    st.global.u32 [%rd5], %r5;
    mul24.hi.s32 %r5, %r2, %r3;
    st.global.u32 [%rd5+4], %r5;
    mad24.hi.u32 %r5, %r2, %r3, %r4;
    st.global.u32 [%rd5+8], %r5;
    mad24.hi.s32 %r5, %r2, %r3, %r4;
    st.global.u32 [%rd5+12], %r5;
    dp2a.lo.u32.u32 %r5, %r2, %r3, %r4;
    st.global.u32 [%rd5+16], %r5;
    dp2a.hi.s32.s32 %r5, %r2, %r3, %r4;
    st.global.u32 [%rd5+20], %r5;
    dp2a.lo.s32.u32 %r5, %r2, %r3, %r4;
    st.global.u32 [%rd5+24], %r5;
    dp2a.hi.u32.s32 %r5, %r2, %r3, %r4;
    st.global.u32 [%rd5+28], %r5;
    mul24.lo.s32 %r5, %r2, %r3;
    st.global.u32 [%rd5+32], %r5;
    dp4a.s32.u32 %r5, %r2, %r3, %r4;
    st.global.u32 [%rd5+36], %r5;
    ret;
}
"#;

fn mul24(a: u32, b: u32, signed: bool) -> i64 {
    if signed {
        (((a << 8) as i32 >> 8) as i64) * (((b << 8) as i32 >> 8) as i64)
    } else {
        (a & 0xff_ffff) as i64 * (b & 0xff_ffff) as i64
    }
}

fn dp2a(a: u32, b: u32, c: u32, hi: bool, sa: bool, sb: bool) -> u32 {
    let mut acc = c;
    for k in 0..2 {
        let h = (a >> (16 * k)) & 0xffff;
        let y = (b >> (8 * (k + 2 * hi as u32))) & 0xff;
        let h = if sa { h as u16 as i16 as i32 } else { h as i32 };
        let y = if sb { y as u8 as i8 as i32 } else { y as i32 };
        acc = acc.wrapping_add(h.wrapping_mul(y) as u32);
    }
    acc
}

fn dp4a(a: u32, b: u32, c: u32, sa: bool, sb: bool) -> u32 {
    let mut acc = c;
    for k in 0..4 {
        let x = (a >> (8 * k)) & 0xff;
        let y = (b >> (8 * k)) & 0xff;
        let x = if sa { x as u8 as i8 as i32 } else { x as i32 };
        let y = if sb { y as u8 as i8 as i32 } else { y as i32 };
        acc = acc.wrapping_add(x.wrapping_mul(y) as u32);
    }
    acc
}

#[test]
fn mul24_hi_mad24_hi_dp2a() {
    let m = Module::parse(PTX).unwrap();
    let mem = DeviceMemory::new();
    let mut rng = Rng(2424);
    let n = 256;
    let mut a: Vec<u32> = vec![0, 0xff_ffff, 0x80_0000, 0xffff_ffff, 0x7f_ffff, 0x1234_5678];
    let mut b: Vec<u32> = vec![0, 0xff_ffff, 0x80_0000, 0xffff_ffff, 0x80_0000, 0x9abc_def0];
    while a.len() < n {
        a.push(rng.next_u32());
        b.push(rng.next_u32());
    }
    let c: Vec<u32> = (0..n).map(|_| rng.next_u32()).collect();
    let (pa, pb, pc) = (
        upload_u32(&mem, &a),
        upload_u32(&mem, &b),
        upload_u32(&mem, &c),
    );
    let po = mem.alloc(n as u64 * 40).unwrap();
    launch(
        &m,
        &mem,
        "k",
        [1, 1, 1],
        [n as u32, 1, 1],
        &[A::U64(pa), A::U64(pb), A::U64(pc), A::U64(po)],
    )
    .unwrap();
    let got = download_u32(&mem, po, n * 10);
    for i in 0..n {
        let (x, y, z) = (a[i], b[i], c[i]);
        let want = [
            (mul24(x, y, false) >> 16) as u32,
            (mul24(x, y, true) >> 16) as u32,
            ((mul24(x, y, false) >> 16) as u32).wrapping_add(z),
            ((mul24(x, y, true) >> 16) as u32).wrapping_add(z),
            dp2a(x, y, z, false, false, false),
            dp2a(x, y, z, true, true, true),
            dp2a(x, y, z, false, true, false),
            dp2a(x, y, z, true, false, true),
            mul24(x, y, true) as u32,
            dp4a(x, y, z, true, false),
        ];
        assert_eq!(
            &got[i * 10..i * 10 + 10],
            &want,
            "a={x:#x} b={y:#x} c={z:#x}"
        );
    }
}

#[test]
fn dp2a_needs_a_half_selector_and_int_types() {
    for (inst, needle) in [
        ("dp2a.u32.u32 %r1, %r1, %r1, %r1;", ".lo or .hi"),
        ("dp2a.lo.f32.u32 %r1, %r1, %r1, %r1;", ".u32 or .s32"),
        ("mul24.wide.u32 %r1, %r1, %r1;", "mul24"),
        ("dp4a.u32.u32 %r1, %r1, %r1;", "operand"),
    ] {
        let src = format!(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{{\n.reg .b32 %r<2>;\n{inst}\nret;\n}}\n");
        let e = Module::parse(&src)
            .err()
            .unwrap_or_else(|| panic!("{inst} should not load"));
        assert_eq!(e.line, 7, "{inst}: {e}");
        assert!(e.message.contains(needle), "{inst}: {e}");
    }
}
