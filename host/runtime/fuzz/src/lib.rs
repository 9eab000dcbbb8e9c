//! The harness of the `args` target: fuzz input read as one launch (a kernel, its arguments, its
//! shape) made through [`LocalGpu`], the path every tasklet's and every remote client's launch
//! takes, on a host whose workers run the emulator.
//!
//! Checked besides "never panics": a launch the host accepts has as many arguments as the
//! kernel has parameters; what the kernel then sees is exactly what was passed (the `mixed`
//! kernel stores every parameter where the harness reads it back, `iota` writes where its buffer
//! argument and offset say); and no error message is longer than [`MAX_MESSAGE`] bytes, however
//! long the kernel name it was given.
//!
//! The host and one lease are made once per process and kept across inputs; a fault, a lost
//! worker or an ended lease drops them and the next input starts a new lease.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tasklet_runtime::gpu::{
    BufferId, GpuService, KernelArg, LaunchConfig, LeaseRequest, LocalGpu, ModuleId, Relocation,
    SessionId,
};
use tasklet_runtime::{BackendKind, GpuError, Host, HostConfig, Policy, WorkerCommand};

/// The kernels: `iota(u32* out, u32 n)` from the kernel corpus, and those of `mixed.ptx`.
const KERNELS: [&str; 4] = ["iota", "mixed", "none", "big"];
const IOTA_PTX: &str = include_str!("../../../../kernels/iota.ptx");
const MIXED_PTX: &str = include_str!("mixed.ptx");

/// Bytes of the two buffers arguments may name.
pub const BUFFERS: [u64; 2] = [256, 4096];
/// The longest error message allowed: the words around at most ~200 bytes of quoted input.
pub const MAX_MESSAGE: usize = 1024;

/// The input read as a stream of choices (zero once it runs out).
struct Choices<'a> {
    data: &'a [u8],
    at: usize,
}

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }
    /// A byte offset: mostly small, sometimes at an edge.
    fn offset(&mut self) -> u64 {
        match self.byte() % 8 {
            0 => self.u64(),
            1 => u64::MAX - u64::from(self.byte()),
            2 => 4096 + u64::from(self.byte()),
            _ => u64::from(self.byte()) * 4,
        }
    }
}

/// One argument as the input chose it, kept so that it can be checked against what the kernel
/// saw.
#[derive(Debug, Clone)]
enum Arg {
    /// One of the two buffers (`Some(index)`) or an id the service never gave (`None`).
    Buffer(Option<usize>, u64, u64),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
    Bytes(Vec<u8>),
    /// Bytes with buffer addresses placed in them (contract 0.2's `relocated`).
    Relocated(Vec<u8>, Vec<Reloc>),
}

/// One relocation as the input chose it: where, which buffer (as for [`Arg::Buffer`]), at what
/// offset into it.
#[derive(Debug, Clone)]
struct Reloc {
    at: u32,
    buffer: Option<usize>,
    forged: u64,
    offset: u64,
}

impl Reloc {
    fn read(c: &mut Choices<'_>) -> Reloc {
        let at = match c.byte() % 4 {
            0 => c.u32(),
            // Mostly a place an address can go in the kernels' by-value parameters.
            _ => 8 * u32::from(c.byte() % 4),
        };
        let which = c.byte();
        Reloc {
            at,
            buffer: (which % 4 < 3).then_some(usize::from(which % 2)),
            forged: c.u64(),
            offset: c.offset(),
        }
    }
}

impl Arg {
    fn read(c: &mut Choices<'_>) -> Arg {
        match c.byte() % 10 {
            0 | 1 => {
                let which = c.byte();
                let id = c.u64();
                let which = (which % 4 < 3).then_some(usize::from(which % 2));
                Arg::Buffer(which, id, c.offset())
            }
            2 => Arg::I32(c.u32() as i32),
            3 => Arg::U32(c.u32()),
            4 => Arg::I64(c.u64() as i64),
            5 => Arg::U64(c.u64()),
            6 => Arg::F32(f32::from_bits(c.u32())),
            7 => Arg::F64(f64::from_bits(c.u64())),
            8 => {
                // Mostly the sizes the kernels' parameters have, sometimes any.
                const SIZES: [usize; 8] = [1, 2, 12, 24, 4000, 8, 4, 4001];
                let n = match c.byte() % 3 {
                    0 => usize::from(c.byte()),
                    _ => SIZES[usize::from(c.byte()) % SIZES.len()],
                };
                Arg::Bytes(c.bytes(n))
            }
            _ => {
                const SIZES: [usize; 5] = [24, 12, 8, 16, 4000];
                let n = match c.byte() % 4 {
                    0 => usize::from(c.byte()),
                    _ => SIZES[usize::from(c.byte()) % SIZES.len()],
                };
                let bytes = c.bytes(n);
                let relocs = (0..c.byte() % 5).map(|_| Reloc::read(c)).collect();
                Arg::Relocated(bytes, relocs)
            }
        }
    }

    /// For a relocated argument the host accepted: whether each relocation was one the host
    /// must accept (at a multiple of 8 with 8 bytes before the end, no two at one place, one of
    /// the session's buffers at an offset within it).
    fn relocations_valid(&self) -> bool {
        let Arg::Relocated(bytes, relocs) = self else {
            return true;
        };
        let mut places = Vec::new();
        relocs.iter().all(|r| {
            let fits = r.at.is_multiple_of(8) && r.at as usize + 8 <= bytes.len();
            let fresh = !places.contains(&r.at);
            places.push(r.at);
            let buffer = r.buffer.is_some_and(|i| r.offset <= BUFFERS[i]);
            fits && fresh && buffer
        })
    }

    /// The bytes the kernel sees for it, where the input alone says (not a buffer's address).
    fn value(&self) -> Option<Vec<u8>> {
        Some(match self {
            Arg::Buffer(..) => return None,
            Arg::I32(v) => v.to_le_bytes().to_vec(),
            Arg::U32(v) => v.to_le_bytes().to_vec(),
            Arg::I64(v) => v.to_le_bytes().to_vec(),
            Arg::U64(v) => v.to_le_bytes().to_vec(),
            Arg::F32(v) => v.to_le_bytes().to_vec(),
            Arg::F64(v) => v.to_le_bytes().to_vec(),
            Arg::Bytes(v) => v.clone(),
            Arg::Relocated(..) => return None,
        })
    }
}

/// A launch's shape: mostly small, sometimes one dimension at an edge of the device's limits.
fn shape(c: &mut Choices<'_>) -> LaunchConfig {
    let mut config = LaunchConfig {
        grid: [1 + u32::from(c.byte() % 2), 1, 1],
        block: [1 + u32::from(c.byte() % 32), 1, 1],
        shared_mem_bytes: 0,
    };
    const EDGES: [u32; 7] = [0, 1025, 2049, 65535, 65536, 1 << 31, u32::MAX];
    match c.byte() % 8 {
        0 => config.block[usize::from(c.byte() % 3)] = EDGES[usize::from(c.byte()) % EDGES.len()],
        1 => {
            let edge = EDGES[usize::from(c.byte()) % EDGES.len()];
            // Grid x up to 65535 still runs (briefly); past that only as a refusal.
            let dim = usize::from(c.byte() % 3);
            if dim > 0 || edge == 0 || edge > 65535 {
                config.grid[dim] = edge;
            }
        }
        2 => {
            config.shared_mem_bytes =
                [48 << 10, 163 << 10, (163 << 10) + 1, u32::MAX][usize::from(c.byte() % 4)]
        }
        _ => {}
    }
    config
}

/// The lease the inputs launch under, kept across inputs.
struct Tenant {
    gpu: LocalGpu,
    session: SessionId,
    iota: ModuleId,
    mixed: ModuleId,
    buffers: [BufferId; 2],
    /// Each buffer's device address, as first seen through a relocation (it never moves).
    bases: [Option<u64>; 2],
}

/// Where the worker binary is: `TASKLET_FUZZ_WORKER`, else the workspace's release build, else
/// its debug build.
fn worker() -> PathBuf {
    if let Some(path) = std::env::var_os("TASKLET_FUZZ_WORKER") {
        return PathBuf::from(path);
    }
    let target = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../target"));
    let release = target.join("release/tasklet-worker");
    if release.exists() {
        release
    } else {
        target.join("debug/tasklet-worker")
    }
}

fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| {
        let mut policy = Policy::default();
        policy.workers.warm = 1;
        policy.workers.max = 2;
        policy.workers.kernel_deadline = Duration::from_secs(2);
        policy.workers.emu_memory = 64 << 20;
        let worker = worker();
        Host::new(HostConfig {
            policy,
            worker: WorkerCommand {
                program: worker.clone(),
                args: Vec::new(),
            },
            backend: BackendKind::Emu,
        })
        .unwrap_or_else(|e| {
            panic!(
                "no host on the emulator with worker {} (build it: cargo build --release -p tasklet-worker, \
                 or set TASKLET_FUZZ_WORKER): {e}",
                worker.display()
            )
        })
    })
}

fn tenant() -> Result<Tenant, GpuError> {
    let host = host();
    let mut gpu = LocalGpu::new(
        host.policy().ceiling(),
        std::sync::Arc::clone(host.leases()),
    );
    let lease = gpu.lease_acquire(LeaseRequest {
        min_vram: 1 << 20,
        secs: 3600,
        device: None,
    })?;
    let session = gpu.session_open(lease)?;
    let iota = gpu.module_load(session, IOTA_PTX)?;
    let mixed = gpu.module_load(session, MIXED_PTX)?;
    let buffers = [
        gpu.mem_alloc(session, BUFFERS[0])?,
        gpu.mem_alloc(session, BUFFERS[1])?,
    ];
    Ok(Tenant {
        gpu,
        session,
        iota,
        mixed,
        buffers,
        bases: [None; 2],
    })
}

/// Errors after which the lease is of no more use.
fn ends_lease(e: &GpuError) -> bool {
    matches!(
        e,
        GpuError::KernelFault(_)
            | GpuError::DeviceLost(_)
            | GpuError::DeadlineExceeded(_)
            | GpuError::LeaseExpired(_)
    )
}

#[track_caller]
fn check_message(e: &GpuError) {
    let m = e.to_string();
    assert!(
        m.len() <= MAX_MESSAGE,
        "a {}-byte error message: {}…",
        m.len(),
        &m[..m.floor_char_boundary(300)]
    );
}

/// Runs one input: the body of the `args` target. Says whether the host accepted the launch and
/// its sync succeeded (for the tests: an input meant to be accepted is seen checked).
pub fn run(data: &[u8]) -> bool {
    static TENANT: Mutex<Option<Tenant>> = Mutex::new(None);
    let mut slot = TENANT.lock().unwrap_or_else(|p| p.into_inner());
    if slot.is_none() {
        *slot = Some(tenant().unwrap_or_else(|e| panic!("no lease for the harness: {e}")));
    }
    let Some(t) = slot.as_mut() else {
        return false;
    };
    let mut c = Choices { data, at: 0 };
    let pick = c.byte();
    let (module, name) = match pick % 8 {
        0 | 1 => (t.iota, KERNELS[0].to_owned()),
        5 => {
            // Any name, up to 2 KiB of it: an unknown kernel's error quotes it bounded.
            let len = usize::from(c.byte()) * 8;
            (t.mixed, String::from_utf8_lossy(&c.bytes(len)).into_owned())
        }
        k => (t.mixed, KERNELS[usize::from(k - 1) % 4].to_owned()),
    };
    let count = match c.byte() % 4 {
        0 => usize::from(c.byte() % 12),
        // The kernel's own count, most of the time.
        _ => match name.as_str() {
            "iota" => 2,
            "mixed" => 9,
            "big" => 1,
            _ => 0,
        },
    };
    let args: Vec<Arg> = (0..count).map(|_| Arg::read(&mut c)).collect();
    let config = shape(&mut c);
    // Each relocated argument's relocations, with the session's buffers' ids.
    let relocations: Vec<Vec<Relocation>> = args
        .iter()
        .map(|a| match a {
            Arg::Relocated(_, relocs) => relocs
                .iter()
                .map(|r| Relocation {
                    at: r.at,
                    buffer: r.buffer.map_or(BufferId(r.forged), |i| t.buffers[i]),
                    offset: r.offset,
                })
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    let lifted: Vec<KernelArg<'_>> = args
        .iter()
        .zip(&relocations)
        .map(|(a, relocations)| match a {
            Arg::Buffer(Some(i), _, offset) => KernelArg::Buffer {
                buffer: t.buffers[*i],
                offset: *offset,
            },
            Arg::Buffer(None, id, offset) => KernelArg::Buffer {
                buffer: BufferId(*id),
                offset: *offset,
            },
            Arg::I32(v) => KernelArg::I32(*v),
            Arg::U32(v) => KernelArg::U32(*v),
            Arg::I64(v) => KernelArg::I64(*v),
            Arg::U64(v) => KernelArg::U64(*v),
            Arg::F32(v) => KernelArg::F32(*v),
            Arg::F64(v) => KernelArg::F64(*v),
            Arg::Bytes(v) => KernelArg::Bytes(v),
            Arg::Relocated(bytes, _) => KernelArg::Relocated { bytes, relocations },
        })
        .collect();
    let launched = t.gpu.launch(t.session, module, &name, &config, &lifted);
    let outcome = launched.and_then(|()| t.gpu.sync(t.session));
    match outcome {
        Err(e) => {
            check_message(&e);
            if ends_lease(&e) {
                *slot = None;
            }
            false
        }
        Ok(()) => {
            let params = match name.as_str() {
                "iota" => 2,
                "mixed" => 9,
                "none" => 0,
                "big" => 1,
                other => panic!("a launch of kernel {other:?}, which no module has, was accepted"),
            };
            assert_eq!(
                args.len(),
                params,
                "a launch of `{name}` with {} arguments was accepted",
                args.len()
            );
            for (k, arg) in args.iter().enumerate() {
                assert!(
                    arg.relocations_valid(),
                    "a launch of `{name}` was accepted with argument {k} relocated where it may not be: {arg:?}"
                );
            }
            // iota's index is x alone (blockIdx.x * blockDim.x + threadIdx.x): the y and z
            // dimensions repeat the same indices.
            let threads = u64::from(config.grid[0]) * u64::from(config.block[0]);
            if let Err(e) = check_written(t, &name, &args, threads) {
                check_message(&e);
                if ends_lease(&e) {
                    *slot = None;
                }
            }
            true
        }
    }
}

/// Reads back what `iota` or `mixed` wrote and compares it with its arguments.
fn check_written(t: &mut Tenant, name: &str, args: &[Arg], threads: u64) -> Result<(), GpuError> {
    let (buffer, offset) = match (name, args.first(), args.last()) {
        ("iota", Some(Arg::Buffer(Some(i), _, o)), _)
        | ("mixed", _, Some(Arg::Buffer(Some(i), _, o))) => (*i, *o),
        _ => return Ok(()),
    };
    let size = BUFFERS[buffer];
    if name == "iota" {
        let Some(Arg::U32(n)) = args.get(1) else {
            return Ok(());
        };
        let n = u64::from(*n).min(threads);
        if n == 0 || offset.checked_add(4 * n).is_none_or(|end| end > size) {
            return Ok(());
        }
        let got = t
            .gpu
            .mem_read(t.session, t.buffers[buffer], offset, 4 * n)?;
        for (i, word) in got.chunks_exact(4).enumerate() {
            let v = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
            assert_eq!(
                v as usize,
                i + 1,
                "iota wrote {v} at element {i} from byte {offset} of a {size}-byte buffer"
            );
        }
        return Ok(());
    }
    if offset.checked_add(72).is_none_or(|end| end > size) {
        return Ok(());
    }
    let got = t.gpu.mem_read(t.session, t.buffers[buffer], offset, 72)?;
    const AT: [usize; 8] = [0, 2, 4, 8, 16, 24, 32, 48];
    for (k, (arg, &at)) in args.iter().zip(&AT).enumerate() {
        if let Some(want) = arg.value() {
            assert_eq!(
                &got[at..at + want.len()],
                &want[..],
                "mixed saw argument {k} ({arg:?}) otherwise"
            );
        }
        if let Arg::Relocated(bytes, relocs) = arg {
            check_relocated(&mut t.bases, &got[at..at + bytes.len()], bytes, relocs, k);
        }
    }
    Ok(())
}

/// What `mixed` saw of a relocated argument: its bytes as passed, except where a relocation put
/// the address of its offset into its buffer — the same address for a buffer every time.
fn check_relocated(
    bases: &mut [Option<u64>; 2],
    seen: &[u8],
    bytes: &[u8],
    relocs: &[Reloc],
    k: usize,
) {
    let mut want = bytes.to_vec();
    for r in relocs {
        let (at, Some(i)) = (r.at as usize, r.buffer) else {
            continue;
        };
        let mut word = [0u8; 8];
        word.copy_from_slice(&seen[at..at + 8]);
        let base = u64::from_le_bytes(word).wrapping_sub(r.offset);
        let known = *bases[i].get_or_insert(base);
        assert_eq!(
            known, base,
            "argument {k}: relocation {r:?} gave buffer {i} the address {base:#x}, earlier {known:#x}"
        );
        want[at..at + 8].copy_from_slice(&word);
    }
    assert_eq!(
        seen,
        &want[..],
        "mixed saw relocated argument {k} otherwise than passed: {relocs:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An input that launches `mixed` with every argument of its parameter's size.
    fn mixed_input() -> Vec<u8> {
        let mut d = vec![2u8, 1];
        d.extend([8, 1, 0]); // a: 1 byte
        d.push(0x5a);
        d.extend([8, 1, 1, 0x34, 0x12]); // b: 2 bytes
        d.extend([3, 0xef, 0xbe, 0xad, 0xde]); // c: u32
        d.extend([5, 1, 2, 3, 4, 5, 6, 7, 8]); // d: u64
        d.extend([6, 0, 0, 0xc0, 0x7f]); // e: a NaN's bits
        d.extend([7, 1, 0, 0, 0, 0, 0, 0xf0, 0x7f]); // f
        d.extend([8, 1, 2]); // s: 12 bytes
        d.extend(1..=12);
        d.extend([8, 1, 3]); // t: 24 bytes
        d.extend(101..=124);
        d.extend([0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 7, 16]); // out: buffer 1, offset 64
        d.extend([0, 0, 7]); // a small shape
        d
    }

    #[test]
    fn what_the_kernel_sees_is_what_was_passed() {
        if !worker().exists() {
            eprintln!(
                "skipped: no worker binary at {} (cargo build --release -p tasklet-worker)",
                worker().display()
            );
            return;
        }
        // The harness itself asserts the read-back; run it, then look at the bytes too.
        let input = mixed_input();
        assert!(run(&input), "the mixed launch was refused");
        let mut slot = Some(tenant().expect("lease"));
        let t = slot.as_mut().unwrap();
        let mut c = Choices {
            data: &input,
            at: 2,
        };
        let args: Vec<Arg> = (0..9).map(|_| Arg::read(&mut c)).collect();
        assert!(
            matches!(args[8], Arg::Buffer(Some(1), _, 64)),
            "{:?}",
            args[8]
        );
        assert!(
            matches!(&args[6], Arg::Bytes(b) if b.len() == 12),
            "{:?}",
            args[6]
        );
        let lifted: Vec<KernelArg<'_>> = args
            .iter()
            .map(|a| match a {
                Arg::Buffer(Some(i), _, o) => KernelArg::Buffer {
                    buffer: t.buffers[*i],
                    offset: *o,
                },
                other => match other {
                    Arg::U32(v) => KernelArg::U32(*v),
                    Arg::U64(v) => KernelArg::U64(*v),
                    Arg::F32(v) => KernelArg::F32(*v),
                    Arg::F64(v) => KernelArg::F64(*v),
                    Arg::Bytes(v) => KernelArg::Bytes(v),
                    _ => unreachable!("{other:?}"),
                },
            })
            .collect();
        let config = LaunchConfig {
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_mem_bytes: 0,
        };
        t.gpu
            .launch(t.session, t.mixed, "mixed", &config, &lifted)
            .expect("launch");
        t.gpu.sync(t.session).expect("sync");
        let got = t
            .gpu
            .mem_read(t.session, t.buffers[1], 64, 72)
            .expect("read");
        assert_eq!(got[0], 0x5a);
        assert_eq!(&got[2..4], &[0x34, 0x12]);
        assert_eq!(&got[4..8], &0xdead_beefu32.to_le_bytes());
        assert_eq!(&got[16..20], &[0, 0, 0xc0, 0x7f]);
        assert_eq!(&got[32..44], &(1..=12).collect::<Vec<u8>>()[..]);
        assert_eq!(&got[48..72], &(101..=124).collect::<Vec<u8>>()[..]);
    }

    #[test]
    fn relocated_arguments_reach_the_kernel_with_their_buffers_addresses() {
        if !worker().exists() {
            eprintln!("skipped: no worker binary at {}", worker().display());
            return;
        }
        // `mixed` as in `mixed_input`, its 24-byte `t` relocated: buffer 1 at offset 16 into
        // bytes 0..8, buffer 0 at offset 40 into bytes 16..24. The harness checks what the
        // kernel saw (the bytes between as passed, each address that of its buffer's offset);
        // then the same with buffer 1 at offset 20: its address moves by 4 and no more.
        for offset in [4u8, 5] {
            let mut d = mixed_input();
            let t = d.iter().position(|&b| b == 101).unwrap() - 3;
            let mut relocated = vec![9, 1, 0];
            relocated.extend(101..=124);
            relocated.push(2);
            relocated.extend([1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 3, offset]);
            relocated.extend([1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 10]);
            d.splice(t..t + 3 + 24, relocated);
            assert!(run(&d), "the relocated launch was refused");
        }
        // A relocation off an 8-byte place is refused, and the harness goes on.
        let mut d = mixed_input();
        let t = d.iter().position(|&b| b == 101).unwrap() - 3;
        let mut relocated = vec![9, 1, 0];
        relocated.extend(101..=124);
        relocated.push(1);
        relocated.extend([0, 4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 1]);
        d.splice(t..t + 3 + 24, relocated);
        assert!(!run(&d), "a relocation at byte 4 was accepted");
    }

    /// Inputs the fuzzer found that once failed the harness, replayed.
    #[test]
    fn found_inputs_pass() {
        if !worker().exists() {
            eprintln!("skipped: no worker binary at {}", worker().display());
            return;
        }
        // iota on grid (1, 1, 1025), block (26, 1, 1), n = 255, at byte 1020 of the 4 KiB buffer:
        // 26 elements written, since iota's index is x alone (the harness once expected
        // grid × block of them). (Argument kinds are read modulo 10 since relocated arguments
        // came: the second argument's kind byte, once 0xff, is 0xf3 to stay a u32.)
        run(&[
            0x39, 0x2b, 0x0a, 0x99, 0x98, 0x99, 0xa0, 0x70, 0xff, 0xff, 0xff, 0xff, 0x07, 0xff,
            0xf3, 0xff, 0x00, 0x00, 0x00, 0x7a, 0x99, 0x99, 0x2b, 0x0e, 0xb4, 0xb4, 0x39, 0xff,
            0xfd, 0xfb,
        ]);
    }

    #[test]
    fn arbitrary_inputs_do_not_panic() {
        if !worker().exists() {
            eprintln!("skipped: no worker binary at {}", worker().display());
            return;
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..300 {
            let input: Vec<u8> = (0..96)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            run(&input);
        }
    }
}
