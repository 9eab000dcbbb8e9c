//! Cooperative launches (`Module::launch_cooperative_by_index`): the driver-defined registers
//! `%envreg0`..`%envreg31`, the grid-wide workspace they point a cooperative launch to, and CUDA's
//! `grid.sync()` across CTAs that each run on a thread of their own; a normal launch of the same
//! kernel traps, as on a GPU.

use crate::support::*;
use tasklet_ptx::{
    DeviceMemory, ExecError, LaunchParams, LaunchStats, MemError, Module, GRID_WORKSPACE_BYTES,
};

const HEAD: &str = ".version 8.5\n.target sm_80\n.address_size 64\n";

/// nvcc 13.0 (`--ptx -arch=sm_80 -O3`, comments dropped) of
///
/// ```cuda
/// extern "C" __global__ void rounds(unsigned int* counter, unsigned int* seen, unsigned int n)
/// {
///     cooperative_groups::grid_group grid = cooperative_groups::this_grid();
///     for (unsigned int r = 0; r < n; r++) {
///         if (threadIdx.x == 0) atomicAdd(&counter[r], 1u);
///         grid.sync();
///         if (threadIdx.x == 0) seen[r * gridDim.x + blockIdx.x] = *(volatile unsigned int*)&counter[r];
///     }
/// }
/// ```
///
/// Every block sees every block's add of a round once past that round's `grid.sync()`: a barrier
/// that let one through early shows a short count.
const ROUNDS: &str = r#".version 9.0
.target sm_80
.address_size 64


.visible .entry rounds(
	.param .u64 rounds_param_0,
	.param .u64 rounds_param_1,
	.param .u32 rounds_param_2
)
{
	.reg .pred 	%p<9>;
	.reg .b32 	%r<34>;
	.reg .b64 	%rd<17>;


	ld.param.u64 	%rd6, [rounds_param_0];
	ld.param.u64 	%rd5, [rounds_param_1];
	ld.param.u32 	%r10, [rounds_param_2];
	cvta.to.global.u64 	%rd1, %rd6;
	mov.u32 %r11, %envreg2;
	cvt.u64.u32 	%rd7, %r11;
	mov.u32 %r12, %envreg1;
	cvt.u64.u32 	%rd8, %r12;
	bfi.b64 	%rd2, %rd8, %rd7, 32, 32;
	setp.eq.s32 	%p1, %r10, 0;
	@%p1 bra 	$L__BB0_12;

	mov.u32 	%r1, %tid.x;
	add.s64 	%rd3, %rd2, 4;
	mov.u32 	%r14, %tid.y;
	add.s32 	%r2, %r1, %r14;
	mov.u32 	%r15, %tid.z;
	neg.s32 	%r3, %r15;
	mov.u32 	%r33, 0;
	mov.u32 	%r16, %nctaid.y;
	mov.u32 	%r4, %nctaid.x;
	mul.lo.s32 	%r17, %r4, %r16;
	mov.u32 	%r18, %nctaid.z;
	mul.lo.s32 	%r19, %r17, %r18;
	mov.u32 	%r20, %ctaid.y;
	mov.u32 	%r5, %ctaid.x;
	add.s32 	%r21, %r5, %r20;
	mov.u32 	%r22, %ctaid.z;
	neg.s32 	%r23, %r22;
	setp.eq.s32 	%p2, %r21, %r23;
	mov.u32 	%r24, -2147483647;
	sub.s32 	%r25, %r24, %r19;
	selp.b32 	%r6, %r25, 1, %p2;
	cvta.to.global.u64 	%rd4, %rd5;

$L__BB0_2:
	setp.ne.s32 	%p3, %r1, 0;
	@%p3 bra 	$L__BB0_4;

	mul.wide.u32 	%rd9, %r33, 4;
	add.s64 	%rd10, %rd1, %rd9;
	atom.global.add.u32 	%r26, [%rd10], 1;

$L__BB0_4:
	setp.ne.s64 	%p4, %rd2, 0;
	@%p4 bra 	$L__BB0_6;

	trap;

$L__BB0_6:
	setp.ne.s32 	%p5, %r2, %r3;
	barrier.sync 	0;
	@%p5 bra 	$L__BB0_9;

	atom.add.release.gpu.u32 %r27,[%rd3],%r6;

$L__BB0_8:
	ld.acquire.gpu.u32 %r29,[%rd3];
	xor.b32  	%r30, %r29, %r27;
	setp.gt.s32 	%p6, %r30, -1;
	@%p6 bra 	$L__BB0_8;

$L__BB0_9:
	barrier.sync 	0;
	@%p3 bra 	$L__BB0_11;

	mul.wide.u32 	%rd13, %r33, 4;
	add.s64 	%rd14, %rd1, %rd13;
	ld.volatile.global.u32 	%r31, [%rd14];
	mad.lo.s32 	%r32, %r33, %r4, %r5;
	mul.wide.u32 	%rd15, %r32, 4;
	add.s64 	%rd16, %rd4, %rd15;
	st.global.u32 	[%rd16], %r31;

$L__BB0_11:
	add.s32 	%r33, %r33, 1;
	setp.lt.u32 	%p8, %r33, %r10;
	@%p8 bra 	$L__BB0_2;

$L__BB0_12:
	ret;

}
"#;

fn cooperative(
    m: &Module,
    mem: &DeviceMemory,
    name: &str,
    grid: u32,
    block: u32,
    vals: &[A],
    threads: usize,
) -> Result<LaunchStats, ExecError> {
    let a = args(kinfo(m, name), vals);
    let index = m.kernels().iter().position(|k| k.name == name).unwrap();
    m.launch_cooperative_by_index(
        index,
        mem,
        &LaunchParams {
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            shared_mem_bytes: 0,
            args: &a,
            step_limit: 1 << 40,
            threads,
        },
    )
}

/// A kernel `k(.param .u64 out)` that stores `%envreg1`, `%envreg2`, `%envreg0`, `%envreg31` in
/// out[0..4] and, where the address `%envreg1:%envreg2` is not 0, the word at workspace+12 in
/// out[4], then stores 7 there.
fn envreg_kernel() -> Module {
    let src = format!(
        "{HEAD}.visible .entry k(.param .u64 out)\n{{\n.reg .pred %p<2>;\n.reg .b32 %r<8>;\n.reg .b64 %rd<8>;\n\
         ld.param.u64 %rd1, [out];\n\
         mov.u32 %r1, %envreg1;\nmov.u32 %r2, %envreg2;\nmov.b32 %r3, %envreg0;\nmov.u32 %r4, %envreg31;\n\
         st.global.u32 [%rd1], %r1;\nst.global.u32 [%rd1+4], %r2;\nst.global.u32 [%rd1+8], %r3;\nst.global.u32 [%rd1+12], %r4;\n\
         cvt.u64.u32 %rd2, %r2;\ncvt.u64.u32 %rd3, %r1;\nbfi.b64 %rd4, %rd3, %rd2, 32, 32;\n\
         setp.eq.s64 %p1, %rd4, 0;\n@%p1 bra DONE;\n\
         ld.global.u32 %r5, [%rd4+12];\nst.global.u32 [%rd1+16], %r5;\nmov.u32 %r6, 7;\nst.global.u32 [%rd4+12], %r6;\n\
         DONE:\nret;\n}}\n"
    );
    Module::parse(&src).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

#[test]
fn envregs_read_zero_in_a_normal_launch_and_the_workspace_address_in_a_cooperative_one() {
    let m = envreg_kernel();
    let mem = DeviceMemory::new();
    let out = upload_u32(&mem, &[9; 5]);
    launch(&m, &mem, "k", [1, 1, 1], [32, 1, 1], &[A::U64(out)]).unwrap();
    assert_eq!(download_u32(&mem, out, 5), vec![0, 0, 0, 0, 9]);

    cooperative(&m, &mem, "k", 1, 32, &[A::U64(out)], 1).unwrap();
    let got = download_u32(&mem, out, 5);
    let workspace = (u64::from(got[0]) << 32) | u64::from(got[1]);
    assert_ne!(workspace, 0);
    // envreg0 and the rest stay 0; the workspace was zeroed memory the kernel could use.
    assert_eq!(&got[2..], &[0, 0, 0]);
    // The launch's own allocation, freed when it ended.
    assert!(matches!(
        mem.read(workspace, &mut [0u8; 4]),
        Err(MemError::OutOfBounds { .. })
    ));
    // Another launch has a workspace of its own, zeroed again.
    cooperative(&m, &mem, "k", 1, 32, &[A::U64(out)], 1).unwrap();
    let again = download_u32(&mem, out, 5);
    assert_ne!((u64::from(again[0]) << 32) | u64::from(again[1]), workspace);
    assert_eq!(again[4], 0);
    const { assert!(GRID_WORKSPACE_BYTES >= 16) };
}

#[test]
fn envregs_are_read_only_32_bit_registers_read_by_mov() {
    let load = |body: &str| {
        let src = format!(
            "{HEAD}.visible .entry k()\n{{\n.reg .b32 %r<4>;\n.reg .b64 %rd<4>;\n{body}\nret;\n}}\n"
        );
        Module::parse(&src).map(drop).unwrap_err()
    };
    let e = load("mov.u32 %envreg1, %r1;");
    assert_eq!(e.line, 8, "{e}");
    assert!(
        e.message
            .contains("`%envreg1` is a read-only driver-defined register"),
        "{e}"
    );
    let e = load("add.u32 %r1, %envreg2, 1;");
    assert!(
        e.message.contains("only `mov.b32 %r, %envreg2` reads it"),
        "{e}"
    );
    let e = load("mov.u64 %rd1, %envreg1;");
    assert!(e.message.contains("32-bit register"), "{e}");
    // 32 of them, spelt in decimal.
    for name in ["%envreg32", "%envreg01", "%envreg"] {
        let e = load(&format!("mov.u32 %r1, {name};"));
        assert!(e.message.contains(&format!("unknown name `{name}`")), "{e}");
    }
}

/// The line of `grid_sum`'s `trap` in kernels/actor.ptx (1-based).
fn grid_sum_trap_line() -> u32 {
    let src = kernel_src("actor");
    let start = src.find(".entry grid_sum").expect("grid_sum in actor.ptx");
    let before = src[..start].lines().count();
    let within = src[start..]
        .lines()
        .position(|l| l.trim() == "trap;")
        .expect("grid_sum traps when launched normally");
    (before + within) as u32
}

#[test]
fn grid_sum_synchronises_its_whole_grid_in_a_cooperative_launch() {
    let m = module("actor");
    for (grid, block) in [(8u32, 128u32), (17, 64), (32, 256)] {
        let mem = DeviceMemory::new();
        let n = 10_000u32;
        // Small integers: every partial sum is exact in f32, whatever the order.
        let input: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
        let want: f32 = input.iter().sum();
        let inp = upload_f32(&mem, &input);
        let out = upload_f32(&mem, &vec![-1.0; grid as usize + 1]);
        let ctl = mem.alloc(24).unwrap();
        let vals = [A::U64(inp), A::U64(out), A::U32(n), A::U64(ctl)];
        cooperative(&m, &mem, "grid_sum", grid, block, &vals, grid as usize)
            .unwrap_or_else(|e| panic!("grid {grid}: {e}"));
        let sums = download_f32(&mem, out, grid as usize + 1);
        assert_eq!(sums[grid as usize], want, "grid {grid}");
        assert_eq!(sums[..grid as usize].iter().sum::<f32>(), want);
        let processed = download_bytes(&mem, ctl + 16, 8);
        assert_eq!(u64::from_le_bytes(processed.try_into().unwrap()), 1);
    }
}

#[test]
fn grid_sync_holds_every_block_round_after_round() {
    let m = Module::parse(ROUNDS).unwrap();
    let (grid, rounds) = (24u32, 20u32);
    let mem = DeviceMemory::new();
    let counter = upload_u32(&mem, &vec![0; rounds as usize]);
    let seen = upload_u32(&mem, &vec![0; (grid * rounds) as usize]);
    let vals = [A::U64(counter), A::U64(seen), A::U32(rounds)];
    cooperative(&m, &mem, "rounds", grid, 64, &vals, grid as usize).unwrap();
    assert!(download_u32(&mem, seen, (grid * rounds) as usize)
        .iter()
        .all(|&c| c == grid));
}

#[test]
fn grid_sum_launched_normally_traps_naming_the_line() {
    let m = module("actor");
    let mem = DeviceMemory::new();
    let inp = upload_f32(&mem, &[1.0; 64]);
    let out = upload_f32(&mem, &[0.0; 9]);
    let ctl = mem.alloc(24).unwrap();
    let vals = [A::U64(inp), A::U64(out), A::U32(64), A::U64(ctl)];
    let e = launch(&m, &mem, "grid_sum", [8, 1, 1], [32, 1, 1], &vals).unwrap_err();
    match &e {
        ExecError::Fault { site, message } => {
            assert_eq!(message, "trap instruction executed");
            assert_eq!(site.line, grid_sum_trap_line(), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(e
        .to_string()
        .contains(&format!("PTX line {}", grid_sum_trap_line())));
}

#[test]
fn a_cooperative_grid_needs_a_thread_per_block() {
    let m = module("actor");
    let mem = DeviceMemory::new();
    let inp = upload_f32(&mem, &[1.0; 64]);
    let out = upload_f32(&mem, &[0.0; 9]);
    let ctl = mem.alloc(24).unwrap();
    let vals = [A::U64(inp), A::U64(out), A::U32(64), A::U64(ctl)];
    let e = cooperative(&m, &mem, "grid_sum", 8, 32, &vals, 7).unwrap_err();
    assert!(
        matches!(&e, ExecError::InvalidLaunch(m)
            if m.contains("8 blocks cannot be resident on 7 threads")),
        "{e:?}"
    );
    // Nothing ran.
    assert_eq!(download_f32(&mem, out, 9), vec![0.0; 9]);
    cooperative(&m, &mem, "grid_sum", 8, 32, &vals, 8).unwrap();
    assert_eq!(download_f32(&mem, out, 9)[8], 64.0);
}

#[test]
fn a_block_that_faults_ends_a_cooperative_launch_whose_other_blocks_wait_at_grid_sync() {
    let m = module("actor");
    let mem = DeviceMemory::new();
    // Blocks 4..8 read past the input (n says 8 blocks of 64 floats, there are 4 blocks' worth):
    // they fault before the barrier, which blocks 0..4 are waiting at.
    let inp = upload_f32(&mem, &[1.0; 256]);
    let out = upload_f32(&mem, &[0.0; 9]);
    let ctl = mem.alloc(24).unwrap();
    let vals = [A::U64(inp), A::U64(out), A::U32(512), A::U64(ctl)];
    let e = cooperative(&m, &mem, "grid_sum", 8, 64, &vals, 8).unwrap_err();
    match &e {
        ExecError::Fault { site, message } => {
            assert!(message.contains("out-of-bounds"), "{e}");
            assert!(site.ctaid[0] >= 4, "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(download_f32(&mem, out, 9)[8], 0.0);
}
