//! The kernel corpus (kernels/*.cu compiled by the pinned nvcc), each checked against a CPU
//! reference. IEEE-rounded results are compared bit for bit.
#![allow(clippy::needless_range_loop, clippy::manual_checked_ops)]

use crate::support::*;
use tasklet_ptx::{DeviceMemory, ExecError};

fn upload_i32(mem: &DeviceMemory, v: &[i32]) -> u64 {
    upload_u32(mem, &v.iter().map(|&x| x as u32).collect::<Vec<_>>())
}
fn upload_u64(mem: &DeviceMemory, v: &[u64]) -> u64 {
    upload_bytes(
        mem,
        &v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
    )
}
fn upload_f64(mem: &DeviceMemory, v: &[f64]) -> u64 {
    upload_u64(mem, &v.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
}
fn download_u64(mem: &DeviceMemory, p: u64, n: usize) -> Vec<u64> {
    download_bytes(mem, p, n * 8)
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}
fn download_f64(mem: &DeviceMemory, p: u64, n: usize) -> Vec<f64> {
    download_u64(mem, p, n)
        .into_iter()
        .map(f64::from_bits)
        .collect()
}

#[test]
fn block_sum_in_shared_memory() {
    let m = module("reduce");
    let mem = DeviceMemory::new();
    let mut rng = Rng(1);
    let n = 100_000usize;
    let data: Vec<u32> = (0..n).map(|_| rng.next_u32() % 1000).collect();
    let inp = upload_u32(&mem, &data);
    let (blocks, threads) = (40u32, 256u32);
    let partial = mem.alloc(blocks as u64 * 4).unwrap();
    launch_full(
        &m,
        &mem,
        "block_sum",
        [blocks, 1, 1],
        [threads, 1, 1],
        threads * 4,
        &[A::U64(inp), A::U64(partial), A::U32(n as u32)],
        u64::MAX,
        0,
    )
    .unwrap();
    let got = download_u32(&mem, partial, blocks as usize);
    for b in 0..blocks as usize {
        let want: u32 = (0..n)
            .filter(|i| (i / threads as usize) % blocks as usize == b)
            .map(|i| data[i])
            .sum();
        assert_eq!(got[b], want, "block {b}");
    }
}

#[test]
fn warp_shuffle_sum_and_max() {
    let m = module("reduce");
    let mem = DeviceMemory::new();
    let n = 50_000usize;
    let data: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let inp = upload_f32(&mem, &data);
    let out = upload_f32(&mem, &[0.0]);
    launch(
        &m,
        &mem,
        "shfl_sum",
        [20, 1, 1],
        [192, 1, 1],
        &[A::U64(inp), A::U64(out), A::U32(n as u32)],
    )
    .unwrap();
    assert_eq!(download_f32(&mem, out, 1)[0], data.iter().sum::<f32>());

    let mut rng = Rng(5);
    let ints: Vec<i32> = (0..n).map(|_| rng.next_u32() as i32 / 3).collect();
    let inp = upload_i32(&mem, &ints);
    let out = upload_i32(&mem, &[i32::MIN]);
    launch(
        &m,
        &mem,
        "max_reduce",
        [13, 1, 1],
        [96, 1, 1],
        &[A::U64(inp), A::U64(out), A::U32(n as u32)],
    )
    .unwrap();
    assert_eq!(
        download_u32(&mem, out, 1)[0] as i32,
        *ints.iter().max().unwrap()
    );
}

#[test]
fn histogram_with_shared_and_global_atomics() {
    let m = module("histogram");
    let mem = DeviceMemory::new();
    let mut rng = Rng(3);
    let n = 100_001usize;
    let data: Vec<u8> = (0..n)
        .map(|_| (rng.next_u32() % 251) as u8 ^ (rng.next_u32() & 3) as u8)
        .collect();
    let inp = upload_bytes(&mem, &data);
    let bins = mem.alloc(256 * 4).unwrap();
    launch(
        &m,
        &mem,
        "histogram256",
        [30, 1, 1],
        [256, 1, 1],
        &[A::U64(inp), A::U32(n as u32), A::U64(bins)],
    )
    .unwrap();
    let mut want = vec![0u32; 256];
    for &b in &data {
        want[b as usize] += 1;
    }
    assert_eq!(download_u32(&mem, bins, 256), want);
}

#[test]
fn every_global_atomic() {
    let m = module("histogram");
    let mem = DeviceMemory::new();
    let n = 1000u32;
    let u = upload_u32(&mem, &[0, n, 0, u32::MAX, 0, 0, 0, u32::MAX, 0, 0, 0]);
    let s = upload_i32(&mem, &[i32::MIN, i32::MAX]);
    let u64p = upload_u64(&mem, &[0]);
    let f = upload_f32(&mem, &[0.0]);
    let d = upload_f64(&mem, &[0.0]);
    launch_full(
        &m,
        &mem,
        "atomics_mix",
        [8, 1, 1],
        [128, 1, 1],
        0,
        &[
            A::U64(u),
            A::U64(s),
            A::U64(u64p),
            A::U64(f),
            A::U64(d),
            A::U32(n),
        ],
        u64::MAX,
        1,
    )
    .unwrap();
    let got = download_u32(&mem, u, 11);
    let mut dec = 0u32;
    for _ in 0..n {
        dec = if dec == 0 || dec > 100 { 100 } else { dec - 1 };
    }
    let want = [
        (0..n).sum::<u32>(),
        0,
        (0..n).map(|i| i * 7 % 1000).max().unwrap(),
        5,
        n % 10,
        dec,
        u32::MAX,
        0,
        (0..n).fold(0, |a, i| a ^ i),
        42,
        n, // the CAS chain completes in order with one worker thread
    ];
    assert_eq!(got, want);
    assert_eq!(
        download_u32(&mem, s, 2)
            .iter()
            .map(|&x| x as i32)
            .collect::<Vec<_>>(),
        vec![499, -500]
    );
    assert_eq!(
        download_u64(&mem, u64p, 1)[0],
        (0..n as u64).map(|i| i << 20).sum::<u64>()
    );
    assert_eq!(download_f32(&mem, f, 1)[0], 500.0);
    assert_eq!(download_f64(&mem, d, 1)[0], 250.0);
}

#[test]
fn tiled_matmul_is_bit_exact() {
    let m = module("matmul");
    let mem = DeviceMemory::new();
    let (mm, nn, kk) = (70usize, 50usize, 40usize);
    let mut rng = Rng(11);
    let a: Vec<f32> = (0..mm * kk).map(|_| rng.f32()).collect();
    let b: Vec<f32> = (0..kk * nn).map(|_| rng.f32()).collect();
    let (pa, pb) = (upload_f32(&mem, &a), upload_f32(&mem, &b));
    let pc = mem.alloc((mm * nn * 4) as u64).unwrap();
    launch(
        &m,
        &mem,
        "matmul_tiled",
        [(nn as u32).div_ceil(16), (mm as u32).div_ceil(16), 1],
        [16, 16, 1],
        &[
            A::U64(pa),
            A::U64(pb),
            A::U64(pc),
            A::U32(mm as u32),
            A::U32(nn as u32),
            A::U32(kk as u32),
        ],
    )
    .unwrap();
    let got = download_f32(&mem, pc, mm * nn);
    for r in 0..mm {
        for c in 0..nn {
            let mut acc = 0f32;
            for k in 0..kk.div_ceil(16) * 16 {
                let (x, y) = if k < kk {
                    (a[r * kk + k], b[k * nn + c])
                } else {
                    (0.0, 0.0)
                };
                acc = x.mul_add(y, acc);
            }
            assert_eq!(got[r * nn + c].to_bits(), acc.to_bits(), "C[{r}][{c}]");
        }
    }
}

#[test]
fn stencils() {
    let m = module("stencil");
    let mem = DeviceMemory::new();
    let (w, h) = (37usize, 23usize);
    let mut rng = Rng(13);
    let x: Vec<f32> = (0..w * h).map(|_| rng.f32() * 100.0).collect();
    let (pi, po) = (upload_f32(&mem, &x), mem.alloc((w * h * 4) as u64).unwrap());
    launch(
        &m,
        &mem,
        "jacobi5",
        [(w as u32).div_ceil(8), (h as u32).div_ceil(8), 1],
        [8, 8, 1],
        &[A::U64(pi), A::U64(po), A::U32(w as u32), A::U32(h as u32)],
    )
    .unwrap();
    let got = download_f32(&mem, po, w * h);
    for yy in 0..h {
        for xx in 0..w {
            let i = yy * w + xx;
            let want = if xx == 0 || yy == 0 || xx == w - 1 || yy == h - 1 {
                x[i]
            } else {
                0.25 * ((x[i - 1] + x[i + 1]) + (x[i - w] + x[i + w]))
            };
            assert_eq!(got[i].to_bits(), want.to_bits(), "({xx},{yy})");
        }
    }
    let (w, h) = (40usize, 35usize);
    let v: Vec<i32> = (0..w * h)
        .map(|_| (rng.next_u32() % 2001) as i32 - 1000)
        .collect();
    let (pi, po) = (upload_i32(&mem, &v), mem.alloc((w * h * 4) as u64).unwrap());
    launch(
        &m,
        &mem,
        "box3",
        [(w as u32).div_ceil(16), (h as u32).div_ceil(16), 1],
        [16, 16, 1],
        &[A::U64(pi), A::U64(po), A::U32(w as u32), A::U32(h as u32)],
    )
    .unwrap();
    let got = download_u32(&mem, po, w * h);
    for yy in 0..h as i64 {
        for xx in 0..w as i64 {
            let mut s = 0i32;
            for dy in -1..=1 {
                for dx in -1..=1 {
                    let (gx, gy) = (xx + dx, yy + dy);
                    if gx >= 0 && gy >= 0 && gx < w as i64 && gy < h as i64 {
                        s += v[(gy * w as i64 + gx) as usize];
                    }
                }
            }
            assert_eq!(got[(yy * w as i64 + xx) as usize] as i32, s);
        }
    }
}

#[test]
fn int64_arithmetic() {
    let m = module("math64");
    let mem = DeviceMemory::new();
    let mut rng = Rng(17);
    let mut a: Vec<i64> = vec![0, -1, i64::MAX, i64::MIN, 12345, -98765, 1 << 40, 7];
    let mut b: Vec<i64> = vec![5, 3, -2, 3, 0, 77, -(1 << 33), i64::MIN];
    for _ in 0..100 {
        a.push(
            ((rng.next_u32() as u64) << 32 | rng.next_u32() as u64) as i64 >> (rng.next_u32() % 40),
        );
        b.push(
            ((rng.next_u32() as u64) << 32 | rng.next_u32() as u64) as i64 >> (rng.next_u32() % 60),
        );
    }
    let n = a.len();
    let (pa, pb) = (
        upload_u64(&mem, &a.iter().map(|&x| x as u64).collect::<Vec<_>>()),
        upload_u64(&mem, &b.iter().map(|&x| x as u64).collect::<Vec<_>>()),
    );
    let po = mem.alloc((n * 80) as u64).unwrap();
    launch(
        &m,
        &mem,
        "int64_ops",
        [1, 1, 1],
        [n as u32, 1, 1],
        &[A::U64(pa), A::U64(pb), A::U64(po), A::U32(n as u32)],
    )
    .unwrap();
    let got = download_u64(&mem, po, n * 10);
    for i in 0..n {
        let (x, y) = (a[i], b[i]);
        let (ux, uy) = (x as u64, y as u64);
        let ffs = if y == 0 {
            0
        } else {
            y.trailing_zeros() as i64 + 1
        };
        let want: [i64; 10] = [
            x.wrapping_mul(y),
            if y != 0 { x.wrapping_div(y) } else { 0 },
            if y != 0 { x.wrapping_rem(y) } else { 0 },
            if uy != 0 { (ux / uy) as i64 } else { 0 },
            if uy != 0 { (ux % uy) as i64 } else { 0 },
            x >> (y & 63),
            (ux >> (uy & 63)) as i64,
            ((ux as u128 * uy as u128) >> 64) as i64,
            ((x as i128 * y as i128) >> 64) as i64,
            ux.count_ones() as i64 + x.leading_zeros() as i64 * 100 + ffs * 10000,
        ];
        for k in 0..10 {
            assert_eq!(got[i * 10 + k] as i64, want[k], "x={x} y={y} op {k}");
        }
    }
}

fn next_up(x: f64) -> f64 {
    if x == 0.0 {
        return f64::from_bits(1);
    }
    f64::from_bits(if x > 0.0 {
        x.to_bits() + 1
    } else {
        x.to_bits() - 1
    })
}
fn next_down(x: f64) -> f64 {
    -next_up(-x)
}

#[test]
fn f64_arithmetic_with_rounding_modes() {
    let m = module("math64");
    let mem = DeviceMemory::new();
    let mut rng = Rng(19);
    let mut a = vec![1.0, -0.1, 1e300, 3.0, 1e-310];
    let mut b = vec![3.0, 0.3, 1e10, -7.0, 1e-5];
    for _ in 0..200 {
        a.push(rng.f32() as f64 * 1e3 + rng.f32() as f64 * 1e-9);
        b.push(rng.f32() as f64 * 7.0 + 1e-12);
    }
    let n = a.len();
    let (pa, pb, po) = (
        upload_f64(&mem, &a),
        upload_f64(&mem, &b),
        mem.alloc((n * 64) as u64).unwrap(),
    );
    launch(
        &m,
        &mem,
        "f64_ops",
        [2, 1, 1],
        [128, 1, 1],
        &[A::U64(pa), A::U64(pb), A::U64(po), A::U32(n as u32)],
    )
    .unwrap();
    let got = download_f64(&mem, po, n * 8);
    for i in 0..n {
        let (x, y) = (a[i], b[i]);
        let s = x + y;
        let bb = s - x;
        let e = (x - (s - bb)) + (y - bb);
        let add_rz = if (s > 0.0 && e < 0.0) || (s < 0.0 && e > 0.0) {
            if s > 0.0 {
                next_down(s)
            } else {
                next_up(s)
            }
        } else {
            s
        };
        let p = x * y;
        let mul_ru = if x.mul_add(y, -p) > 0.0 {
            next_up(p)
        } else {
            p
        };
        let want = [
            x + y,
            x * y,
            x / y,
            x.abs().sqrt(),
            x.mul_add(y, 1.0),
            add_rz,
            mul_ru,
            x.min(y) + (y.trunc() as i64) as f64,
        ];
        for k in 0..8 {
            assert_eq!(
                got[i * 8 + k].to_bits(),
                want[k].to_bits(),
                "x={x:e} y={y:e} op {k}: {} vs {}",
                got[i * 8 + k],
                want[k]
            );
        }
    }
}

/// f32 nearest to `v` in the direction `dir` (-1 down, +1 up, 0 toward zero), from an exactly
/// known value (an i64 or f64).
fn directed_f32(v_f64: f64, exact_cmp: impl Fn(f32) -> std::cmp::Ordering, dir: i32) -> f32 {
    let f = v_f64 as f32;
    let up = |x: f32| {
        if x == 0.0 {
            f32::from_bits(1)
        } else if x > 0.0 {
            f32::from_bits(x.to_bits() + 1)
        } else {
            f32::from_bits(x.to_bits() - 1)
        }
    };
    let down = |x: f32| -up(-x);
    use std::cmp::Ordering::*;
    let dir = if dir == 0 {
        if v_f64 >= 0.0 {
            -1
        } else {
            1
        }
    } else {
        dir
    };
    match (exact_cmp(f), dir) {
        (Greater, -1) => down(f),
        (Less, 1) => up(f),
        _ => f,
    }
}

#[test]
fn conversions_with_every_rounding_mode() {
    let m = module("math64");
    let mem = DeviceMemory::new();
    let mut fs: Vec<f32> = vec![
        0.5,
        1.5,
        2.5,
        -0.5,
        -1.5,
        -2.7,
        3e9,
        -3e9,
        1e20,
        f32::NAN,
        0.0,
        -0.0,
        4294967000.0,
        16777217.0,
    ];
    let mut ds: Vec<f64> = vec![
        0.5,
        1.5,
        -2.5,
        1e40,
        -1e-50,
        0.1,
        3.4028235677973366e38,
        1.0 + 1e-12,
        -7.9999999999,
        2.5e9,
    ];
    let mut ks: Vec<i32> = vec![0, 1, -1, 16777217, -16777219, i32::MAX, i32::MIN, 123456789];
    let mut rng = Rng(23);
    while fs.len() < 64 {
        fs.push(rng.f32() * 1000.0);
    }
    while ds.len() < 64 {
        ds.push(rng.f32() as f64 * 1e6 + rng.f32() as f64 * 1e-3);
    }
    while ks.len() < 64 {
        ks.push(rng.next_u32() as i32);
    }
    let n = 64usize;
    let (pf, pd, pk, po) = (
        upload_f32(&mem, &fs),
        upload_f64(&mem, &ds),
        upload_i32(&mem, &ks),
        mem.alloc((n * 64) as u64).unwrap(),
    );
    launch(
        &m,
        &mem,
        "conversions",
        [1, 1, 1],
        [64, 1, 1],
        &[
            A::U64(pf),
            A::U64(pd),
            A::U64(pk),
            A::U64(po),
            A::U32(n as u32),
        ],
    )
    .unwrap();
    let got = download_u32(&mem, po, n * 16);
    let sat_i32 = |v: f64| -> u32 {
        if v.is_nan() {
            0
        } else {
            v.clamp(i32::MIN as f64, i32::MAX as f64) as i32 as u32
        }
    };
    for i in 0..n {
        let (x, y, z) = (fs[i], ds[i], ks[i]);
        let xf = x as f64;
        let zc = |f: f32| (f as f64).partial_cmp(&(z as f64)).unwrap();
        let yc = |f: f32| {
            (f as f64)
                .partial_cmp(&y)
                .unwrap_or(std::cmp::Ordering::Equal)
        };
        let u = (z as i64 as u64).wrapping_mul(0x10001);
        let want: [u32; 16] = [
            sat_i32(xf.round_ties_even()),
            sat_i32(xf.trunc()),
            sat_i32(xf.floor()),
            sat_i32(xf.ceil()),
            if x.is_nan() {
                0
            } else {
                xf.round_ties_even().clamp(0.0, u32::MAX as f64) as u32
            },
            (z as f32).to_bits(),
            directed_f32(z as f64, zc, 0).to_bits(),
            directed_f32(z as f64, zc, -1).to_bits(),
            directed_f32(z as f64, zc, 1).to_bits(),
            (y as f32).to_bits(),
            directed_f32(y, yc, 0).to_bits(),
            directed_f32(y, yc, -1).to_bits(),
            directed_f32(y, yc, 1).to_bits(),
            sat_i32(y.round_ties_even()),
            (y.trunc().clamp(i64::MIN as f64, i64::MAX as f64) as i64) as u32,
            (u as f32).to_bits(),
        ];
        for k in 0..16 {
            assert_eq!(got[i * 16 + k], want[k], "i={i} x={x} y={y} z={z} op {k}");
        }
    }
}

#[test]
fn device_calls_local_arrays_and_struct_params() {
    let m = module("calls");
    let mem = DeviceMemory::new();
    let k = kinfo(&m, "digits_kernel");
    let (offs, size) = k.param_layout();
    assert_eq!(k.params[1].size, 24);
    assert_eq!(k.params[1].align, 8);
    assert!(!k.params[1].pointer_sized);
    let n = 500u32;
    let out = mem.alloc(n as u64 * 4).unwrap();
    let mut args = vec![0u8; size as usize];
    args[0..8].copy_from_slice(&out.to_le_bytes());
    let s = offs[1] as usize;
    args[s..s + 4].copy_from_slice(&3.25f32.to_le_bytes());
    args[s + 4..s + 8].copy_from_slice(&37i32.to_le_bytes());
    args[s + 8..s + 16].copy_from_slice(&1000u64.to_le_bytes());
    args[s + 16..s + 18].copy_from_slice(&5i16.to_le_bytes());
    args[offs[2] as usize..offs[2] as usize + 4].copy_from_slice(&n.to_le_bytes());
    let lp = tasklet_ptx::LaunchParams {
        grid: [4, 1, 1],
        block: [128, 1, 1],
        shared_mem_bytes: 0,
        args: &args,
        step_limit: u64::MAX,
        threads: 0,
    };
    m.launch("digits_kernel", &mem, &lp).unwrap();
    let got = download_u32(&mem, out, n as usize);
    for i in 0..n {
        let mut x = i * 37;
        let mut s = 0;
        loop {
            s += (x % 10) * (x % 10);
            x /= 10;
            if x == 0 {
                break;
            }
        }
        assert_eq!(got[i as usize], s + 6 + 1000 + 5, "i={i}");
    }

    // Vec3 by value into a kernel and through a device function returning a struct.
    let k = kinfo(&m, "cross_kernel");
    let (offs, size) = k.param_layout();
    let mut rng = Rng(29);
    let nv = 100usize;
    let av: Vec<f32> = (0..nv * 3).map(|_| rng.f32() * 10.0).collect();
    let bv = [0.5f32, -1.25, 2.0];
    let pa = upload_f32(&mem, &av);
    let po = mem.alloc((nv * 12) as u64).unwrap();
    let mut args = vec![0u8; size as usize];
    args[0..8].copy_from_slice(&pa.to_le_bytes());
    for (j, v) in bv.iter().enumerate() {
        let o = offs[1] as usize + 4 * j;
        args[o..o + 4].copy_from_slice(&v.to_le_bytes());
    }
    args[offs[2] as usize..offs[2] as usize + 8].copy_from_slice(&po.to_le_bytes());
    args[offs[3] as usize..offs[3] as usize + 4].copy_from_slice(&(nv as u32).to_le_bytes());
    let lp = tasklet_ptx::LaunchParams {
        grid: [1, 1, 1],
        block: [128, 1, 1],
        shared_mem_bytes: 0,
        args: &args,
        step_limit: u64::MAX,
        threads: 0,
    };
    m.launch("cross_kernel", &mem, &lp).unwrap();
    let got = download_f32(&mem, po, nv * 3);
    for i in 0..nv {
        let a = &av[i * 3..i * 3 + 3];
        let want = [
            a[1] * bv[2] - a[2] * bv[1],
            a[2] * bv[0] - a[0] * bv[2],
            a[0] * bv[1] - a[1] * bv[0],
        ];
        for j in 0..3 {
            assert_eq!(got[i * 3 + j].to_bits(), want[j].to_bits());
        }
    }
}

/// An independent f64 → f16 round-to-nearest-even for the references.
fn f16_from_f64(x: f64) -> u16 {
    if x.is_nan() {
        return 0x7fff;
    }
    let s = if x.is_sign_negative() { 0x8000u16 } else { 0 };
    let a = x.abs();
    if a >= 65520.0 {
        return s | 0x7c00;
    }
    let e = if a == 0.0 {
        -14
    } else {
        (a.log2().floor() as i32).max(-14)
    };
    let e = if a >= 2f64.powi(e + 1) {
        e + 1
    } else if a < 2f64.powi(e) && e > -14 {
        e - 1
    } else {
        e
    };
    let q = 2f64.powi(e - 10);
    let r = (a / q).round_ties_even();
    let v = r * q;
    if v == 0.0 {
        return s;
    }
    if v >= 65520.0 {
        return s | 0x7c00;
    }
    let ve = (v.log2().floor() as i32).max(-14);
    let ve = if v >= 2f64.powi(ve + 1) { ve + 1 } else { ve };
    let mant = (v / 2f64.powi(ve - 10)) as u32;
    if mant < 1024 {
        s | mant as u16
    } else {
        s | (((ve + 15) as u16) << 10) | (mant - 1024) as u16
    }
}
fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((h >> 10) & 31) as i32;
    let mnt = (h & 1023) as f64;
    match e {
        0 => sign * mnt * 2f64.powi(-24),
        31 => {
            if mnt == 0.0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            }
        }
        _ => sign * (1.0 + mnt / 1024.0) * 2f64.powi(e - 15),
    }
}

#[test]
fn half_precision_math() {
    let m = module("half");
    let mem = DeviceMemory::new();
    let mut rng = Rng(31);
    let n = 300usize;
    let gen = |rng: &mut Rng| f16_from_f64((rng.f32() * 8.0) as f64);
    let a: Vec<u16> = (0..n).map(|_| gen(&mut rng)).collect();
    let b: Vec<u16> = (0..n)
        .map(|_| {
            let v = gen(&mut rng);
            if f16_to_f64(v) == 0.0 {
                0x3c00
            } else {
                v
            }
        })
        .collect();
    let c: Vec<u16> = (0..n).map(|_| gen(&mut rng)).collect();
    let up16 = |v: &[u16]| {
        upload_bytes(
            &mem,
            &v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
        )
    };
    let (pa, pb, pc) = (up16(&a), up16(&b), up16(&c));
    let (po, pf) = (
        mem.alloc((n * 2) as u64).unwrap(),
        mem.alloc((n * 4) as u64).unwrap(),
    );
    launch(
        &m,
        &mem,
        "half_ops",
        [3, 1, 1],
        [128, 1, 1],
        &[
            A::U64(pa),
            A::U64(pb),
            A::U64(pc),
            A::U64(po),
            A::U64(pf),
            A::U32(n as u32),
        ],
    )
    .unwrap();
    let got: Vec<u16> = download_bytes(&mem, po, n * 2)
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let gotf = download_f32(&mem, pf, n);
    for i in 0..n {
        let (x, y, z) = (f16_to_f64(a[i]), f16_to_f64(b[i]), f16_to_f64(c[i]));
        let r = f16_from_f64(x * y + z);
        let half = f16_from_f64(x * 0.5);
        let r = f16_from_f64(f16_to_f64(r) - f16_to_f64(half));
        let r = f16_from_f64(f16_to_f64(r) + x.max(y));
        assert_eq!(got[i], r, "i={i} x={x} y={y} z={z}");
        let q = f16_from_f64(x / y);
        let want = f16_to_f64(r) as f32 + f16_to_f64(q) as f32;
        assert_eq!(
            gotf[i].to_bits(),
            want.to_bits(),
            "i={i} x={x} y={y}: {} vs {want}",
            gotf[i]
        );
    }
    // half2: fma2(a, b, a + b) on both halves.
    let n2 = 100usize;
    let (pa, pb, po) = (
        up16(&a[..n2 * 2]),
        up16(&b[..n2 * 2]),
        mem.alloc((n2 * 4) as u64).unwrap(),
    );
    launch(
        &m,
        &mem,
        "half2_ops",
        [1, 1, 1],
        [128, 1, 1],
        &[A::U64(pa), A::U64(pb), A::U64(po), A::U32(n2 as u32)],
    )
    .unwrap();
    let got: Vec<u16> = download_bytes(&mem, po, n2 * 4)
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    for i in 0..n2 * 2 {
        let (x, y) = (f16_to_f64(a[i]), f16_to_f64(b[i]));
        let s = f16_to_f64(f16_from_f64(x + y));
        assert_eq!(got[i], f16_from_f64(x * y + s), "i={i}");
    }
}

fn ulps(a: f32, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let bf = b as f32;
    if bf.is_infinite() || a.is_infinite() {
        return if a == bf { 0.0 } else { f64::INFINITY };
    }
    let ulp = (f32::from_bits(bf.abs().to_bits() + 1) - bf.abs()) as f64;
    ((a as f64) - b).abs() / ulp
}

#[test]
fn single_precision_library_math_within_documented_ulps() {
    let m = module("transcendental");
    let mem = DeviceMemory::new();
    let mut rng = Rng(37);
    let mut x: Vec<f32> = vec![
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
    ];
    while x.len() < 256 {
        x.push(rng.f32() * 10.0);
    }
    let n = x.len();
    let (px, po) = (upload_f32(&mem, &x), mem.alloc((n * 32) as u64).unwrap());
    launch(
        &m,
        &mem,
        "libm_f32",
        [2, 1, 1],
        [128, 1, 1],
        &[A::U64(px), A::U64(po), A::U32(n as u32)],
    )
    .unwrap();
    let got = download_f32(&mem, po, n * 8);
    // Maximum ulp errors from the CUDA C Programming Guide (single precision, no fast math).
    let bounds = [2.0, 2.0, 2.0, 1.0, 0.0, 4.0, 2.0, 3.0];
    for i in 0..n {
        let v = x[i] as f64;
        // Arguments formed in f32 by the kernel are formed in f32 here too.
        let (p1, p5) = ((x[i].abs() + 1.0f32) as f64, (x[i].abs() + 0.5f32) as f64);
        let want = [
            v.sin(),
            v.cos(),
            v.exp(),
            p1.ln(),
            v.abs().sqrt(),
            p5.powf(1.7f32 as f64),
            v.tanh(),
            v.atan2(0.75),
        ];
        for k in 0..8 {
            // sqrt(|v|) is computed from an f32 |v|; the others from the f32 argument as given.
            let e = ulps(got[i * 8 + k], want[k]);
            let bound = bounds[k] + 0.5;
            assert!(
                e <= bound,
                "x={} fn {k}: got {} want {} ({e} ulps)",
                x[i],
                got[i * 8 + k],
                want[k]
            );
        }
    }
    // Hardware approximations: checked against their documented error.
    let (px, po) = (upload_f32(&mem, &x), mem.alloc((n * 24) as u64).unwrap());
    launch(
        &m,
        &mem,
        "intrinsics_f32",
        [2, 1, 1],
        [128, 1, 1],
        &[A::U64(px), A::U64(po), A::U32(n as u32)],
    )
    .unwrap();
    let got = download_f32(&mem, po, n * 6);
    for i in 0..n {
        let v = x[i] as f64;
        if v.abs() <= std::f64::consts::PI {
            assert!(
                (got[i * 6] as f64 - v.sin()).abs() <= 2f64.powf(-21.41) + 1e-7,
                "__sinf({v})"
            );
            assert!(
                (got[i * 6 + 1] as f64 - v.cos()).abs() <= 2f64.powf(-21.41) + 1e-7,
                "__cosf({v})"
            );
        }
        assert!(
            ulps(got[i * 6 + 2], v.exp()) <= 2.0 + (1.16 * v).abs().floor() + 2.0,
            "__expf({v})"
        );
        assert!(
            (got[i * 6 + 3] as f64 - ((x[i].abs() + 1.0f32) as f64).ln()).abs()
                <= 2f64.powf(-21.41) * 2.0 + 1e-6,
            "__logf({v})"
        );
        assert!(ulps(got[i * 6 + 4], v / 3.0) <= 2.0, "__fdividef({v})");
        assert!(
            ulps(got[i * 6 + 5], 1.0 / ((x[i].abs() + 1.0f32) as f64).sqrt()) <= 2.5,
            "rsqrtf({v})"
        );
    }
}

#[test]
fn double_precision_library_math() {
    let m = module("transcendental");
    let mem = DeviceMemory::new();
    let mut rng = Rng(41);
    let x: Vec<f64> = (0..200)
        .map(|_| rng.f32() as f64 * 20.0 + rng.f32() as f64 * 1e-7)
        .collect();
    let n = x.len();
    let (px, po) = (upload_f64(&mem, &x), mem.alloc((n * 32) as u64).unwrap());
    launch(
        &m,
        &mem,
        "libm_f64",
        [2, 1, 1],
        [128, 1, 1],
        &[A::U64(px), A::U64(po), A::U32(n as u32)],
    )
    .unwrap();
    let got = download_f64(&mem, po, n * 4);
    for i in 0..n {
        let v = x[i];
        let want = [v.sin(), v.exp(), (v.abs() + 1.0).ln(), v.abs().sqrt()];
        for k in 0..4 {
            let g = got[i * 4 + k];
            let ulp = (f64::from_bits(want[k].abs().to_bits() + 1) - want[k].abs()).abs();
            let bound = if k == 3 { 0.0 } else { 2.0 };
            assert!(
                (g - want[k]).abs() <= bound * ulp + if k == 0 { 1e-300 } else { 0.0 },
                "x={v} fn {k}: {g} vs {}",
                want[k]
            );
        }
    }
}

#[test]
fn divergence_reconverges_before_ballot() {
    let m = module("warp");
    let mem = DeviceMemory::new();
    for block in [32u32, 64, 96] {
        let out = mem.alloc(block as u64 * 4).unwrap();
        launch(
            &m,
            &mem,
            "divergence",
            [1, 1, 1],
            [block, 1, 1],
            &[A::U64(out)],
        )
        .unwrap();
        let got = download_u32(&mem, out, block as usize);
        for t in 0..block {
            let v = if t & 1 == 1 {
                (0..t).sum::<u32>()
            } else {
                t * 1000 + if t % 4 == 0 { 7 } else { 0 }
            };
            assert_eq!(got[t as usize], v + 1, "t={t}");
        }
    }
}

#[test]
fn votes_and_shuffles() {
    let m = module("warp");
    let mem = DeviceMemory::new();
    let mut rng = Rng(43);
    let n = 64usize;
    let v: Vec<i32> = (0..n)
        .map(|_| (rng.next_u32() % 300) as i32 - 100)
        .collect();
    let (pi, po) = (upload_i32(&mem, &v), mem.alloc((n * 32) as u64).unwrap());
    launch(
        &m,
        &mem,
        "votes",
        [2, 1, 1],
        [32, 1, 1],
        &[A::U64(pi), A::U64(po)],
    )
    .unwrap();
    let got = download_u32(&mem, po, n * 8);
    for w in 0..2 {
        let vs = &v[w * 32..w * 32 + 32];
        let ballot =
            |f: &dyn Fn(i32) -> bool| (0..32).filter(|&l| f(vs[l])).fold(0u32, |a, l| a | 1 << l);
        let sum: u32 = vs.iter().map(|&x| x as u32).fold(0, u32::wrapping_add);
        for t in 0..32usize {
            let want = [
                ballot(&|x| x > 0),
                (vs.iter().any(|&x| x > 100)) as u32,
                (vs.iter().all(|&x| x != 0)) as u32,
                u32::MAX,
                vs[3] as u32,
                if t >= 2 { vs[t - 2] } else { vs[t] } as u32,
                vs[(t & !7) + (t + 5) % 8] as u32,
                ballot(&|x| x & 1 != 0).count_ones().wrapping_add(sum),
            ];
            assert_eq!(
                &got[(w * 32 + t) * 8..(w * 32 + t) * 8 + 8],
                &want,
                "warp {w} lane {t}"
            );
        }
    }
    let out = mem.alloc(32 * 4).unwrap();
    launch(
        &m,
        &mem,
        "partial_warp",
        [1, 1, 1],
        [32, 1, 1],
        &[A::U64(out)],
    )
    .unwrap();
    let got = download_u32(&mem, out, 32);
    for t in 0..32u32 {
        assert_eq!(
            got[t as usize],
            if t < 16 { 3 * t + 3 * (t ^ 1) } else { 3 * t }
        );
    }
}

#[test]
fn warp_op_membership_error_is_a_fault() {
    let m = module("warp");
    let mem = DeviceMemory::new();
    let out = mem.alloc(32 * 4).unwrap();
    match launch(
        &m,
        &mem,
        "bad_shuffle",
        [1, 1, 1],
        [32, 1, 1],
        &[A::U64(out)],
    )
    .unwrap_err()
    {
        ExecError::Fault { site, message } => {
            assert!(message.contains("membermask"), "{message}");
            assert!(site.line > 0);
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn barriers_deadlock_and_exit_semantics() {
    let src = kernel_src("warp");
    let m = tasklet_ptx::Module::parse(&src).unwrap();
    let mem = DeviceMemory::new();
    let out = mem.alloc(64 * 4).unwrap();
    match launch(
        &m,
        &mem,
        "barrier_deadlock",
        [1, 1, 1],
        [64, 1, 1],
        &[A::U64(out)],
    )
    .unwrap_err()
    {
        ExecError::Fault { site, message } => {
            assert!(message.contains("deadlock"), "{message}");
            let l1 = src.lines().position(|l| l.contains("bar.sync 1;")).unwrap() as u32 + 1;
            let l2 = src.lines().position(|l| l.contains("bar.sync 2;")).unwrap() as u32 + 1;
            assert!(site.line == l1 || site.line == l2, "{site}");
        }
        e => panic!("{e:?}"),
    }
    launch(
        &m,
        &mem,
        "barrier_after_exit",
        [2, 1, 1],
        [64, 1, 1],
        &[A::U64(out)],
    )
    .unwrap();
    let got = download_u32(&mem, out, 64);
    assert!(got[..32].iter().all(|&x| x == 1) && got[32..].iter().all(|&x| x == 2));

    let v: Vec<i32> = (0..128)
        .map(|i| if i == 77 { 7 } else { (i % 5) - 2 })
        .collect();
    let (pi, po) = (upload_i32(&mem, &v), mem.alloc(12).unwrap());
    launch(
        &m,
        &mem,
        "sync_reduce",
        [1, 1, 1],
        [128, 1, 1],
        &[A::U64(pi), A::U64(po)],
    )
    .unwrap();
    assert_eq!(
        download_u32(&mem, po, 3),
        vec![v.iter().filter(|&&x| x > 0).count() as u32, 1, 1]
    );
}

#[test]
fn bit_manipulation() {
    let m = module("misc");
    let mem = DeviceMemory::new();
    let mut rng = Rng(47);
    let mut a: Vec<u32> = vec![0, 1, u32::MAX, 0x8000_0000, 0x1234_5678];
    let mut b: Vec<u32> = vec![0, 31, 32, 33, 0xdead_beef];
    while a.len() < 100 {
        a.push(rng.next_u32());
        b.push(rng.next_u32());
    }
    let n = a.len();
    let (pa, pb, po) = (
        upload_u32(&mem, &a),
        upload_u32(&mem, &b),
        mem.alloc((n * 40) as u64).unwrap(),
    );
    launch(
        &m,
        &mem,
        "bits",
        [1, 1, 1],
        [128, 1, 1],
        &[A::U64(pa), A::U64(pb), A::U64(po), A::U32(n as u32)],
    )
    .unwrap();
    let got = download_u32(&mem, po, n * 10);
    for i in 0..n {
        let (x, y) = (a[i], b[i]);
        let bytes = ((y as u64) << 32) | x as u64;
        let perm = |s: u32| {
            (0..4).fold(0u32, |acc, k| {
                acc | ((((bytes >> (8 * ((s >> (4 * k)) & 7))) & 0xff) as u32) << (8 * k))
            })
        };
        let wide = ((y as u64) << 32) | x as u64;
        let want = [
            x.count_ones(),
            x.leading_zeros(),
            x.reverse_bits(),
            perm(0x5140),
            ((wide << (y & 31)) >> 32) as u32,
            (wide >> (y & 31)) as u32,
            (x >> (y % 24)) & 0xff,
            if x == 0 { 0 } else { x.trailing_zeros() + 1 },
            ((x as i32).max(y as i32) as u32) ^ x.min(y),
            (((x as u64 * y as u64) >> 32) as u32)
                .wrapping_add(x.abs_diff(y).wrapping_add(1))
                .wrapping_add((((x as i32 as i64) * (y as i32 as i64)) >> 32) as u32),
        ];
        assert_eq!(&got[i * 10..i * 10 + 10], &want, "x={x:#x} y={y:#x}");
    }
}

#[test]
fn constant_tables_module_globals_and_printf() {
    let m = module("misc");
    let mem = DeviceMemory::new();
    let n = 100u32;
    let out = mem.alloc(n as u64 * 4).unwrap();
    launch(
        &m,
        &mem,
        "lookup",
        [1, 1, 1],
        [128, 1, 1],
        &[A::U64(out), A::U32(n)],
    )
    .unwrap();
    let lut = [3, 1, 4, 1, 5, 9, 2, 6];
    assert_eq!(
        download_u32(&mem, out, n as usize),
        (0..n).map(|i| lut[i as usize % 8] * 10).collect::<Vec<_>>()
    );
    // The __device__ counter lives with the module and persists across launches.
    launch(
        &m,
        &mem,
        "lookup",
        [1, 1, 1],
        [128, 1, 1],
        &[A::U64(out), A::U32(n)],
    )
    .unwrap();
    let c = mem.alloc(4).unwrap();
    launch(&m, &mem, "read_counter", [1, 1, 1], [1, 1, 1], &[A::U64(c)]).unwrap();
    assert_eq!(download_u32(&mem, c, 1)[0], 2 * n);
}

#[test]
fn device_assert_is_a_fault() {
    let m = module("misc");
    let mem = DeviceMemory::new();
    let ok = upload_i32(&mem, &[1; 64]);
    launch(&m, &mem, "checked", [1, 1, 1], [64, 1, 1], &[A::U64(ok)]).unwrap();
    let mut v = vec![1; 64];
    v[40] = -3;
    let bad = upload_i32(&mem, &v);
    match launch(&m, &mem, "checked", [1, 1, 1], [64, 1, 1], &[A::U64(bad)]).unwrap_err() {
        ExecError::Fault { site, message } => {
            assert!(message.contains("in[threadIdx.x] >= 0"), "{message}");
            assert_eq!(site.tid, [40, 0, 0]);
        }
        e => panic!("{e:?}"),
    }
}
