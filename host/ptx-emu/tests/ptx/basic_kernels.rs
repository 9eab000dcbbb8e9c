//! The kernels the rest of tasklet depends on first: nvcc's output for kernels/{iota,vector_add,
//! scale,faults}.cu, run and checked against CPU references.

use crate::support::*;
use tasklet_ptx::{DeviceMemory, ExecError, LaunchParams, Module, ParamInfo, ParamType};

#[test]
fn iota_fills_one_based_indices() {
    let m = module("iota");
    let mem = DeviceMemory::new();
    for &(n, block) in &[
        (1000u32, 128u32),
        (1u32, 32),
        (4096, 256),
        (33, 1024),
        (100, 7),
    ] {
        let out = mem.alloc(n as u64 * 4).unwrap();
        let grid = n.div_ceil(block);
        let st = launch(
            &m,
            &mem,
            "iota",
            [grid, 1, 1],
            [block, 1, 1],
            &[A::U64(out), A::U32(n)],
        )
        .unwrap();
        assert!(st.lane_instructions > 0);
        let got = download_u32(&mem, out, n as usize);
        let want: Vec<u32> = (1..=n).collect();
        assert_eq!(got, want, "n={n} block={block}");
    }
}

#[test]
fn iota_with_many_threads_and_one_thread_agree() {
    let m = module("iota");
    let mem = DeviceMemory::new();
    let n = 100_000u32;
    let a = mem.alloc(n as u64 * 4).unwrap();
    let b = mem.alloc(n as u64 * 4).unwrap();
    let s1 = launch_full(
        &m,
        &mem,
        "iota",
        [n.div_ceil(256), 1, 1],
        [256, 1, 1],
        0,
        &[A::U64(a), A::U32(n)],
        u64::MAX,
        1,
    )
    .unwrap();
    let s4 = launch_full(
        &m,
        &mem,
        "iota",
        [n.div_ceil(256), 1, 1],
        [256, 1, 1],
        0,
        &[A::U64(b), A::U32(n)],
        u64::MAX,
        4,
    )
    .unwrap();
    assert_eq!(
        download_u32(&mem, a, n as usize),
        download_u32(&mem, b, n as usize)
    );
    assert_eq!(s1.lane_instructions, s4.lane_instructions);
}

#[test]
fn fill_linear_and_vector_add() {
    let m = module("vector_add");
    let mem = DeviceMemory::new();
    let n = 5000u32;
    let a = mem.alloc(n as u64 * 4).unwrap();
    let b = mem.alloc(n as u64 * 4).unwrap();
    let c = mem.alloc(n as u64 * 4).unwrap();
    let g = [n.div_ceil(256), 1, 1];
    launch(
        &m,
        &mem,
        "fill_linear",
        g,
        [256, 1, 1],
        &[A::U64(a), A::U32(3), A::U32(n)],
    )
    .unwrap();
    launch(
        &m,
        &mem,
        "fill_linear",
        g,
        [256, 1, 1],
        &[A::U64(b), A::U32(0x9e37_79b9), A::U32(n)],
    )
    .unwrap();
    launch(
        &m,
        &mem,
        "vector_add",
        g,
        [256, 1, 1],
        &[A::U64(a), A::U64(b), A::U64(c), A::U32(n)],
    )
    .unwrap();
    let got = download_u32(&mem, c, n as usize);
    for i in 0..n {
        let want = (3u32.wrapping_mul(i)).wrapping_add(0x9e37_79b9u32.wrapping_mul(i));
        assert_eq!(got[i as usize], want, "i={i}");
    }
    // Host-written inputs too.
    let x: Vec<u32> = (0..n).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let y: Vec<u32> = (0..n).map(|i| !i).collect();
    let (px, py) = (upload_u32(&mem, &x), upload_u32(&mem, &y));
    launch(
        &m,
        &mem,
        "vector_add",
        g,
        [256, 1, 1],
        &[A::U64(px), A::U64(py), A::U64(c), A::U32(n)],
    )
    .unwrap();
    let got = download_u32(&mem, c, n as usize);
    for i in 0..n as usize {
        assert_eq!(got[i], x[i].wrapping_add(y[i]));
    }
}

#[test]
fn scale_is_a_bit_exact_f32_multiply() {
    let m = module("scale");
    let mem = DeviceMemory::new();
    let mut rng = Rng(7);
    let mut x: Vec<f32> = (0..3000).map(|_| rng.f32() * 1e3).collect();
    x.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MIN_POSITIVE,
        1e-45,
        f32::MAX,
        3.0e38,
    ]);
    let n = x.len() as u32;
    for &factor in &[1.5f32, -0.1, 3.0, 1e-40, f32::INFINITY] {
        let p = upload_f32(&mem, &x);
        launch(
            &m,
            &mem,
            "scale",
            [n.div_ceil(128), 1, 1],
            [128, 1, 1],
            &[A::U64(p), A::F32(factor), A::U32(n)],
        )
        .unwrap();
        let got = download_f32(&mem, p, n as usize);
        for i in 0..n as usize {
            let want = x[i] * factor;
            if want.is_nan() {
                assert_eq!(got[i].to_bits(), 0x7fff_ffff, "canonical NaN at {i}");
            } else {
                assert_eq!(
                    got[i].to_bits(),
                    want.to_bits(),
                    "x={} factor={factor}",
                    x[i]
                );
            }
        }
    }
}

fn line_of(src: &str, needle: &str) -> u32 {
    src.lines()
        .position(|l| l.contains(needle))
        .map(|i| i as u32 + 1)
        .expect(needle)
}

#[test]
fn write_out_of_bounds_faults_naming_the_line() {
    let src = kernel_src("faults");
    let m = Module::parse(&src).unwrap();
    let mem = DeviceMemory::new();
    let out = mem.alloc(16).unwrap();
    let neighbour = mem.alloc(16).unwrap();
    let err = launch(
        &m,
        &mem,
        "write_out_of_bounds",
        [2, 1, 1],
        [64, 1, 1],
        &[A::U64(out), A::U64(1 << 40)],
    )
    .unwrap_err();
    let st_line = line_of(&src, "st.global.u32");
    match err {
        ExecError::Fault { site, message } => {
            assert_eq!(site.line, st_line, "{message}");
            assert_eq!(site.ctaid, [0, 0, 0]);
            assert_eq!(site.tid, [0, 0, 0]);
            assert!(message.contains("out-of-bounds"), "{message}");
        }
        e => panic!("expected a fault, got {e:?}"),
    }
    // Just past the end, and into the gap before the next allocation: both fault, and the
    // neighbour is untouched.
    for off in [4u64, 64, (neighbour - out) / 4 - 1] {
        let e = launch(
            &m,
            &mem,
            "write_out_of_bounds",
            [1, 1, 1],
            [1, 1, 1],
            &[A::U64(out), A::U64(off)],
        )
        .unwrap_err();
        assert!(matches!(e, ExecError::Fault { .. }), "offset {off}: {e:?}");
    }
    assert_eq!(download_u32(&mem, neighbour, 4), vec![0; 4]);
    // In bounds it works.
    launch(
        &m,
        &mem,
        "write_out_of_bounds",
        [1, 1, 1],
        [1, 1, 1],
        &[A::U64(out), A::U64(3)],
    )
    .unwrap();
    assert_eq!(download_u32(&mem, out, 4), vec![0, 0, 0, 1]);
    // A freed allocation faults (stale pointer).
    mem.free(out).unwrap();
    let e = launch(
        &m,
        &mem,
        "write_out_of_bounds",
        [1, 1, 1],
        [1, 1, 1],
        &[A::U64(out), A::U64(0)],
    )
    .unwrap_err();
    assert!(matches!(e, ExecError::Fault { .. }));
    // A null pointer faults.
    let e = launch(
        &m,
        &mem,
        "write_out_of_bounds",
        [1, 1, 1],
        [1, 1, 1],
        &[A::U64(0), A::U64(0)],
    )
    .unwrap_err();
    assert!(matches!(e, ExecError::Fault { .. }));
}

#[test]
fn spin_forever_hits_the_step_limit() {
    let src = kernel_src("faults");
    let m = Module::parse(&src).unwrap();
    let mem = DeviceMemory::new();
    let flag = mem.alloc(4).unwrap();
    for threads in [1usize, 2] {
        let t = std::time::Instant::now();
        let err = launch_full(
            &m,
            &mem,
            "spin_forever",
            [4, 1, 1],
            [64, 1, 1],
            0,
            &[A::U64(flag)],
            10_000_000,
            threads,
        )
        .unwrap_err();
        match err {
            ExecError::StepLimit { site, limit } => {
                assert_eq!(limit, 10_000_000);
                let spin_lines = [
                    line_of(&src, "ld.volatile.global.u32"),
                    line_of(&src, "setp.eq.s32 \t%p1, %r1, 0"),
                    line_of(&src, "@%p1 bra \t$L__BB1_1"),
                ];
                assert!(spin_lines.contains(&site.line), "site {site}");
            }
            e => panic!("expected StepLimit, got {e:?}"),
        }
        assert!(t.elapsed().as_secs() < 20);
    }
}

#[test]
fn step_limit_is_exact_for_one_thread() {
    let m = module("iota");
    let mem = DeviceMemory::new();
    let out = mem.alloc(256 * 4).unwrap();
    let st = launch(
        &m,
        &mem,
        "iota",
        [2, 1, 1],
        [128, 1, 1],
        &[A::U64(out), A::U32(256)],
    )
    .unwrap();
    let need = st.lane_instructions;
    // 256 threads each run 14 instructions.
    assert_eq!(need, 256 * 14);
    launch_full(
        &m,
        &mem,
        "iota",
        [2, 1, 1],
        [128, 1, 1],
        0,
        &[A::U64(out), A::U32(256)],
        need,
        1,
    )
    .unwrap();
    let e = launch_full(
        &m,
        &mem,
        "iota",
        [2, 1, 1],
        [128, 1, 1],
        0,
        &[A::U64(out), A::U32(256)],
        need - 1,
        1,
    )
    .unwrap_err();
    assert!(matches!(e, ExecError::StepLimit { .. }), "{e:?}");
}

#[test]
fn empty_kernel_runs() {
    let m = module("faults");
    let mem = DeviceMemory::new();
    let k = kinfo(&m, "empty");
    assert!(k.params.is_empty());
    let st = m
        .launch(
            "empty",
            &mem,
            &LaunchParams {
                grid: [3, 2, 1],
                block: [32, 2, 1],
                shared_mem_bytes: 0,
                args: &[],
                step_limit: 1000,
                threads: 0,
            },
        )
        .unwrap();
    assert_eq!(st.lane_instructions, 6 * 64);
}

#[test]
fn param_layouts() {
    let m = module("faults");
    let k = kinfo(&m, "write_out_of_bounds");
    assert_eq!(
        k.params,
        vec![
            ParamInfo {
                name: "write_out_of_bounds_param_0".into(),
                size: 8,
                align: 8,
                pointer_sized: true,
                ty: ParamType::Unsigned,
                used_as_address: true,
            },
            ParamInfo {
                name: "write_out_of_bounds_param_1".into(),
                size: 8,
                align: 8,
                pointer_sized: true,
                // An index (`out[offset]`), scaled before it is added: not an address.
                ty: ParamType::Unsigned,
                used_as_address: false,
            },
        ]
    );
    let m = module("scale");
    let k = kinfo(&m, "scale");
    assert_eq!(k.param_layout(), (vec![0, 8, 12], 16));
    assert!(k.params[0].pointer_sized && !k.params[1].pointer_sized && !k.params[2].pointer_sized);
    let m = module("iota");
    assert_eq!(kinfo(&m, "iota").param_layout(), (vec![0, 8], 12));
    let names: Vec<_> = module("vector_add")
        .kernels()
        .iter()
        .map(|k| k.name.clone())
        .collect();
    assert_eq!(names, vec!["fill_linear", "vector_add"]);
}

#[test]
fn invalid_launches_are_refused() {
    let m = module("iota");
    let mem = DeviceMemory::new();
    let out = mem.alloc(64).unwrap();
    let a = args(kinfo(&m, "iota"), &[A::U64(out), A::U32(16)]);
    fn p(grid: [u32; 3], block: [u32; 3], args: &[u8], shared: u32) -> LaunchParams<'_> {
        LaunchParams {
            grid,
            block,
            shared_mem_bytes: shared,
            args,
            step_limit: 1 << 30,
            threads: 1,
        }
    }
    let cases: Vec<(&str, LaunchParams<'_>)> = vec![
        ("iota", p([1, 1, 1], [1, 1, 1], &a[..8], 0)),
        ("iota", p([1, 1, 1], [1, 1, 1], &[], 0)),
        ("nope", p([1, 1, 1], [1, 1, 1], &a, 0)),
        ("iota", p([0, 1, 1], [1, 1, 1], &a, 0)),
        ("iota", p([1, 1, 1], [1025, 1, 1], &a, 0)),
        ("iota", p([1, 1, 1], [32, 32, 2], &a, 0)),
        ("iota", p([1, 1, 1], [32, 1, 1], &a, 1 << 20)),
    ];
    for (name, lp) in cases {
        let e = m.launch(name, &mem, &lp).unwrap_err();
        assert!(
            matches!(e, ExecError::InvalidLaunch(_)),
            "{name} {lp:?}: {e:?}"
        );
    }
    let mut big = a.clone();
    big.push(0);
    assert!(matches!(
        m.launch("iota", &mem, &p([1, 1, 1], [1, 1, 1], &big, 0)),
        Err(ExecError::InvalidLaunch(_))
    ));
}

#[test]
fn module_is_send_and_sync() {
    fn ok<T: Send + Sync>() {}
    ok::<Module>();
    ok::<DeviceMemory>();
}

#[test]
fn many_threads_do_not_stop_a_launch_that_fits_its_step_limit() {
    // Budget is handed to threads in chunks; a thread's unspent chunk must not starve the others
    // (seen on a 16-core machine: this launch of 384 lane-instructions stopped at a limit of 1000).
    let m = module("faults");
    let mem = DeviceMemory::new();
    for threads in [1, 2, 16, 64] {
        let st = m
            .launch(
                "empty",
                &mem,
                &LaunchParams {
                    grid: [64, 1, 1],
                    block: [32, 2, 1],
                    shared_mem_bytes: 0,
                    args: &[],
                    step_limit: 64 * 64 + 300,
                    threads,
                },
            )
            .unwrap_or_else(|e| panic!("threads {threads}: {e}"));
        assert_eq!(st.lane_instructions, 64 * 64);
    }
}

#[test]
fn kernels_launch_by_index_as_by_name() {
    // vector_add.ptx has two kernels: index 1 is `vector_add`, not the first in the file.
    let m = module("vector_add");
    let mem = DeviceMemory::new();
    let n = 100u32;
    let (a, b) = (
        upload_u32(&mem, &(0..n).collect::<Vec<_>>()),
        upload_u32(&mem, &(0..n).map(|i| 2 * i).collect::<Vec<_>>()),
    );
    let (by_name, by_index) = (
        mem.alloc(n as u64 * 4).unwrap(),
        mem.alloc(n as u64 * 4).unwrap(),
    );
    let index = m
        .kernels()
        .iter()
        .position(|k| k.name == "vector_add")
        .unwrap();
    assert_eq!(index, 1);
    let k = kinfo(&m, "vector_add");
    for (out, via_index) in [(by_name, false), (by_index, true)] {
        let block = args(k, &[A::U64(a), A::U64(b), A::U64(out), A::U32(n)]);
        let lp = LaunchParams {
            grid: [1, 1, 1],
            block: [128, 1, 1],
            shared_mem_bytes: 0,
            args: &block,
            step_limit: 1 << 30,
            threads: 1,
        };
        let st = if via_index {
            m.launch_by_index(index, &mem, &lp)
        } else {
            m.launch("vector_add", &mem, &lp)
        };
        assert!(st.unwrap().lane_instructions > 0);
    }
    assert_eq!(
        download_u32(&mem, by_index, n as usize),
        (0..n).map(|i| 3 * i).collect::<Vec<_>>()
    );
    assert_eq!(
        download_u32(&mem, by_name, n as usize),
        download_u32(&mem, by_index, n as usize)
    );
    // An index past the module's kernels is refused before anything runs.
    let lp = LaunchParams {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
        args: &[],
        step_limit: 1 << 30,
        threads: 1,
    };
    let e = m.launch_by_index(2, &mem, &lp).unwrap_err();
    assert!(
        matches!(&e, ExecError::InvalidLaunch(m) if m.contains("no kernel 2")),
        "{e:?}"
    );
}
