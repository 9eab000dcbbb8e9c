//! Runs every corpus kernel (kernels/*.ptx, kernels/nvrtc12/*.ptx) on fixed pseudo-random inputs
//! on the emulator and prints a JSON document with, per launch, the PTX file, kernel, launch
//! shape, argument block, every buffer's input bytes, the emulator's output bytes, and how each
//! output is to be compared. kernels/diff/gpu_outputs.py replays the same launches with the same
//! inputs (read from this JSON: the Python side generates nothing) on a GPU and
//! kernels/diff/compare.py compares the two. See kernels/diff/README.md.
//!
//!   cargo build --release -p tasklet-benches --bin corpus_outputs
//!   target/release/corpus_outputs > emu.json
//!
//! Comparison rules are set here, next to each kernel: bit-exact for everything IEEE-rounded;
//! for outputs that pass through `.approx` instructions, an ulp (or absolute) bound from
//! host/ptx-emu/APPROX.md; atomics whose final value depends on scheduling are left out.

use std::fmt::Write as _;

use tasklet_ptx::{DeviceMemory, LaunchParams, Module};

const SEED: u64 = 0x7a5c_1e7d_2024;

/// SplitMix64: the inputs' only source of randomness (Python reads the bytes, never regenerates).
struct Rng(u64);
impl Rng {
    fn for_case(name: &str) -> Rng {
        // A per-case stream, so adding a case never changes another's inputs.
        let mut h = SEED;
        for b in name.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        Rng(h)
    }
    fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn u32(&mut self) -> u32 {
        (self.u64() >> 32) as u32
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// How an output buffer is compared with the GPU's.
#[derive(Clone)]
enum Cmp {
    Exact,
    /// Element-wise float comparison: an element passes if its ulp distance is at most
    /// `max_ulp[i % len]`, or its absolute difference at most `max_abs[i % len]`, or its relative
    /// difference at most `max_rel`; elements in `ignore` are skipped. NaN matches any NaN.
    Float {
        elem: &'static str,
        max_ulp: Vec<u64>,
        max_abs: Vec<f64>,
        max_rel: f64,
        ignore: Vec<usize>,
        why: String,
    },
    /// Byte-exact except the listed elements (of `elem_bytes` each).
    ExactExcept {
        elem_bytes: usize,
        ignore: Vec<usize>,
        why: String,
    },
}

struct Buf {
    name: &'static str,
    init: Vec<u8>,
    output: Option<Cmp>,
}

enum Arg {
    Buf(usize),
    U32(u32),
    F32(f32),
    Bytes(Vec<u8>),
}

struct Case {
    module: &'static str,
    kernel: &'static str,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    bufs: Vec<Buf>,
    args: Vec<Arg>,
}

fn bytes_u32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn bytes_u64(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn bytes_f64(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn input(name: &'static str, init: Vec<u8>) -> Buf {
    Buf {
        name,
        init,
        output: None,
    }
}
fn output(name: &'static str, init: Vec<u8>, cmp: Cmp) -> Buf {
    Buf {
        name,
        init,
        output: Some(cmp),
    }
}
/// IEEE-rounded floats: bit-exact, except that any NaN matches any NaN (NaN payloads are not
/// part of the emulator's contract).
fn ieee(elem: &'static str) -> Cmp {
    Cmp::Float {
        elem,
        max_ulp: vec![0],
        max_abs: vec![0.0],
        max_rel: 0.0,
        ignore: vec![],
        why: "IEEE-rounded: bit-exact up to NaN payloads".into(),
    }
}
fn zeros(n: usize) -> Vec<u8> {
    vec![0; n]
}
/// Output buffers start as a pattern, so elements a kernel fails to write differ from zero.
fn pattern(n: usize) -> Vec<u8> {
    vec![0xa5; n]
}

fn f16_to_f64(h: u16) -> f64 {
    let s = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((h >> 10) & 0x1f) as i32;
    let m = (h & 0x3ff) as f64;
    s * match e {
        0 => m * 2f64.powi(-24),
        31 => {
            if m == 0.0 {
                f64::INFINITY
            } else {
                f64::NAN
            }
        }
        _ => (1.0 + m / 1024.0) * 2f64.powi(e - 15),
    }
}

/// A half with a random sign and mantissa and a magnitude in [2^-4, 2^5).
fn rand_half(r: &mut Rng) -> u16 {
    let e = 11 + (r.u32() % 9) as u16;
    ((r.u32() as u16) & 0x8000) | (e << 10) | (r.u32() as u16 & 0x3ff)
}

/// Floats with the interesting values first, then uniform in [-scale, scale).
fn floats(r: &mut Rng, n: usize, scale: f64, specials: &[f32]) -> Vec<f32> {
    let mut v: Vec<f32> = specials.to_vec();
    while v.len() < n {
        v.push((r.unit() * scale) as f32);
    }
    v.truncate(n);
    v
}

fn cases() -> (Vec<Case>, Vec<(&'static str, &'static str)>) {
    let mut c = Vec::new();
    let r = Rng::for_case;

    c.push(Case {
        module: "kernels/iota.ptx",
        kernel: "iota",
        grid: [4, 1, 1],
        block: [256, 1, 1],
        shared: 0,
        bufs: vec![output("out", pattern(1000 * 4), Cmp::Exact)],
        args: vec![Arg::Buf(0), Arg::U32(1000)],
    });
    {
        let mut g = r("fill_linear");
        c.push(Case {
            module: "kernels/vector_add.ptx",
            kernel: "fill_linear",
            grid: [4, 1, 1],
            block: [256, 1, 1],
            shared: 0,
            bufs: vec![output("out", pattern(1024 * 4), Cmp::Exact)],
            args: vec![Arg::Buf(0), Arg::U32(g.u32()), Arg::U32(777)],
        });
        let mut g = r("vector_add");
        let a: Vec<u32> = (0..1000).map(|_| g.u32()).collect();
        let b: Vec<u32> = (0..1000).map(|_| g.u32()).collect();
        c.push(Case {
            module: "kernels/vector_add.ptx",
            kernel: "vector_add",
            grid: [4, 1, 1],
            block: [256, 1, 1],
            shared: 0,
            bufs: vec![
                input("a", bytes_u32(&a)),
                input("b", bytes_u32(&b)),
                output("c", pattern(4000), Cmp::Exact),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::U32(1000)],
        });
    }
    {
        let mut g = r("scale");
        let x = floats(
            &mut g,
            1000,
            1e3,
            &[
                0.0,
                -0.0,
                1e-40,
                -1e-45,
                f32::MAX,
                f32::INFINITY,
                f32::NAN,
                3.4e38,
            ],
        );
        c.push(Case {
            module: "kernels/scale.ptx",
            kernel: "scale",
            grid: [4, 1, 1],
            block: [256, 1, 1],
            shared: 0,
            bufs: vec![output("x", bytes_f32(&x), ieee("f32"))],
            args: vec![Arg::Buf(0), Arg::F32(1.7), Arg::U32(1000)],
        });
    }
    {
        let mut g = r("block_sum");
        let n = 20_000;
        let v: Vec<u32> = (0..n).map(|_| g.u32() % 1000).collect();
        c.push(Case {
            module: "kernels/reduce.ptx",
            kernel: "block_sum",
            grid: [16, 1, 1],
            block: [256, 1, 1],
            shared: 256 * 4,
            bufs: vec![
                input("in", bytes_u32(&v)),
                output("partial", pattern(16 * 4), Cmp::Exact),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1), Arg::U32(n as u32)],
        });
        // Small integers: every partial sum is exact, so the blocks' atomicAdd order cannot matter.
        let f: Vec<f32> = (0..n).map(|_| (g.u32() % 7) as f32).collect();
        c.push(Case {
            module: "kernels/reduce.ptx",
            kernel: "shfl_sum",
            grid: [8, 1, 1],
            block: [192, 1, 1],
            shared: 0,
            bufs: vec![
                input("in", bytes_f32(&f)),
                output("out", zeros(4), Cmp::Exact),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1), Arg::U32(n as u32)],
        });
        let m: Vec<u32> = (0..n).map(|_| g.u32()).collect();
        c.push(Case {
            module: "kernels/reduce.ptx",
            kernel: "max_reduce",
            grid: [13, 1, 1],
            block: [96, 1, 1],
            shared: 0,
            bufs: vec![
                input("in", bytes_u32(&m)),
                output("out", bytes_u32(&[i32::MIN as u32]), Cmp::Exact),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1), Arg::U32(n as u32)],
        });
    }
    {
        let mut g = r("histogram256");
        let n = 10_000;
        let d: Vec<u8> = (0..n)
            .map(|_| (g.u32() % 97 + g.u32() % 160) as u8)
            .collect();
        c.push(Case {
            module: "kernels/histogram.ptx",
            kernel: "histogram256",
            grid: [8, 1, 1],
            block: [128, 1, 1],
            shared: 0,
            bufs: vec![input("data", d), output("bins", zeros(256 * 4), Cmp::Exact)],
            args: vec![Arg::Buf(0), Arg::U32(n as u32), Arg::Buf(1)],
        });
        let u = [0, 1000, 0, u32::MAX, 0, 0, 0, u32::MAX, 0, 0, 0];
        c.push(Case {
            module: "kernels/histogram.ptx",
            kernel: "atomics_mix",
            grid: [4, 1, 1],
            block: [256, 1, 1],
            shared: 0,
            bufs: vec![
                output(
                    "u",
                    bytes_u32(&u),
                    Cmp::ExactExcept {
                        elem_bytes: 4,
                        ignore: vec![10],
                        why: "u[10] is an atomicCAS chain whose length depends on the order threads run".into(),
                    },
                ),
                output("s", bytes_u32(&[i32::MIN as u32, i32::MAX as u32]), Cmp::Exact),
                output("u64", zeros(8), Cmp::Exact),
                output("f", zeros(4), Cmp::Exact),
                output("d", zeros(8), Cmp::Exact),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3), Arg::Buf(4), Arg::U32(1000)],
        });
    }
    {
        let mut g = r("matmul_tiled");
        let (m, n, k) = (40usize, 56usize, 72usize);
        let a: Vec<f32> = (0..m * k).map(|_| g.unit() as f32).collect();
        let b: Vec<f32> = (0..k * n).map(|_| g.unit() as f32).collect();
        c.push(Case {
            module: "kernels/matmul.ptx",
            kernel: "matmul_tiled",
            grid: [n.div_ceil(16) as u32, m.div_ceil(16) as u32, 1],
            block: [16, 16, 1],
            shared: 0,
            bufs: vec![
                input("A", bytes_f32(&a)),
                input("B", bytes_f32(&b)),
                output("C", pattern(m * n * 4), Cmp::Exact),
            ],
            args: vec![
                Arg::Buf(0),
                Arg::Buf(1),
                Arg::Buf(2),
                Arg::U32(m as u32),
                Arg::U32(n as u32),
                Arg::U32(k as u32),
            ],
        });
    }
    {
        let mut g = r("stencil");
        let (w, h) = (50usize, 37usize);
        let f: Vec<f32> = (0..w * h).map(|_| (g.unit() * 100.0) as f32).collect();
        let i: Vec<u32> = (0..w * h)
            .map(|_| (g.u32() % 20001).wrapping_sub(10000))
            .collect();
        for (kernel, data) in [("jacobi5", bytes_f32(&f)), ("box3", bytes_u32(&i))] {
            c.push(Case {
                module: "kernels/stencil.ptx",
                kernel,
                grid: [w.div_ceil(16) as u32, h.div_ceil(16) as u32, 1],
                block: [16, 16, 1],
                shared: 0,
                bufs: vec![
                    input("in", data),
                    output("out", pattern(w * h * 4), Cmp::Exact),
                ],
                args: vec![
                    Arg::Buf(0),
                    Arg::Buf(1),
                    Arg::U32(w as u32),
                    Arg::U32(h as u32),
                ],
            });
        }
    }
    {
        let mut g = r("math64");
        let n = 256usize;
        let edge = [
            0u64,
            1,
            u64::MAX,
            i64::MIN as u64,
            i64::MAX as u64,
            63,
            64,
            1 << 32,
        ];
        let pick = |g: &mut Rng, i: usize| -> u64 {
            match i {
                _ if i < edge.len() * edge.len() && i.is_multiple_of(3) => {
                    edge[(i / 3) % edge.len()]
                }
                _ if g.u32().is_multiple_of(4) => g.u64() >> (g.u32() % 64),
                _ => g.u64(),
            }
        };
        let a: Vec<u64> = (0..n).map(|i| pick(&mut g, i)).collect();
        let b: Vec<u64> = (0..n).map(|i| pick(&mut g, i + 1)).collect();
        c.push(Case {
            module: "kernels/math64.ptx",
            kernel: "int64_ops",
            grid: [2, 1, 1],
            block: [128, 1, 1],
            shared: 0,
            bufs: vec![
                input("a", bytes_u64(&a)),
                input("b", bytes_u64(&b)),
                output("out", pattern(n * 80), Cmp::Exact),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::U32(n as u32)],
        });
        let fspecial = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            5e-324,
            -2.2250738585072014e-308,
            1e308,
            3.0,
        ];
        let mut fa: Vec<f64> = fspecial.to_vec();
        let mut fb: Vec<f64> = fspecial.iter().rev().copied().collect();
        while fa.len() < n {
            let scale = 10f64.powi((g.u32() % 40) as i32 - 20);
            fa.push(g.unit() * scale);
            fb.push(g.unit() * 10f64.powi((g.u32() % 40) as i32 - 20));
        }
        c.push(Case {
            module: "kernels/math64.ptx",
            kernel: "f64_ops",
            grid: [2, 1, 1],
            block: [128, 1, 1],
            shared: 0,
            bufs: vec![
                input("a", bytes_f64(&fa)),
                input("b", bytes_f64(&fb)),
                output("out", pattern(n * 64), ieee("f64")),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::U32(n as u32)],
        });
        let f = floats(
            &mut g,
            n,
            3e9,
            &[
                0.5,
                1.5,
                2.5,
                -0.5,
                -2.5,
                2147483520.0,
                2147483648.0,
                -2147483904.0,
                4294967296.0,
                f32::NAN,
                1e-40,
            ],
        );
        let d: Vec<f64> = (0..n)
            .map(|i| {
                if i < 4 {
                    [0.1, -3.5, 1e300, 2.5][i]
                } else {
                    g.unit() * 10f64.powi((g.u32() % 24) as i32 - 4)
                }
            })
            .collect();
        let k: Vec<u32> = (0..n)
            .map(|i| {
                if i < 3 {
                    [i32::MIN as u32, i32::MAX as u32, 16777217][i]
                } else {
                    g.u32()
                }
            })
            .collect();
        c.push(Case {
            module: "kernels/math64.ptx",
            kernel: "conversions",
            grid: [2, 1, 1],
            block: [128, 1, 1],
            shared: 0,
            bufs: vec![
                input("f", bytes_f32(&f)),
                input("d", bytes_f64(&d)),
                input("k", bytes_u32(&k)),
                output("out", pattern(n * 64), Cmp::Exact),
            ],
            args: vec![
                Arg::Buf(0),
                Arg::Buf(1),
                Arg::Buf(2),
                Arg::Buf(3),
                Arg::U32(n as u32),
            ],
        });
    }
    {
        // struct Params { float scale; int offset; unsigned long long bias; short tag; } (24 bytes)
        let mut p = Vec::new();
        p.extend_from_slice(&2.75f32.to_le_bytes());
        p.extend_from_slice(&12345i32.to_le_bytes());
        p.extend_from_slice(&0x1_0000_0007u64.to_le_bytes());
        p.extend_from_slice(&(-3i16).to_le_bytes());
        p.extend_from_slice(&[0; 6]);
        c.push(Case {
            module: "kernels/calls.ptx",
            kernel: "digits_kernel",
            grid: [2, 1, 1],
            block: [256, 1, 1],
            shared: 0,
            bufs: vec![output("out", pattern(500 * 4), Cmp::Exact)],
            args: vec![Arg::Buf(0), Arg::Bytes(p), Arg::U32(500)],
        });
        let mut g = r("cross_kernel");
        let n = 300;
        let a: Vec<f32> = (0..n * 3).map(|_| (g.unit() * 10.0) as f32).collect();
        c.push(Case {
            module: "kernels/calls.ptx",
            kernel: "cross_kernel",
            grid: [3, 1, 1],
            block: [128, 1, 1],
            shared: 0,
            bufs: vec![
                input("a", bytes_f32(&a)),
                output("out", pattern(n * 12), Cmp::Exact),
            ],
            args: vec![
                Arg::Buf(0),
                Arg::Bytes(bytes_f32(&[0.5, -1.25, 3.0])),
                Arg::Buf(1),
                Arg::U32(n as u32),
            ],
        });
    }
    {
        let mut g = r("half");
        let n = 500usize;
        let a: Vec<u16> = (0..n).map(|_| rand_half(&mut g)).collect();
        let b: Vec<u16> = (0..n).map(|_| rand_half(&mut g)).collect();
        let cc: Vec<u16> = (0..n).map(|_| rand_half(&mut g)).collect();
        let h = |v: &[u16]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        // outf = r + hdiv(a, b): __hdiv goes through rcp.approx.ftz.f32 and rounds to half, so it
        // may land one half-ulp away from the emulator's (correctly rounded) quotient.
        let max_abs: Vec<f64> = (0..n)
            .map(|i| (f16_to_f64(a[i]) / f16_to_f64(b[i])).abs() * 2f64.powi(-10) * 1.01)
            .collect();
        c.push(Case {
            module: "kernels/half.ptx",
            kernel: "half_ops",
            grid: [2, 1, 1],
            block: [256, 1, 1],
            shared: 0,
            bufs: vec![
                input("a", h(&a)),
                input("b", h(&b)),
                input("c", h(&cc)),
                output("out", pattern(n * 2), Cmp::Exact),
                output(
                    "outf",
                    pattern(n * 4),
                    Cmp::Float {
                        elem: "f32",
                        max_ulp: vec![1],
                        max_abs,
                        max_rel: 0.0,
                        ignore: vec![],
                        why: "__hdiv uses rcp.approx.ftz.f32 (1 ulp, APPROX.md) then rounds to half: one half-ulp of the quotient".into(),
                    },
                ),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3), Arg::Buf(4), Arg::U32(n as u32)],
        });
        let a2: Vec<u16> = (0..2 * n).map(|_| rand_half(&mut g)).collect();
        let b2: Vec<u16> = (0..2 * n).map(|_| rand_half(&mut g)).collect();
        c.push(Case {
            module: "kernels/half.ptx",
            kernel: "half2_ops",
            grid: [2, 1, 1],
            block: [256, 1, 1],
            shared: 0,
            bufs: vec![
                input("a", h(&a2)),
                input("b", h(&b2)),
                output("out", pattern(n * 4), Cmp::Exact),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::U32(n as u32)],
        });
    }
    {
        let mut g = r("transcendental");
        let x = floats(
            &mut g,
            256,
            10.0,
            &[
                0.0,
                -0.0,
                1.0,
                -1.0,
                std::f32::consts::PI,
                1e-3,
                9.9,
                -9.9,
                100.0,
                -100.0,
                1e4,
                -87.0,
                88.0,
            ],
        );
        let n = x.len();
        // libm: IEEE-op sequences except where noted; bounds are twice the CUDA Programming
        // Guide's (GPU and emulator each within it of the true value).
        let approx_cols = vec![0, 0, 4, 0, 0, 8, 4, 0];
        c.push(Case {
            module: "kernels/transcendental.ptx",
            kernel: "libm_f32",
            grid: [2, 1, 1],
            block: [128, 1, 1],
            shared: 0,
            bufs: vec![
                input("x", bytes_f32(&x)),
                output(
                    "out",
                    pattern(n * 32),
                    Cmp::Float {
                        elem: "f32",
                        max_ulp: approx_cols,
                        max_abs: vec![0.0],
                        max_rel: 0.0,
                        ignore: vec![],
                        why: "expf (ex2.approx.ftz), powf (rcp.approx.ftz), tanhf (ex2.approx.ftz + rcp.approx.ftz): 2x the guide's 2/4/2 ulp; the rest bit-exact".into(),
                    },
                ),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1), Arg::U32(n as u32)],
        });
        // Intrinsics: the documented bound (APPROX.md) plus 1 ulp for the emulator's rounding.
        let mut max_ulp = Vec::new();
        let mut max_abs = Vec::new();
        let mut ignore = Vec::new();
        for (i, &v) in x.iter().enumerate() {
            let v = v as f64;
            let small = v.abs() <= std::f64::consts::PI;
            if !small {
                ignore.extend([i * 6, i * 6 + 1]);
            }
            let p1 = (v.abs() as f32 + 1.0) as f64;
            max_ulp.extend([
                1,
                1,
                3 + (1.173 * v).abs().floor() as u64,
                if (0.5..=2.0).contains(&p1) { 1 } else { 4 },
                3,
                3,
            ]);
            let log_abs = if (0.5..=2.0).contains(&p1) {
                2f64.powf(-21.41) * 1.01
            } else {
                0.0
            };
            max_abs.extend([
                2f64.powf(-21.41) * 1.01,
                2f64.powf(-21.19) * 1.01,
                0.0,
                log_abs,
                0.0,
                0.0,
            ]);
        }
        c.push(Case {
            module: "kernels/transcendental.ptx",
            kernel: "intrinsics_f32",
            grid: [2, 1, 1],
            block: [128, 1, 1],
            shared: 0,
            bufs: vec![
                input("x", bytes_f32(&x)),
                output(
                    "out",
                    pattern(n * 24),
                    Cmp::Float {
                        elem: "f32",
                        max_ulp,
                        max_abs,
                        max_rel: 0.0,
                        ignore,
                        why: "__sinf/__cosf abs 2^-21.41/2^-21.19 on [-pi, pi] (no bound outside: skipped), __expf 2+floor(|1.173x|) ulp, __logf abs 2^-21.41 on [0.5, 2] else 3 ulp, __fdividef 2 ulp, rsqrtf 2 ulp; +1 ulp".into(),
                    },
                ),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1), Arg::U32(n as u32)],
        });
        let xd: Vec<f64> = (0..200)
            .map(|_| g.unit() * 20.0 + g.unit() * 1e-7)
            .collect();
        c.push(Case {
            module: "kernels/transcendental.ptx",
            kernel: "libm_f64",
            grid: [2, 1, 1],
            block: [128, 1, 1],
            shared: 0,
            bufs: vec![
                input("x", bytes_f64(&xd)),
                output(
                    "out",
                    pattern(200 * 32),
                    Cmp::Float {
                        elem: "f64",
                        max_ulp: vec![0, 0, 2, 0],
                        max_abs: vec![0.0],
                        max_rel: 0.0,
                        ignore: vec![],
                        why: "log goes through rcp.approx.ftz.f64 before its Newton steps: 2x the guide's 1 ulp; sin, exp, sqrt bit-exact".into(),
                    },
                ),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1), Arg::U32(200)],
        });
    }
    {
        c.push(Case {
            module: "kernels/warp.ptx",
            kernel: "divergence",
            grid: [1, 1, 1],
            block: [96, 1, 1],
            shared: 0,
            bufs: vec![output("out", pattern(96 * 4), Cmp::Exact)],
            args: vec![Arg::Buf(0)],
        });
        let mut g = r("votes");
        let v: Vec<u32> = (0..128)
            .map(|i| {
                if i % 9 == 0 {
                    0
                } else {
                    (g.u32() % 301).wrapping_sub(100)
                }
            })
            .collect();
        c.push(Case {
            module: "kernels/warp.ptx",
            kernel: "votes",
            grid: [2, 1, 1],
            block: [64, 1, 1],
            shared: 0,
            bufs: vec![
                input("in", bytes_u32(&v)),
                output("out", pattern(128 * 32), Cmp::Exact),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1)],
        });
        c.push(Case {
            module: "kernels/warp.ptx",
            kernel: "partial_warp",
            grid: [1, 1, 1],
            block: [32, 1, 1],
            shared: 0,
            bufs: vec![output("out", pattern(32 * 4), Cmp::Exact)],
            args: vec![Arg::Buf(0)],
        });
        c.push(Case {
            module: "kernels/warp.ptx",
            kernel: "barrier_after_exit",
            grid: [1, 1, 1],
            block: [96, 1, 1],
            shared: 0,
            bufs: vec![output("out", pattern(96 * 4), Cmp::Exact)],
            args: vec![Arg::Buf(0)],
        });
        let s: Vec<u32> = (0..128)
            .map(|i| [7, 0, (i as u32).wrapping_sub(20), 3][i % 4])
            .collect();
        c.push(Case {
            module: "kernels/warp.ptx",
            kernel: "sync_reduce",
            grid: [1, 1, 1],
            block: [128, 1, 1],
            shared: 0,
            bufs: vec![
                input("in", bytes_u32(&s)),
                output("out", pattern(12), Cmp::Exact),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1)],
        });
    }
    {
        let mut g = r("bits");
        let n = 256;
        let a: Vec<u32> = (0..n)
            .map(|i| {
                if i < 4 {
                    [0, 1, u32::MAX, 0x8000_0000][i]
                } else {
                    g.u32() >> (g.u32() % 32)
                }
            })
            .collect();
        let b: Vec<u32> = (0..n).map(|_| g.u32()).collect();
        c.push(Case {
            module: "kernels/misc.ptx",
            kernel: "bits",
            grid: [2, 1, 1],
            block: [128, 1, 1],
            shared: 0,
            bufs: vec![
                input("a", bytes_u32(&a)),
                input("b", bytes_u32(&b)),
                output("out", pattern(n * 40), Cmp::Exact),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::U32(n as u32)],
        });
        // `lookup` bumps the module's __device__ counter; `read_counter` then reads it (same
        // module instance on both sides, same launch order).
        c.push(Case {
            module: "kernels/misc.ptx",
            kernel: "lookup",
            grid: [1, 1, 1],
            block: [128, 1, 1],
            shared: 0,
            bufs: vec![output("out", pattern(100 * 4), Cmp::Exact)],
            args: vec![Arg::Buf(0), Arg::U32(100)],
        });
        c.push(Case {
            module: "kernels/misc.ptx",
            kernel: "read_counter",
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared: 0,
            bufs: vec![output("out", pattern(4), Cmp::Exact)],
            args: vec![Arg::Buf(0)],
        });
        let ok: Vec<u32> = (0..64).map(|i| i * 3).collect();
        c.push(Case {
            module: "kernels/misc.ptx",
            kernel: "checked",
            grid: [1, 1, 1],
            block: [64, 1, 1],
            shared: 0,
            bufs: vec![input("in", bytes_u32(&ok))],
            args: vec![Arg::Buf(0)],
        });
        c.push(Case {
            module: "kernels/faults.ptx",
            kernel: "empty",
            grid: [3, 1, 1],
            block: [33, 1, 1],
            shared: 0,
            bufs: vec![],
            args: vec![],
        });
    }
    {
        let mut g = r("nvrtc12");
        let n = 3000usize;
        let v: Vec<u32> = (0..n).map(|_| g.u32() % 100).collect();
        c.push(Case {
            module: "kernels/nvrtc12/scan.ptx",
            kernel: "block_scan",
            grid: [n.div_ceil(256) as u32, 1, 1],
            block: [256, 1, 1],
            shared: 0,
            bufs: vec![
                input("in", bytes_u32(&v)),
                output("out", pattern(n * 4), Cmp::Exact),
                output("totals", pattern(n.div_ceil(256) * 4), Cmp::Exact),
            ],
            args: vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::U32(n as u32)],
        });
        let keys: Vec<u64> = (0..n).map(|_| g.u64()).collect();
        c.push(Case {
            module: "kernels/nvrtc12/scan.ptx",
            kernel: "hash_stats",
            grid: [n.div_ceil(128) as u32, 1, 1],
            block: [128, 1, 1],
            shared: 0,
            bufs: vec![
                input("keys", bytes_u64(&keys)),
                output("scaled", pattern(n * 4), Cmp::Exact),
                output("buckets", zeros(64), Cmp::Exact),
            ],
            args: vec![
                Arg::Buf(0),
                Arg::Buf(1),
                Arg::Buf(2),
                Arg::U32(n as u32),
                Arg::F32(1.0 / 1024.0 + 1e-7),
            ],
        });
    }
    let skipped = vec![
        (
            "kernels/faults.ptx:write_out_of_bounds",
            "faults on purpose (a GPU fault ends the context)",
        ),
        ("kernels/faults.ptx:spin_forever", "never ends on purpose"),
        (
            "kernels/warp.ptx:bad_shuffle",
            "warp-op membership error on purpose (undefined on a GPU)",
        ),
        (
            "kernels/warp.ptx:barrier_deadlock",
            "deadlocks on purpose (hangs a GPU)",
        ),
        (
            "kernels/actor.ptx:actor_scale",
            "persistent: serves rings until its host asks it to stop (tests drive it)",
        ),
        (
            "kernels/actor.ptx:actor_fault",
            "persistent, and faults on purpose",
        ),
        (
            "kernels/actor.ptx:actor_deaf",
            "persistent, and never ends on purpose",
        ),
        (
            "kernels/actor.ptx:grid_sum",
            "cooperative: grid.sync traps unless launched as a persistent (cooperative) kernel",
        ),
    ];
    (c, skipped)
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json_f64(v: f64) -> String {
    if v.is_finite() {
        format!("{v:e}")
    } else {
        "1e308".into()
    }
}

fn list<T>(v: &[T], f: impl Fn(&T) -> String) -> String {
    format!("[{}]", v.iter().map(f).collect::<Vec<_>>().join(","))
}

fn cmp_json(c: &Cmp) -> String {
    match c {
        Cmp::Exact => "{\"kind\":\"exact\"}".into(),
        Cmp::ExactExcept { elem_bytes, ignore, why } => format!(
            "{{\"kind\":\"exact\",\"elem_bytes\":{elem_bytes},\"ignore\":{},\"why\":{}}}",
            list(ignore, |x| x.to_string()),
            json_str(why)
        ),
        Cmp::Float { elem, max_ulp, max_abs, max_rel, ignore, why } => format!(
            "{{\"kind\":\"float\",\"elem\":\"{elem}\",\"max_ulp\":{},\"max_abs\":{},\"max_rel\":{},\"ignore\":{},\"why\":{}}}",
            list(max_ulp, |x| x.to_string()),
            list(max_abs, |x| json_f64(*x)),
            json_f64(*max_rel),
            list(ignore, |x| x.to_string()),
            json_str(why)
        ),
    }
}

fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let (cases, skipped) = cases();
    let mut modules: Vec<(&str, Module)> = Vec::new();
    let mut out = String::new();
    let _ = writeln!(out, "{{\"format\":\"tasklet-corpus-outputs/1\",\"device\":\"tasklet PTX emulator\",\"seed\":{SEED},\"cases\":[");
    let mut failures = 0;
    for (ci, case) in cases.iter().enumerate() {
        if !modules.iter().any(|(p, _)| *p == case.module) {
            let path = format!("{root}/{}", case.module);
            let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let m = Module::parse(&src).unwrap_or_else(|e| panic!("{path}: {e}"));
            modules.push((case.module, m));
        }
        let module = &modules
            .iter()
            .find(|(p, _)| *p == case.module)
            .expect("loaded")
            .1;
        let info = module
            .kernels()
            .iter()
            .find(|k| k.name == case.kernel)
            .unwrap_or_else(|| panic!("no kernel {}", case.kernel));
        let (offsets, size) = info.param_layout();
        assert_eq!(
            offsets.len(),
            case.args.len(),
            "{}: argument count",
            case.kernel
        );

        let mem = DeviceMemory::new();
        let addrs: Vec<u64> = case
            .bufs
            .iter()
            .map(|b| {
                let a = mem.alloc(b.init.len().max(1) as u64).expect("alloc");
                mem.write(a, &b.init).expect("write");
                a
            })
            .collect();
        // The argument block with pointer slots zeroed (the GPU side patches in its own).
        let mut block = vec![0u8; size as usize];
        let mut emu_block = vec![0u8; size as usize];
        let mut pointers = Vec::new();
        for (k, arg) in case.args.iter().enumerate() {
            let at = offsets[k] as usize;
            let bytes = match arg {
                Arg::Buf(b) => {
                    pointers.push(format!("{{\"offset\":{at},\"buffer\":{b}}}"));
                    emu_block[at..at + 8].copy_from_slice(&addrs[*b].to_le_bytes());
                    continue;
                }
                Arg::U32(v) => v.to_le_bytes().to_vec(),
                Arg::F32(v) => v.to_le_bytes().to_vec(),
                Arg::Bytes(b) => b.clone(),
            };
            assert!(
                bytes.len() <= info.params[k].size as usize,
                "{}: argument {k} too large",
                case.kernel
            );
            block[at..at + bytes.len()].copy_from_slice(&bytes);
            emu_block[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        let params = LaunchParams {
            grid: case.grid,
            block: case.block,
            shared_mem_bytes: case.shared,
            args: &emu_block,
            step_limit: 1 << 34,
            threads: 0,
        };
        let status = match module.launch(case.kernel, &mem, &params) {
            Ok(_) => "ok".to_string(),
            Err(e) => {
                failures += 1;
                eprintln!("{}:{}: {e}", case.module, case.kernel);
                format!("error: {e}")
            }
        };
        let mut bufs = Vec::new();
        let mut outputs = Vec::new();
        for (bi, b) in case.bufs.iter().enumerate() {
            let mut s = format!(
                "{{\"name\":{},\"bytes\":{},\"input\":\"{}\"",
                json_str(b.name),
                b.init.len(),
                hex(&b.init)
            );
            if let Some(c) = &b.output {
                let _ = write!(s, ",\"compare\":{}", cmp_json(c));
                let mut got = vec![0u8; b.init.len()];
                mem.read(addrs[bi], &mut got).expect("read");
                outputs.push(format!("{}:\"{}\"", json_str(b.name), hex(&got)));
            }
            s.push('}');
            bufs.push(s);
        }
        let _ = write!(
            out,
            "{{\"module\":{},\"kernel\":{},\"grid\":{:?},\"block\":{:?},\"shared_mem_bytes\":{},\"args\":\"{}\",\"pointers\":[{}],\"buffers\":[{}],\"status\":{},\"outputs\":{{{}}}}}",
            json_str(case.module),
            json_str(case.kernel),
            case.grid,
            case.block,
            case.shared,
            hex(&block),
            pointers.join(","),
            bufs.join(","),
            json_str(&status),
            outputs.join(",")
        );
        out.push_str(if ci + 1 < cases.len() { ",\n" } else { "\n" });
    }
    let _ = writeln!(
        out,
        "],\"skipped\":{}}}",
        list(&skipped, |(k, why)| format!(
            "{{\"kernel\":{},\"why\":{}}}",
            json_str(k),
            json_str(why)
        ))
    );
    print!("{out}");
    eprintln!(
        "{} launches, {} skipped kernels, {failures} emulator errors",
        cases.len(),
        skipped.len()
    );
    if failures > 0 {
        std::process::exit(1);
    }
}
