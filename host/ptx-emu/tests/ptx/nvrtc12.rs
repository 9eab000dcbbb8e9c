//! The NVRTC 12 corpus (kernels/nvrtc12/*.cu, compiled by kernels/regen.sh with the pinned
//! nvidia-cuda-nvrtc-cu12), each checked against a CPU reference.
#![allow(clippy::needless_range_loop)]

use crate::support::*;
use tasklet_ptx::{DeviceMemory, Module};

fn nvrtc12_module(name: &str) -> Module {
    let path = format!(
        "{}/../../kernels/nvrtc12/{name}.ptx",
        env!("CARGO_MANIFEST_DIR")
    );
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(
        src.contains(".version 8.7"),
        "{path} should be NVRTC 12.8 output"
    );
    Module::parse(&src).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn block_scan() {
    let m = nvrtc12_module("scan");
    let mem = DeviceMemory::new();
    let mut rng = Rng(11);
    for (n, block) in [(1000u32, 256u32), (4096, 1024), (77, 96), (1, 32)] {
        let data: Vec<u32> = (0..n).map(|_| rng.next_u32() % 100).collect();
        let blocks = n.div_ceil(block);
        let inp = upload_u32(&mem, &data);
        let out = upload_u32(&mem, &vec![0; n as usize]);
        let totals = upload_u32(&mem, &vec![0; blocks as usize]);
        launch(
            &m,
            &mem,
            "block_scan",
            [blocks, 1, 1],
            [block, 1, 1],
            &[A::U64(inp), A::U64(out), A::U64(totals), A::U32(n)],
        )
        .unwrap();
        let got = download_u32(&mem, out, n as usize);
        let got_totals = download_u32(&mem, totals, blocks as usize);
        for b in 0..blocks as usize {
            let mut acc = 0u32;
            let lo = b * block as usize;
            for i in lo..(lo + block as usize) {
                if i < n as usize {
                    acc += data[i];
                    assert_eq!(got[i], acc, "n={n} block={block} out[{i}]");
                }
            }
            assert_eq!(got_totals[b], acc, "n={n} block={block} total[{b}]");
        }
    }
}

#[test]
fn hash_stats() {
    let m = nvrtc12_module("scan");
    let mem = DeviceMemory::new();
    let mut rng = Rng(3);
    let n = 3000usize;
    let keys: Vec<u64> = (0..n)
        .map(|_| (rng.next_u32() as u64) << 32 | rng.next_u32() as u64)
        .collect();
    let kp = upload_bytes(
        &mem,
        &keys
            .iter()
            .flat_map(|k| k.to_le_bytes())
            .collect::<Vec<_>>(),
    );
    let scaled = upload_f32(&mem, &vec![0.0; n]);
    let buckets = upload_u32(&mem, &[0; 16]);
    let scale = 1.0f32 / 1024.0 + 1e-7;
    launch(
        &m,
        &mem,
        "hash_stats",
        [(n as u32).div_ceil(128), 1, 1],
        [128, 1, 1],
        &[
            A::U64(kp),
            A::U64(scaled),
            A::U64(buckets),
            A::U32(n as u32),
            A::F32(scale),
        ],
    )
    .unwrap();
    let got = download_f32(&mem, scaled, n);
    let mut want_buckets = [0u32; 16];
    for i in 0..n {
        let mut k = keys[i];
        k ^= k >> 33;
        k = k.wrapping_mul(0xff51afd7ed558ccd);
        k ^= k >> 33;
        let mut steps = 0;
        let mut x = k;
        while x > 1 && steps < 64 {
            x = if x & 1 == 1 { x / 3 } else { x >> 1 };
            steps += 1;
        }
        // NVRTC contracts the multiply-add into one fma (fmad=true, its default).
        let want = ((k >> 11) as i64 as f32).mul_add(scale, steps as f32);
        assert_eq!(
            got[i].to_bits(),
            want.to_bits(),
            "scaled[{i}]: {} vs {want}",
            got[i]
        );
        want_buckets[(k & 15) as usize] += 1;
    }
    assert_eq!(download_u32(&mem, buckets, 16), want_buckets);
}
