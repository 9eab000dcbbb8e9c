//! The `.approx` (and `div.full`) instructions against the error bounds APPROX.md documents
//! (PTX ISA's own numbers), the special-case tables PTX gives for each, and `.ftz`.
//!
//! The emulator computes these correctly rounded, so it is well inside every bound; these tests
//! make the documented bounds a checked contract (a later, GPU-faithful algorithm must still meet
//! them) and pin the special cases, which are exact on the GPU too.

use crate::support::*;
use tasklet_ptx::{DeviceMemory, Module};

/// One f32 input per thread; 12 results per input, in this order.
const F32_OPS: &[&str] = &[
    "sin.approx.f32",
    "cos.approx.f32",
    "ex2.approx.f32",
    "lg2.approx.f32",
    "rcp.approx.f32",
    "sqrt.approx.f32",
    "rsqrt.approx.f32",
    "tanh.approx.f32",
    "div.approx.f32 (x / 3)",
    "div.full.f32 (pi / x)",
    "ex2.approx.ftz.f32",
    "rcp.approx.ftz.f32",
];

const PTX: &str = r#"
.version 8.0
.target sm_80
.address_size 64

.visible .entry f32ops(.param .u64 pin, .param .u64 pout, .param .u32 n)
{
    .reg .pred %p;
    .reg .b32 %r<4>;
    .reg .b64 %rd<6>;
    .reg .f32 %f<16>;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r1, %r1, %r2, %r3;
    ld.param.u32 %r2, [n];
    setp.ge.u32 %p, %r1, %r2;
    @%p ret;
    ld.param.u64 %rd1, [pin];
    ld.param.u64 %rd2, [pout];
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    mul.wide.u32 %rd3, %r1, 48;
    add.s64 %rd5, %rd2, %rd3;
    sin.approx.f32 %f2, %f1;
    st.global.f32 [%rd5], %f2;
    cos.approx.f32 %f2, %f1;
    st.global.f32 [%rd5+4], %f2;
    ex2.approx.f32 %f2, %f1;
    st.global.f32 [%rd5+8], %f2;
    lg2.approx.f32 %f2, %f1;
    st.global.f32 [%rd5+12], %f2;
    rcp.approx.f32 %f2, %f1;
    st.global.f32 [%rd5+16], %f2;
    sqrt.approx.f32 %f2, %f1;
    st.global.f32 [%rd5+20], %f2;
    rsqrt.approx.f32 %f2, %f1;
    st.global.f32 [%rd5+24], %f2;
    tanh.approx.f32 %f2, %f1;
    st.global.f32 [%rd5+28], %f2;
    div.approx.f32 %f2, %f1, 0f40400000;
    st.global.f32 [%rd5+32], %f2;
    div.full.f32 %f2, 0f40490FDB, %f1;
    st.global.f32 [%rd5+36], %f2;
    ex2.approx.ftz.f32 %f2, %f1;
    st.global.f32 [%rd5+40], %f2;
    rcp.approx.ftz.f32 %f2, %f1;
    st.global.f32 [%rd5+44], %f2;
    ret;
}

.visible .entry divapprox(.param .u64 pa, .param .u64 pb, .param .u64 pout)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<8>;
    .reg .f32 %f<4>;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd1, %r1, 4;
    ld.param.u64 %rd2, [pa];
    ld.param.u64 %rd3, [pb];
    ld.param.u64 %rd4, [pout];
    add.s64 %rd2, %rd2, %rd1;
    add.s64 %rd3, %rd3, %rd1;
    add.s64 %rd4, %rd4, %rd1;
    ld.global.f32 %f1, [%rd2];
    ld.global.f32 %f2, [%rd3];
    div.approx.f32 %f3, %f1, %f2;
    st.global.f32 [%rd4], %f3;
    ret;
}

.visible .entry f64ops(.param .u64 pin, .param .u64 pout)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<6>;
    .reg .f64 %fd<4>;
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [pin];
    ld.param.u64 %rd2, [pout];
    mul.wide.u32 %rd3, %r1, 8;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.f64 %fd1, [%rd4];
    mul.wide.u32 %rd3, %r1, 16;
    add.s64 %rd5, %rd2, %rd3;
    rcp.approx.ftz.f64 %fd2, %fd1;
    st.global.f64 [%rd5], %fd2;
    rsqrt.approx.f64 %fd2, %fd1;
    st.global.f64 [%rd5+8], %fd2;
    ret;
}

.visible .entry f16ops(.param .u64 pin, .param .u64 pout)
{
    .reg .b16 %h<3>;
    .reg .b32 %r<2>;
    .reg .b64 %rd<6>;
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [pin];
    ld.param.u64 %rd2, [pout];
    mul.wide.u32 %rd3, %r1, 2;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.b16 %h1, [%rd4];
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd5, %rd2, %rd3;
    ex2.approx.f16 %h2, %h1;
    st.global.b16 [%rd5], %h2;
    tanh.approx.f16 %h2, %h1;
    st.global.b16 [%rd5+2], %h2;
    ret;
}
"#;

/// ulp distance between two f32 (same-sign ordering; +0 and -0 are 0 apart).
fn ulp_dist(a: f32, b: f32) -> u64 {
    let o = |x: f32| {
        let b = x.to_bits();
        if b & 0x8000_0000 != 0 {
            -((b & 0x7fff_ffff) as i64)
        } else {
            b as i64
        }
    };
    (o(a) - o(b)).unsigned_abs()
}

/// Error of `got` against the true value in ulps of the true value's f32 binade.
fn ulps_vs_true(got: f32, truth: f64) -> f64 {
    let t = truth as f32;
    if t.is_infinite() || got.is_infinite() {
        return if got == t { 0.0 } else { f64::INFINITY };
    }
    let mag = (truth.abs() as f32).max(f32::MIN_POSITIVE);
    let ulp = (f32::from_bits(mag.to_bits() + 1) - mag) as f64;
    (got as f64 - truth).abs() / ulp
}

fn inputs() -> Vec<f32> {
    let mut rng = Rng(0xa9970);
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        2.0,
        1.5,
        0.75,
        1e-3,
        -1e-3,
        3.0,
        -3.0,
        10.0,
        -10.0,
        100.0,
        -100.0,
        126.9,
        127.99,
        -125.5,
        -126.5,
        -149.0,
        -150.0,
        200.0,
        -200.0,
        1e-39,
        -1e-39,
        1e-45,
        3e38,
        -3e38,
        1e30,
        1e-30,
        std::f32::consts::TAU,
        -std::f32::consts::TAU,
        std::f32::consts::PI,
        -std::f32::consts::PI,
        314.0,
        -314.0,
        1e6,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        9.0,
        20.0,
        -20.0,
    ];
    while v.len() < 2000 {
        let e = (rng.next_u32() % 60) as i32 - 30;
        v.push(rng.f32() * 2f32.powi(e));
    }
    for i in 0..200 {
        v.push(-7.0 + i as f32 * 0.07); // dense near 0 for sin/cos/tanh/lg2
    }
    v
}

fn run_f32(x: &[f32]) -> Vec<f32> {
    let m = Module::parse(PTX).unwrap();
    let mem = DeviceMemory::new();
    let pin = upload_f32(&mem, x);
    let pout = mem.alloc((x.len() * 48) as u64).unwrap();
    let n = x.len() as u32;
    launch(
        &m,
        &mem,
        "f32ops",
        [n.div_ceil(128), 1, 1],
        [128, 1, 1],
        &[A::U64(pin), A::U64(pout), A::U32(n)],
    )
    .unwrap();
    download_f32(&mem, pout, x.len() * 12)
}

#[test]
fn f32_approx_ops_meet_their_documented_bounds() {
    let x = inputs();
    let got = run_f32(&x);
    let mut worst = [0f64; 12];
    for (i, &v) in x.iter().enumerate() {
        let r = |k: usize| got[i * 12 + k];
        let xv = v as f64;
        if v.is_nan() {
            for (k, name) in F32_OPS.iter().enumerate() {
                assert!(r(k).is_nan(), "{name}({v}) = {}", r(k));
            }
            continue;
        }
        let mut check = |k: usize, ok: bool, err: f64| {
            worst[k] = worst[k].max(err);
            assert!(
                ok,
                "{}({v:e}) = {:e} ({err} over its bound)",
                F32_OPS[k],
                r(k)
            );
        };
        // sin/cos: absolute error 2^-20.5 on [-2pi, 2pi], 2^-14.7 on [-100pi, 100pi].
        for (k, t) in [(0, xv.sin()), (1, xv.cos())] {
            if v.is_infinite() {
                check(k, r(k).is_nan(), 0.0);
            } else if xv.abs() <= 100.0 * std::f64::consts::PI {
                let bound = if xv.abs() <= 2.0 * std::f64::consts::PI {
                    2f64.powf(-20.5)
                } else {
                    2f64.powf(-14.7)
                };
                let e = (r(k) as f64 - t).abs();
                check(k, e <= bound, e / bound);
            }
        }
        // ex2: 2 ulp from the correctly rounded result, full range.
        let cr = (xv.exp2()) as f32;
        let e = ulp_dist(r(2), cr) as f64;
        check(2, e <= 2.0, e / 2.0);
        // lg2: absolute 2^-22 on (0.5, 2), relative 2^-22 elsewhere (positive finite).
        if v > 0.0 && v.is_finite() {
            let t = xv.log2();
            let e = (r(3) as f64 - t).abs();
            let bound = if xv > 0.5 && xv < 2.0 {
                2f64.powi(-22)
            } else {
                2f64.powi(-22) * t.abs()
            };
            check(3, e <= bound, e / bound);
        }
        // rcp: 1 ulp, full range.
        let e = ulp_dist(r(4), (1.0 / xv) as f32) as f64;
        check(4, e <= 1.0 || (v.is_infinite() && r(4) == 0.0), e);
        // sqrt and rsqrt: relative 2^-23 and 2^-22.9 over the positive finite range.
        if v > 0.0 && v.is_finite() {
            let t = xv.sqrt();
            let e = (r(5) as f64 - t).abs() / t;
            check(5, e <= 2f64.powi(-23), e / 2f64.powi(-23));
            let t = 1.0 / xv.sqrt();
            let e = (r(6) as f64 - t).abs() / t;
            check(6, e <= 2f64.powf(-22.9), e / 2f64.powf(-22.9));
        }
        // tanh: relative 2^-11 over the whole range.
        let t = xv.tanh();
        let e = if t == 0.0 {
            (r(7) as f64).abs()
        } else {
            (r(7) as f64 - t).abs() / t.abs()
        };
        check(7, e <= 2f64.powi(-11), e / 2f64.powi(-11));
        // div.approx: 2 ulp for |b| in [2^-126, 2^126] (b = 3 here); div.full: 2 ulp everywhere.
        let e = ulps_vs_true(r(8), xv / 3.0);
        check(8, e <= 2.0, e / 2.0);
        let pi = std::f32::consts::PI as f64;
        let e = if v == 0.0 || v.is_infinite() {
            ulp_dist(r(9), (pi / xv) as f32) as f64
        } else {
            ulps_vs_true(r(9), pi / xv)
        };
        check(9, e <= 2.0, e / 2.0);
        // ftz variants: the same bounds on normal results; subnormal inputs and results are zeros.
        let xf = if v.abs() < f32::MIN_POSITIVE {
            0.0f64.copysign(xv)
        } else {
            xv
        };
        let t = xf.exp2() as f32;
        let t = if t.abs() < f32::MIN_POSITIVE { 0.0 } else { t };
        let e = ulp_dist(r(10), t) as f64;
        check(10, e <= 2.0, e / 2.0);
        let t = (1.0 / xf) as f32;
        let t = if t.abs() < f32::MIN_POSITIVE {
            0.0f32.copysign(t)
        } else {
            t
        };
        let e = ulp_dist(r(11), t) as f64;
        check(11, e <= 1.0, e);
    }
    // Correctly rounded in the emulator: far inside every bound.
    for (k, w) in worst.iter().enumerate() {
        assert!(*w <= 0.51, "{}: {w} of its bound used", F32_OPS[k]);
    }
}

#[test]
fn f32_special_cases_follow_the_ptx_tables() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let x = [f32::NEG_INFINITY, -0.0, 0.0, inf, -2.0, 6e-39, -6e-39];
    let got = run_f32(&x);
    let r = |i: usize, k: usize| got[i * 12 + k];
    let same = |a: f32, b: f32| (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits();
    // [input index][op] = expected, per the PTX ISA tables (None: no table entry).
    let table: [(usize, usize, f32); 27] = [
        (0, 0, nan),
        (1, 0, -0.0),
        (2, 0, 0.0),
        (3, 0, nan), // sin
        (0, 1, nan),
        (1, 1, 1.0),
        (2, 1, 1.0),
        (3, 1, nan), // cos
        (0, 2, 0.0),
        (1, 2, 1.0),
        (2, 2, 1.0),
        (3, 2, inf), // ex2
        (0, 3, nan),
        (4, 3, nan),
        (1, 3, -inf),
        (2, 3, -inf),
        (3, 3, inf), // lg2
        (0, 4, -0.0),
        (1, 4, -inf),
        (2, 4, inf),
        (3, 4, 0.0), // rcp
        (0, 6, nan),
        (4, 6, nan),
        (1, 6, -inf), // rsqrt
        (0, 7, -1.0),
        (1, 7, -0.0),
        (3, 7, 1.0), // tanh
    ];
    for (i, k, want) in table {
        assert!(
            same(r(i, k), want),
            "{}({}) = {} (want {want})",
            F32_OPS[k],
            x[i],
            r(i, k)
        );
    }
    for (i, want) in [(2, 0.0f32), (3, inf), (1, -0.0), (0, nan), (4, nan)] {
        assert!(same(r(i, 5), want), "sqrt.approx({}) = {}", x[i], r(i, 5));
    }
    assert_eq!(r(2, 6), inf, "rsqrt(+0)");
    assert_eq!(r(3, 6), 0.0, "rsqrt(+inf)");
    // tanh passes subnormals through; the non-ftz ops keep subnormal inputs.
    assert_eq!(r(5, 7).to_bits(), 6e-39f32.to_bits(), "tanh(subnormal)");
    assert_eq!(r(6, 7).to_bits(), (-6e-39f32).to_bits(), "tanh(-subnormal)");
    assert!(
        r(5, 4).is_finite() && r(5, 4) > 1e38,
        "rcp(6e-39) is finite without .ftz: {}",
        r(5, 4)
    );
    // .ftz: subnormal inputs are zeros of the same sign.
    assert_eq!(r(5, 11), inf, "rcp.approx.ftz(+subnormal)");
    assert_eq!(r(6, 11), -inf, "rcp.approx.ftz(-subnormal)");
    assert_eq!(r(5, 10), 1.0, "ex2.approx.ftz(subnormal)");
}

#[test]
fn div_approx_zeroes_beyond_2_pow_126() {
    let m = Module::parse(PTX).unwrap();
    let mem = DeviceMemory::new();
    let big = 2f32.powi(126) * 1.5;
    let a = [1.0f32, -3e38, f32::INFINITY, 5.0, 7.0, 1.0, 1e30, 0.0];
    let b = [big, big, big, -big, 2f32.powi(126), 3.0, 1e-30, 0.0];
    let (pa, pb) = (upload_f32(&mem, &a), upload_f32(&mem, &b));
    let po = mem.alloc(4 * a.len() as u64).unwrap();
    launch(
        &m,
        &mem,
        "divapprox",
        [1, 1, 1],
        [a.len() as u32, 1, 1],
        &[A::U64(pa), A::U64(pb), A::U64(po)],
    )
    .unwrap();
    let got = download_f32(&mem, po, a.len());
    assert_eq!(got[0].to_bits(), 0.0f32.to_bits());
    assert_eq!(got[1].to_bits(), (-0.0f32).to_bits());
    assert!(got[2].is_nan(), "inf / big = NaN for div.approx");
    assert_eq!(got[3].to_bits(), (-0.0f32).to_bits());
    // |b| = 2^126 is still in range: an ordinary quotient.
    assert_eq!(got[4], 7.0 / 2f32.powi(126));
    assert!(ulp_dist(got[5], 1.0 / 3.0) <= 2);
    assert!(ulp_dist(got[6], 1e30 / 1e-30) <= 2 || got[6].is_infinite());
    assert!(got[7].is_nan());
}

#[test]
fn f64_and_f16_approx_ops() {
    let m = Module::parse(PTX).unwrap();
    let mem = DeviceMemory::new();
    let mut rng = Rng(77);
    let mut x: Vec<f64> = vec![
        1.0,
        3.0,
        0.1,
        1e300,
        1e-300,
        7.5e-310,
        -2.0,
        f64::INFINITY,
        -0.0,
    ];
    while x.len() < 256 {
        x.push(rng.f32() as f64 * 10f64.powi((rng.next_u32() % 40) as i32 - 20));
    }
    let px = upload_bytes(
        &mem,
        &x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>(),
    );
    let po = mem.alloc((x.len() * 16) as u64).unwrap();
    launch(
        &m,
        &mem,
        "f64ops",
        [1, 1, 1],
        [x.len() as u32, 1, 1],
        &[A::U64(px), A::U64(po)],
    )
    .unwrap();
    let b = download_bytes(&mem, po, x.len() * 16);
    let g = |i: usize, k: usize| f64::from_le_bytes(b[(i * 2 + k) * 8..][..8].try_into().unwrap());
    for (i, &v) in x.iter().enumerate() {
        // rcp.approx.ftz.f64: a 1.11.20 approximation, so relative error within 2^-20; subnormal
        // inputs flush to a signed zero (so an infinite result).
        let r = g(i, 0);
        if v != 0.0 && v.abs() < f64::MIN_POSITIVE {
            assert_eq!(r, f64::INFINITY.copysign(v), "rcp.approx.ftz.f64({v:e})");
        } else if v.is_infinite() || v == 0.0 {
            assert_eq!(r, 1.0 / v, "rcp.approx.ftz.f64({v:e})");
        } else {
            assert!(
                ((r - 1.0 / v) * v).abs() <= 2f64.powi(-20),
                "rcp.approx.ftz.f64({v:e}) = {r:e}"
            );
        }
        // rsqrt.approx.f64: relative 2^-22.9 is f32's bound; the f64 form is at least as good.
        let r = g(i, 1);
        if v > 0.0 && v.is_finite() {
            let t = 1.0 / v.sqrt();
            assert!(
                (r - t).abs() / t <= 2f64.powf(-22.9),
                "rsqrt.approx.f64({v:e}) = {r:e}"
            );
        } else if v < 0.0 {
            assert!(r.is_nan(), "rsqrt.approx.f64({v})");
        }
    }
    // f16: ex2.approx.f16 and tanh.approx.f16 within 1 half-ulp-ish of the true value.
    let halves: Vec<u16> = (0..512u32)
        .map(|i| (((i & 1) << 15) | ((8 + (i >> 1) % 13) << 10) | (i * 37 % 1024)) as u16)
        .collect();
    let ph = upload_bytes(
        &mem,
        &halves
            .iter()
            .flat_map(|h| h.to_le_bytes())
            .collect::<Vec<_>>(),
    );
    let po = mem.alloc((halves.len() * 4) as u64).unwrap();
    launch(
        &m,
        &mem,
        "f16ops",
        [1, 1, 1],
        [halves.len() as u32, 1, 1],
        &[A::U64(ph), A::U64(po)],
    )
    .unwrap();
    let out = download_bytes(&mem, po, halves.len() * 4);
    let h = |bits: u16| {
        let s = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
        let e = ((bits >> 10) & 0x1f) as i32;
        let m = (bits & 0x3ff) as f64;
        s * if e == 0 {
            m * 2f64.powi(-24)
        } else if e == 31 {
            f64::INFINITY
        } else {
            (1.0 + m / 1024.0) * 2f64.powi(e - 15)
        }
    };
    for (i, &hb) in halves.iter().enumerate() {
        let xv = h(hb);
        for (k, t) in [(0, xv.exp2()), (1, xv.tanh())] {
            let got = h(u16::from_le_bytes([
                out[i * 4 + k * 2],
                out[i * 4 + k * 2 + 1],
            ]));
            if t.abs() > 65504.0 {
                assert!(got.is_infinite(), "f16 op {k}({xv}) = {got}");
                continue;
            }
            // Half precision: 2^-11 relative (plus the smallest subnormal for results near 0).
            assert!(
                (got - t).abs() <= t.abs() * 2f64.powi(-10) + 2f64.powi(-24),
                "f16 op {k}({xv}) = {got}, want {t}"
            );
        }
    }
}
