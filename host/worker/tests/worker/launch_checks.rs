//! What launches and modules are checked against, on the emulator and on the cuda backend (over
//! the fake driver) alike: the device's launch limits as each reports them, modules a GPU
//! refuses refused in the same words, and errors found after a launch returned naming that
//! launch by its ordinal.

use std::time::Duration;

use super::fake_cuda::{fake_worker, launch};
use crate::support::*;
use tasklet_worker::{ErrorKind, LaunchLimits};

const IOTA_PTX: &str = include_str!("../../../../kernels/iota.ptx");
const FAULTS_PTX: &str = include_str!("../../../../kernels/faults.ptx");

fn iota_args(out: u64, n: u32) -> Vec<u8> {
    out.to_le_bytes()
        .into_iter()
        .chain(n.to_le_bytes())
        .collect()
}

#[test]
fn the_emulator_reports_and_enforces_an_sm_80_device() {
    let mut w = emu_worker(64 << 20);
    let info = w.info().unwrap();
    assert_eq!(info.compute_capability, (8, 0));
    assert_eq!(info.launch_limits, LaunchLimits::SM_80);
    let m = w.load_module(IOTA_PTX).unwrap();
    let out = w.alloc(64).unwrap();
    let args = iota_args(out, 16);
    let good = launch(&m, "iota", 16, &args, Duration::from_secs(5));
    // 200 KiB of dynamic shared memory: more than an sm_80 block may have, though the emulator
    // itself could run it.
    let (kind, message) = posted_error(
        &mut w,
        &tasklet_worker::Launch {
            shared_mem_bytes: 200 << 10,
            ..good.clone()
        },
    );
    assert_eq!(kind, ErrorKind::LaunchFailed, "{message}");
    assert_eq!(
        message,
        "launch #1 of kernel `iota` failed: cannot launch kernel `iota`: 204800 bytes of dynamic shared memory, \
         over this device's limit of 166912 (max shared memory per block)"
    );
    let (_, message) = posted_error(
        &mut w,
        &tasklet_worker::Launch {
            block: [1024, 2, 1],
            ..good.clone()
        },
    );
    assert!(
        message.starts_with("launch #2 of kernel `iota` failed: ")
            && message.ends_with(
                "block (1024, 2, 1) has 2048 threads, over this device's limit of 1024 (max threads per block)"
            ),
        "{message}"
    );
    // Within them it runs.
    w.launch(&good).unwrap();
    w.sync().unwrap();
    assert!(!w.is_poisoned());
}

/// The message every backend refuses a module of ISA 99.0 with, on a loader of PTX ISA up to
/// `newest` (CUDA `cuda`).
fn isa_refusal(newest: &str, cuda: &str) -> String {
    format!(
        "the PTX is ISA version 99.0 (its `.version`), newer than this driver compiles (PTX ISA up to {newest}, \
         as CUDA {cuda}); compile it with a CUDA toolkit or NVRTC of CUDA {cuda} or older (the ISA version is the \
         toolkit's)"
    )
}

/// The message every backend refuses `.target sm_{target}` with on a device of `sm`.
fn target_refusal(target: &str, sm: &str) -> String {
    format!(
        "the PTX targets sm_{target} (its `.target`), which this device (sm_{sm}) cannot run; compile for sm_{sm} \
         or older: nvcc -arch=compute_{sm} --ptx, or NVRTC's --gpu-architecture=compute_{sm}"
    )
}

/// The message every backend refuses a module with whose fourth line is one word of 100,000
/// bytes (the driver's loader aborts on it): the limit, and the word's first 64 bytes.
fn token_refusal() -> String {
    format!(
        "PTX line 4: a token is longer than the 16384-byte limit on one identifier, directive, number or string \
         of a module: `{}…` (100000 bytes); shorten it (a kernel's or symbol's name, most likely)",
        "y".repeat(64)
    )
}

/// A module whose fourth line is one word of 100,000 bytes.
fn huge_token() -> String {
    format!(
        ".version 7.0\n.target sm_80\n.address_size 64\n{}\n",
        "y".repeat(100_000)
    )
}

const EMPTY: &str =
    "the module is empty; a PTX module begins with `.version` and `.target` (as nvcc --ptx and \
                     NVRTC write them): load the whole PTX text";

#[test]
fn modules_a_gpu_refuses_are_refused_alike_on_the_emulator_and_the_gpu() {
    let too_new = IOTA_PTX.replacen(".version 9.0", ".version 99.0", 1);
    let huge_token = huge_token();
    let mut emu = emu_worker(64 << 20);
    // The emulator: an sm_80 device whose driver compiles what CUDA 13.1 does.
    let refusals = [
        ("", EMPTY.to_owned()),
        ("  // nothing\n", EMPTY.to_owned()),
        (too_new.as_str(), isa_refusal("9.1", "13.1")),
        (
            &*IOTA_PTX.replacen(".target sm_80", ".target sm_86", 1),
            target_refusal("86", "80"),
        ),
        (huge_token.as_str(), token_refusal()),
    ];
    for (ptx, says) in &refusals {
        assert_eq!(
            op_error(emu.load_module(ptx)),
            (ErrorKind::LoadFailed, says.clone())
        );
    }
    emu.load_module(IOTA_PTX)
        .expect("iota loads on the emulator");
    let Some(mut gpu) = fake_worker() else { return };
    // The fake GPU: sm_90 and a CUDA 13.0 driver.
    let refusals = [
        ("", EMPTY.to_owned()),
        (too_new.as_str(), isa_refusal("9.0", "13.0")),
        (
            &*IOTA_PTX.replacen(".version 9.0", ".version 9.1", 1),
            isa_refusal("9.0", "13.0").replace("version 99.0", "version 9.1"),
        ),
        (
            &*IOTA_PTX.replacen(".target sm_80", ".target sm_100", 1),
            target_refusal("100", "90"),
        ),
        (huge_token.as_str(), token_refusal()),
    ];
    for (ptx, says) in &refusals {
        assert_eq!(
            op_error(gpu.load_module(ptx)),
            (ErrorKind::LoadFailed, says.clone())
        );
    }
    gpu.load_module(IOTA_PTX).expect("iota loads on the GPU");
    assert!(!gpu.is_poisoned());
}

#[test]
fn a_fault_found_on_the_device_later_names_its_launch() {
    let Some(mut w) = fake_worker() else { return };
    let iota = w.load_module(IOTA_PTX).unwrap();
    let faults = w.load_module(FAULTS_PTX).unwrap();
    let buf = w.alloc(64).unwrap();
    let args = iota_args(buf, 16);
    for _ in 0..3 {
        w.launch(&launch(&iota, "iota", 16, &args, Duration::from_secs(5)))
            .unwrap();
    }
    // Seen finished by a sync the device signals: the fault that follows is not theirs, though
    // every event of a faulted context reports it.
    w.sync().unwrap();
    let bad: Vec<u8> = buf
        .to_le_bytes()
        .into_iter()
        .chain((1u64 << 40).to_le_bytes())
        .collect();
    w.launch(&launch(
        &faults,
        "write_out_of_bounds",
        1,
        &bad,
        Duration::from_secs(5),
    ))
    .unwrap();
    let (kind, message) = op_error(w.alloc(16));
    assert_eq!(kind, ErrorKind::KernelFault, "{message}");
    assert!(
        message.starts_with(
            "launch #4 of kernel `write_out_of_bounds` (or work queued before it) failed: CUDA_ERROR_ILLEGAL_ADDRESS"
        ),
        "{message}"
    );
}

#[test]
fn a_worker_ended_by_its_watchdog_is_reported_with_the_last_launch() {
    let Some(mut w) = fake_worker() else { return };
    let m = w.load_module(FAULTS_PTX).unwrap();
    let flag = w.alloc(4).unwrap();
    let args = flag.to_le_bytes();
    let d = Duration::from_millis(100);
    w.launch(&launch(&m, "empty", 1, &[], d)).unwrap();
    w.launch(&launch(&m, "spin_forever", 32, &args, d)).unwrap();
    // The watchdog ends the process within its grace after the deadline.
    std::thread::sleep(Duration::from_millis(700));
    let (kind, message) = op_error(w.ping());
    assert_eq!(kind, ErrorKind::DeadlineExceeded, "{message}");
    assert!(
        message.contains("the last one launched was launch #2, of `spin_forever`"),
        "{message}"
    );
}
