//! CUDA C through a worker: `load_source` compiles with NVRTC (found at run time) and the emu
//! backend runs the PTX. Without NVRTC each test prints "skipped: NVRTC not found" and passes,
//! except under CI (`CI` set), where kernels/install-nvrtc.sh must have installed it.

use std::time::Duration;

use crate::support::*;
use tasklet_worker::{nvrtc, BackendKind, ErrorKind, Launch, Worker, WorkerCommand, WorkerError};

fn emu_worker_with(command: &WorkerCommand) -> Worker {
    Worker::spawn(command, BackendKind::Emu, 16 << 20, Duration::from_secs(30))
        .expect("spawn emu worker")
}

/// Whether NVRTC is there; prints the skip line when it is not (and fails under CI).
fn have_nvrtc() -> bool {
    match nvrtc::library() {
        Ok(_) => true,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must find NVRTC (kernels/install-nvrtc.sh): {e}"
            );
            eprintln!("skipped: NVRTC not found ({e})");
            false
        }
    }
}

const SAXPY: &str = r#"
extern "C" __global__ void saxpy(float a, const float *x, float *y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

#define WIDTH 3
extern "C" __global__ void tri(unsigned long long *out) {
    __shared__ unsigned long long s[64];
    s[threadIdx.x] = threadIdx.x * WIDTH;
    __syncthreads();
    unsigned long long acc = 0;
    for (unsigned j = 0; j <= threadIdx.x; ++j) acc += s[j];
    out[threadIdx.x] = acc;
}
"#;

#[test]
fn cuda_c_compiles_and_runs_on_the_emulator() {
    if !have_nvrtc() {
        return;
    }
    let mut w = emu_worker_with(&command(false));
    let m = w.load_source(SAXPY, &[]).expect("load_source");
    let names: Vec<_> = m.kernels.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["saxpy", "tri"]);

    let n = 1000u32;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let y: Vec<f32> = (0..n).map(|i| 1.0 - i as f32).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    let dx = w.alloc(4 * n as u64).unwrap();
    let dy = w.alloc(4 * n as u64).unwrap();
    w.write(dx, &bytes(&x)).unwrap();
    w.write(dy, &bytes(&y)).unwrap();
    let k = &m.kernels[0];
    let (offs, size) = k.param_layout();
    let mut args = vec![0u8; size as usize];
    args[offs[0] as usize..][..4].copy_from_slice(&2.5f32.to_le_bytes());
    args[offs[1] as usize..][..8].copy_from_slice(&dx.to_le_bytes());
    args[offs[2] as usize..][..8].copy_from_slice(&dy.to_le_bytes());
    args[offs[3] as usize..][..4].copy_from_slice(&n.to_le_bytes());
    let launch = Launch {
        module: m.id,
        kernel: kernel_index(&m, "saxpy"),
        grid: [n.div_ceil(128), 1, 1],
        block: [128, 1, 1],
        shared_mem_bytes: 0,
        args: &args,
        deadline: Duration::from_secs(10),
    };
    w.launch(&launch).unwrap();
    let mut back = vec![0u8; 4 * n as usize];
    w.read(dy, &mut back).unwrap();
    for (i, c) in back.chunks(4).enumerate() {
        let got = f32::from_le_bytes(c.try_into().unwrap());
        // nvcc and NVRTC contract a*x+y into one fma by default.
        assert_eq!(
            got.to_bits(),
            2.5f32.mul_add(x[i], y[i]).to_bits(),
            "y[{i}]"
        );
    }

    let out = w.alloc(64 * 8).unwrap();
    let args = out.to_le_bytes();
    w.launch(&Launch {
        kernel: kernel_index(&m, "tri"),
        grid: [1, 1, 1],
        block: [64, 1, 1],
        args: &args,
        ..launch
    })
    .unwrap();
    let mut back = vec![0u8; 64 * 8];
    w.read(out, &mut back).unwrap();
    for (i, c) in back.chunks(8).enumerate() {
        let i = i as u64;
        assert_eq!(
            u64::from_le_bytes(c.try_into().unwrap()),
            3 * i * (i + 1) / 2,
            "out[{i}]"
        );
    }
}

#[test]
fn options_reach_nvrtc() {
    if !have_nvrtc() {
        return;
    }
    let mut w = emu_worker_with(&command(false));
    let src = "extern \"C\" __global__ void k(int *p) { p[0] = VALUE; }";
    match w.load_source(src, &[]) {
        Err(WorkerError::Op {
            kind: ErrorKind::LoadFailed,
            message,
        }) => assert!(message.contains("VALUE"), "{message}"),
        other => panic!("{other:?}"),
    }
    let m = w
        .load_source(
            src,
            &["-DVALUE=41".into(), "--gpu-architecture=compute_80".into()],
        )
        .unwrap();
    let p = w.alloc(4).unwrap();
    let args = p.to_le_bytes();
    let l = Launch {
        module: m.id,
        kernel: kernel_index(&m, "k"),
        grid: [1; 3],
        block: [1; 3],
        shared_mem_bytes: 0,
        args: &args,
        deadline: Duration::from_secs(5),
    };
    w.launch(&l).unwrap();
    let mut b = [0u8; 4];
    w.read(p, &mut b).unwrap();
    assert_eq!(i32::from_le_bytes(b), 41);
    match w.load_source(src, &["--no-such-option".into()]) {
        Err(WorkerError::Op {
            kind: ErrorKind::LoadFailed,
            message,
        }) => assert!(message.contains("no-such-option"), "{message}"),
        other => panic!("{other:?}"),
    }
    w.ping().unwrap();
}

#[test]
fn syntax_error_is_load_failed_with_the_log() {
    if !have_nvrtc() {
        return;
    }
    let mut w = emu_worker_with(&command(false));
    let src = "extern \"C\" __global__ void k(int *p) {\n  p[0] = 1\n}\n";
    match w.load_source(src, &[]) {
        Err(WorkerError::Op {
            kind: ErrorKind::LoadFailed,
            message,
        }) => {
            // NVRTC's log names the program and the line.
            assert!(
                message.contains("tasklet.cu(3)") || message.contains("tasklet.cu(2)"),
                "{message}"
            );
            assert!(message.contains("error"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    w.ping().unwrap();
}

#[test]
fn missing_nvrtc_is_unsupported_with_the_install_hint() {
    // Runs everywhere: TASKLET_NVRTC pointing nowhere is authoritative, so the worker finds none.
    let cmd = WorkerCommand {
        program: "/usr/bin/env".into(),
        args: vec![
            "TASKLET_NVRTC=/nonexistent/libnvrtc.so.13".into(),
            env!("CARGO_BIN_EXE_tasklet-worker").into(),
        ],
    };
    let mut w = emu_worker_with(&cmd);
    match w.load_source("extern \"C\" __global__ void k() {}", &[]) {
        Err(WorkerError::Op {
            kind: ErrorKind::Unsupported,
            message,
        }) => {
            assert!(
                message.contains("pip install nvidia-cuda-nvrtc"),
                "{message}"
            );
            assert!(message.contains("/nonexistent/libnvrtc.so.13"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    w.ping().unwrap();
}
