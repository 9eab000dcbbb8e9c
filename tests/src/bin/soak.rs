//! The soak: many cycles of what tenants do to a host (acquire, alloc, write, launch, fault,
//! expire, drop, abandon mid-kernel, a worker killed under them), from concurrent threads against
//! a real [`Host`] with real worker processes, checking after every batch that nothing leaked.
//!
//! ```text
//! soak [--cycles N] [--tenants T] [--cycles-per-check K] [--seed S] [--backend emu|cuda] [--worker PATH]
//! ```
//!
//! A cycle is one tenant's life: a fresh [`LocalGpu`] (what a tasklet's run or a node's client
//! connection gets), a lease, a session, a few random operations whose outcomes are checked (data
//! read back is what was written or computed; refusals are the typed errors they must be), and
//! one of the ways a tenant ends: dropping everything in order, dropping the service with work
//! still held (a trap, a killed client), or with a kernel still running. `T` tenants run `K`
//! cycles each (default 1), all at once (a batch); then, with nothing leased, the host is checked:
//! - its accounting is back to zero exactly (no lease, no granted or used byte, no mismatch
//!   between a lease's accounting and its worker's);
//! - no worker serves a lease; within 5 s (killed workers end, and are reaped, while their
//!   replacements start) there are at most the pool's size of child processes and no zombie;
//! - open file descriptors and resident memory stay under the bound set by the first batches;
//! - on cuda, every 400 cycles, the device memory NVML reports is back to its baseline once the
//!   pool is back to its warm size.
//!
//! Worker kills hit whichever lease's worker is running at that moment (any tenant's), so every
//! operation may also fail with `device-lost` or `lease-expired`; such a cycle ends there. The
//! remote path (a node serving clients over QUIC) is not driven here: a node's client gets the
//! same `LocalGpu` a cycle gets.
//!
//! Prints the seed, the operations and outcomes counted, cycles/s, and `soak: PASS` or
//! `soak: FAIL` with the first failures; exits 1 on failure, 2 on bad usage.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tasklet_runtime::config::DeviceSelector;
use tasklet_runtime::gpu::{
    BufferId, GpuService, KernelArg, LaunchConfig, LeaseId, LeaseRequest, LocalGpu, ModuleId,
    SessionId,
};
use tasklet_runtime::{Accounting, BackendKind, GpuError, Host, HostConfig, Policy, WorkerCommand};

const IOTA_PTX: &str = include_str!("../../../kernels/iota.ptx");
const FAULTS_PTX: &str = include_str!("../../../kernels/faults.ptx");

/// Most device memory one cycle's lease asks for; the policy's per-tenant cap is this too.
const LEASE_MAX: u64 = 1 << 20;
/// Failures printed (the count is always printed).
const SHOWN_FAILURES: usize = 10;
/// Open descriptors and resident bytes the process may gain past the most it had in the first
/// batches (the pool's idle workers come and go, each with a few descriptors).
const FD_SLACK: usize = 32;
const RSS_SLACK: u64 = 64 << 20;
/// Batches whose peaks set the descriptor and memory bounds.
const WARMUP_BATCHES: u64 = 10;
/// How much device memory (beyond the baseline) NVML may still report once the pool is back to
/// its warm size: contexts of CUDA workers differ by a few MiB.
const NVML_SLACK: u64 = 64 << 20;
/// The unit leases count allocations in (an allocation is charged its size rounded up to it).
const ALLOC_UNIT: u64 = 512;

/// What an allocation of `bytes` costs its lease.
fn charged(bytes: u64) -> u64 {
    bytes.div_ceil(ALLOC_UNIT) * ALLOC_UNIT
}

/// How long device memory may take to come back to its baseline once the pool has settled.
const NVML_WAIT: Duration = Duration::from_secs(15);

/// How long an abandoned service may take to drop, however busy its worker.
const DROP_BOUND: Duration = Duration::from_secs(1);

struct Options {
    cycles: u64,
    tenants: usize,
    /// Cycles each tenant runs between two checks.
    per_tenant: u64,
    seed: u64,
    backend: BackendKind,
    worker: PathBuf,
    /// Leave NVML's device memory out of the checks: other processes use the GPU meanwhile (the
    /// GPU suite's other tests), so its total says nothing about this soak's workers.
    no_nvml: bool,
}

fn usage(why: &str) -> ! {
    eprintln!(
        "soak: {why}\nusage: soak [--cycles N] [--tenants T] [--cycles-per-check K] [--seed S] [--backend emu|cuda] [--worker PATH] [--no-nvml]"
    );
    std::process::exit(2)
}

fn options() -> Options {
    let mut o = Options {
        cycles: 2000,
        tenants: 4,
        per_tenant: 1,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        backend: BackendKind::Emu,
        worker: default_worker(),
        no_nvml: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        let number = |v: String| -> u64 {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("not a number: {v}")))
        };
        match flag.as_str() {
            "--cycles" => o.cycles = number(value()),
            "--tenants" => o.tenants = number(value()).clamp(1, 64) as usize,
            "--seed" => o.seed = number(value()),
            "--cycles-per-check" => o.per_tenant = number(value()).max(1),
            "--backend" => {
                o.backend = match value().as_str() {
                    "emu" => BackendKind::Emu,
                    "cuda" => BackendKind::Cuda,
                    other => usage(&format!("unknown backend {other}")),
                }
            }
            "--worker" => o.worker = PathBuf::from(value()),
            "--no-nvml" => o.no_nvml = true,
            "-h" | "--help" => usage("help"),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    o
}

/// `TASKLET_TEST_WORKER`, else the test worker built beside this program.
fn default_worker() -> PathBuf {
    if let Some(w) = std::env::var_os("TASKLET_TEST_WORKER") {
        return PathBuf::from(w);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("tasklet-test-worker")))
        .unwrap_or_else(|| PathBuf::from("tasklet-test-worker"))
}

/// A small deterministic generator (splitmix64): one per cycle, from the seed, the batch and the
/// tenant, so that a seed names the same choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// True with probability `per_mille` / 1000.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// Counts by name ("op" and "op: outcome"), and the failures seen.
#[derive(Default)]
struct Tally {
    counts: Mutex<BTreeMap<String, u64>>,
    failures: Mutex<Vec<String>>,
    failed: AtomicU64,
    /// The longest an abandoned service with a kernel running took to drop (µs).
    longest_drop_us: AtomicU64,
}

impl Tally {
    fn count(&self, what: &str) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        *c.entry(what.to_owned()).or_default() += 1;
    }
    fn fail(&self, what: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if f.len() < SHOWN_FAILURES {
            f.push(what);
        }
    }
}

/// How a cycle ended early: its lease is gone (killed worker, fault, expiry) or a check failed.
struct Ended;

/// One tenant's cycle.
struct Cycle<'a> {
    gpu: LocalGpu,
    rng: Rng,
    tally: &'a Tally,
    label: String,
    lease: Option<LeaseId>,
    session: Option<SessionId>,
    iota: Option<ModuleId>,
    buffers: Vec<(BufferId, u64)>,
    granted: u64,
}

impl Cycle<'_> {
    /// Counts `op`'s outcome; an error is acceptable when its name is in `expected`, or when
    /// the lease is gone (`device-lost`, `lease-expired`: a worker was killed under it), which
    /// ends the cycle. Anything else is a failure.
    fn outcome<T>(
        &mut self,
        op: &str,
        r: Result<T, GpuError>,
        expected: &[&str],
    ) -> Result<Option<T>, Ended> {
        match r {
            Ok(v) => {
                self.tally.count(&format!("{op}: ok"));
                Ok(Some(v))
            }
            Err(e) if expected.contains(&e.name()) => {
                self.tally.count(&format!("{op}: {}", e.name()));
                Ok(None)
            }
            Err(e) if matches!(e, GpuError::DeviceLost(_) | GpuError::LeaseExpired(_)) => {
                self.tally
                    .count(&format!("{op}: {} (lease gone)", e.name()));
                Err(Ended)
            }
            Err(e) => {
                let m = e.to_string();
                self.tally.fail(format!(
                    "{}: {op} failed unexpectedly: {}",
                    self.label,
                    &m[..m.floor_char_boundary(400)]
                ));
                Err(Ended)
            }
        }
    }

    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) -> Result<(), Ended> {
        if ok {
            return Ok(());
        }
        self.tally.fail(format!("{}: {}", self.label, what()));
        Err(Ended)
    }

    fn session(&self) -> SessionId {
        self.session.expect("opened first")
    }

    fn open(&mut self) -> Result<(), Ended> {
        let tally = self.tally;
        if self.rng.chance(30) {
            tally.count("acquire-over-quota");
            let r = self.gpu.lease_acquire(LeaseRequest {
                min_vram: 1 << 40,
                secs: 30,
                device: None,
            });
            match r {
                Ok(_) => {
                    return self.check(false, || "a 1 TiB lease was granted".to_owned());
                }
                Err(e) => {
                    self.outcome::<()>(
                        "acquire-over-quota",
                        Err(e),
                        &["quota-exceeded", "capacity-exceeded"],
                    )?;
                }
            }
        }
        let expiring = self.rng.chance(10);
        let bytes = (1 + self.rng.below(LEASE_MAX >> 12)) << 12;
        tally.count(if expiring {
            "acquire (expiring)"
        } else {
            "acquire"
        });
        let r = self.gpu.lease_acquire(LeaseRequest {
            min_vram: bytes,
            secs: if expiring { 1 } else { 60 },
            device: None,
        });
        // A pool whose every worker is leased refuses with capacity-exceeded: fine, the cycle
        // has nothing to do then.
        let Some(lease) = self.outcome("acquire", r, &["capacity-exceeded"])? else {
            return Err(Ended);
        };
        self.lease = Some(lease);
        self.granted = bytes;
        let r = self.gpu.session_open(lease);
        self.session = self.outcome("session", r, &[])?;
        if expiring {
            std::thread::sleep(Duration::from_millis(1100));
            tally.count("expire");
            let r = self.gpu.mem_alloc(self.session(), 4096);
            self.outcome("alloc after expiry", r, &["lease-expired"])?;
            return Err(Ended);
        }
        let r = self.gpu.module_load(self.session(), IOTA_PTX);
        self.iota = self.outcome("load", r, &[])?;
        Ok(())
    }

    fn alloc(&mut self) -> Result<(), Ended> {
        let used: u64 = self.buffers.iter().map(|b| charged(b.1)).sum();
        if self.rng.chance(100) {
            self.tally.count("alloc-over-quota");
            let r = self
                .gpu
                .mem_alloc(self.session(), self.granted.saturating_sub(used) + 4096);
            if let Some(_b) = self.outcome("alloc-over-quota", r, &["quota-exceeded"])? {
                return self.check(false, || {
                    "an allocation past the lease's grant succeeded".into()
                });
            }
            return Ok(());
        }
        let free = self.granted.saturating_sub(used);
        if free < ALLOC_UNIT {
            return Ok(());
        }
        let bytes = 4 * (1 + self.rng.below((free / 4).min(16384)));
        let bytes = bytes.min(free / ALLOC_UNIT * ALLOC_UNIT);
        self.tally.count("alloc");
        let r = self.gpu.mem_alloc(self.session(), bytes);
        if let Some(b) = self.outcome("alloc", r, &[])? {
            self.buffers.push((b, bytes));
        }
        Ok(())
    }

    fn pick_buffer(&mut self) -> Option<(BufferId, u64)> {
        let n = self.buffers.len() as u64;
        (n > 0).then(|| self.buffers[self.rng.below(n) as usize])
    }

    /// Writes a pattern and reads it back; sometimes writes past the end (refused).
    fn write(&mut self) -> Result<(), Ended> {
        let Some((b, size)) = self.pick_buffer() else {
            return Ok(());
        };
        if self.rng.chance(150) {
            self.tally.count("write-out-of-bounds");
            let r = self.gpu.mem_write(self.session(), b, size - 1, &[1, 2]);
            return self
                .outcome("write-out-of-bounds", r, &["out-of-bounds"])
                .and_then(|ok| {
                    self.check(ok.is_none(), || "a write past the end succeeded".into())
                });
        }
        let offset = self.rng.below(size);
        let len = 1 + self.rng.below((size - offset).min(8192));
        let tag = self.rng.next() as u8;
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ tag).collect();
        self.tally.count("write");
        let r = self.gpu.mem_write(self.session(), b, offset, &data);
        if self.outcome("write", r, &[])?.is_none() {
            return Ok(());
        }
        let r = self.gpu.mem_read(self.session(), b, offset, len);
        if let Some(back) = self.outcome("read", r, &[])? {
            self.check(back == data, || {
                format!("read back {len} bytes at {offset} of a {size}-byte buffer differ from those written")
            })?;
        }
        Ok(())
    }

    /// `iota` over a buffer, its sync, and the values read back.
    fn launch(&mut self) -> Result<(), Ended> {
        let Some((b, size)) = self.pick_buffer() else {
            return Ok(());
        };
        let n = (size / 4).min(4096) as u32;
        let block = 128;
        let config = LaunchConfig {
            grid: [n.div_ceil(block), 1, 1],
            block: [block, 1, 1],
            shared_mem_bytes: 0,
        };
        let module = self.iota.expect("loaded at open");
        if self.rng.chance(150) {
            // One argument short, or a count of the wrong size: refused before it runs.
            self.tally.count("launch-bad-args");
            let short = [KernelArg::Buffer {
                buffer: b,
                offset: 0,
            }];
            let wrong_size = [
                KernelArg::Buffer {
                    buffer: b,
                    offset: 0,
                },
                KernelArg::Bytes(&[1, 2, 3]),
            ];
            let args: &[KernelArg<'_>] = if self.rng.chance(500) {
                &short
            } else {
                &wrong_size
            };
            let r = self
                .gpu
                .launch(self.session(), module, "iota", &config, args);
            let refused = self.outcome("launch-bad-args", r, &["invalid-argument"])?;
            return self.check(refused.is_none(), || {
                "a launch with wrong arguments was accepted".into()
            });
        }
        self.tally.count("launch");
        let args = [
            KernelArg::Buffer {
                buffer: b,
                offset: 0,
            },
            KernelArg::U32(n),
        ];
        let r = self
            .gpu
            .launch(self.session(), module, "iota", &config, &args);
        if self.outcome("launch", r, &[])?.is_none() {
            return Ok(());
        }
        let r = self.gpu.sync(self.session());
        self.outcome("sync", r, &[])?;
        let r = self.gpu.mem_read(self.session(), b, 0, u64::from(n) * 4);
        if let Some(back) = self.outcome("read", r, &[])? {
            let right = back
                .chunks_exact(4)
                .enumerate()
                .all(|(i, w)| u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as usize == i + 1);
            self.check(right, || format!("iota over {n} elements read back wrong"))?;
        }
        Ok(())
    }

    /// A kernel that writes far outside its buffer: `kernel-fault` at the sync, and the lease is
    /// done.
    fn fault(&mut self) -> Result<(), Ended> {
        let Some((b, _)) = self.pick_buffer() else {
            return Ok(());
        };
        self.tally.count("fault");
        let r = self.gpu.module_load(self.session(), FAULTS_PTX);
        let Some(m) = self.outcome("load faults", r, &[])? else {
            return Ok(());
        };
        let config = LaunchConfig {
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_mem_bytes: 0,
        };
        let args = [
            KernelArg::Buffer {
                buffer: b,
                offset: 0,
            },
            KernelArg::U64(1 << 40),
        ];
        let r = self
            .gpu
            .launch(self.session(), m, "write_out_of_bounds", &config, &args)
            .and_then(|()| self.gpu.sync(self.session()));
        let faulted = self.outcome("fault", r, &["kernel-fault"])?;
        self.check(faulted.is_none(), || {
            "a write 4 TiB past a buffer did not fault".into()
        })?;
        Err(Ended)
    }

    /// A kernel that spins until its deadline, then the service dropped at once: the drop
    /// must not wait for the kernel.
    fn abandon_busy(mut self) {
        let tally = self.tally;
        let label = self.label.clone();
        let Some((b, _)) = self.pick_buffer() else {
            return;
        };
        tally.count("abandon-busy");
        let session = self.session();
        if let Ok(m) = self.gpu.module_load(session, FAULTS_PTX) {
            let config = LaunchConfig {
                grid: [1, 1, 1],
                block: [1, 1, 1],
                shared_mem_bytes: 0,
            };
            let args = [KernelArg::Buffer {
                buffer: b,
                offset: 0,
            }];
            let _ = self.gpu.launch(session, m, "spin_forever", &config, &args);
        }
        let started = Instant::now();
        drop(self);
        let took = started.elapsed();
        tally
            .longest_drop_us
            .fetch_max(took.as_micros() as u64, Ordering::Relaxed);
        if took > DROP_BOUND {
            tally.fail(format!(
                "{label}: dropping a service with a kernel running took {took:?}"
            ));
        }
    }

    fn free(&mut self) -> Result<(), Ended> {
        if self.buffers.is_empty() {
            return Ok(());
        }
        let i = self.rng.below(self.buffers.len() as u64) as usize;
        let (b, _) = self.buffers.swap_remove(i);
        self.tally.count("free");
        self.gpu.mem_free(self.session(), b);
        Ok(())
    }

    /// Ends the cycle one of the ways tenants end.
    fn finish(mut self) {
        match self.rng.below(20) {
            0..=9 => {
                self.tally.count("end: drop in order");
                for (b, _) in std::mem::take(&mut self.buffers) {
                    self.gpu.mem_free(self.session(), b);
                }
                if let Some(m) = self.iota.take() {
                    self.gpu.module_unload(self.session(), m);
                }
                self.gpu.session_drop(self.session());
                if let Some(l) = self.lease.take() {
                    self.gpu.lease_drop(l);
                }
            }
            10..=13 => {
                self.tally.count("end: drop the lease alone");
                if let Some(l) = self.lease.take() {
                    self.gpu.lease_drop(l);
                }
            }
            14..=18 => self.tally.count("end: abandon (service dropped)"),
            _ => self.abandon_busy(),
        }
    }
}

fn run_cycle(
    grant: tasklet_runtime::config::Grant,
    host: &Host,
    mut rng: Rng,
    tally: &Tally,
    label: String,
) {
    let gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
    let mut c = Cycle {
        gpu,
        rng: Rng(rng.next()),
        tally,
        label,
        lease: None,
        session: None,
        iota: None,
        buffers: Vec::new(),
        granted: 0,
    };
    if c.open().is_err() {
        return;
    }
    let ops = 1 + c.rng.below(8);
    for _ in 0..ops {
        // Faults and kills at 2% of operations each (about one cycle in ten has one): each costs
        // a worker, and a CUDA worker's context takes the driver a few hundred ms to make.
        let step = match c.rng.below(100) {
            0..=30 => c.alloc(),
            31..=57 => c.write(),
            58..=83 => c.launch(),
            84..=95 => c.free(),
            96..=97 => c.fault(),
            _ => {
                kill_a_worker(host, &mut c.rng, tally);
                Ok(())
            }
        };
        if step.is_err() {
            return;
        }
    }
    c.finish();
}

/// SIGKILLs the worker of a live lease, whichever tenant's.
fn kill_a_worker(host: &Host, rng: &mut Rng, tally: &Tally) {
    let pids = host.lease_worker_pids();
    if pids.is_empty() {
        return;
    }
    let pid = pids[rng.below(pids.len() as u64) as usize];
    tally.count("worker-kill");
    // SAFETY: kill(2) with a pid this process started (a worker of its own pool).
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
}

/// A child process of this one, and its state as /proc shows it (`R`, `S`, `D`, `Z`, …).
struct Child {
    pid: u32,
    state: char,
}

/// This process's children.
fn children() -> Vec<Child> {
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid …": the name may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid: u32 = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if ppid == me {
            found.push(Child { pid, state });
        }
    }
    found
}

/// Where the host's pools hold each child (`ending`, `to reap`, `idle`, `leased`, `starting`, or
/// `nowhere`: a process no pool waits for) and its state, for a failure's message: "812 ending
/// (Z)".
fn held_where(host: &Host, children: &[Child]) -> String {
    let census: Vec<_> = host.pools().iter().map(|p| p.census()).collect();
    let place = |pid: &u32| {
        let lists = |c: &tasklet_worker::host::Census| {
            [
                ("ending", &c.ending),
                ("to reap", &c.to_reap),
                ("idle", &c.idle),
                ("leased", &c.leased),
                ("starting", &c.starting),
            ]
            .into_iter()
            .find(|(_, l)| l.contains(pid))
            .map(|(name, _)| name)
        };
        census.iter().find_map(lists).unwrap_or("nowhere")
    };
    let places: Vec<String> = children
        .iter()
        .map(|c| format!("{} {} ({})", c.pid, place(&c.pid), c.state))
        .collect();
    places.join(", ")
}

/// This process's open descriptors by what they are (`socket`, `memfd`, a device, …).
fn fd_kinds() -> String {
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        for entry in dir.flatten() {
            let target = std::fs::read_link(entry.path())
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "?".into());
            // "socket:[123]" → "socket", "/memfd:x (deleted)" → "/memfd:x", paths as they are.
            let kind = target.split([':', ' ']).next().unwrap_or("?").to_owned();
            *kinds.entry(kind).or_default() += 1;
        }
    }
    kinds
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

/// Waits up to `limit` for `f`.
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The peaks the first batches set, and the last values seen.
#[derive(Default)]
struct Bounds {
    fds: usize,
    rss: u64,
    last_fds: usize,
    last_rss: u64,
    max_children: usize,
    longest_settle: Duration,
}

/// Checks the host with nothing leased: accounting, workers, descriptors, memory.
fn check_batch(host: &Host, batch: u64, bounds: &mut Bounds, tally: &Tally, max_workers: usize) {
    let started = Instant::now();
    let mut now = Accounting::default();
    if !eventually(Duration::from_secs(5), || {
        now = host.accounting();
        now == Accounting::default()
    }) {
        tally.fail(format!(
            "batch {batch}: accounting not back at zero: {now:?}"
        ));
    }
    bounds.longest_settle = bounds.longest_settle.max(started.elapsed());
    let serving = host.lease_worker_pids();
    if !serving.is_empty() {
        tally.fail(format!(
            "batch {batch}: workers still serve leases: {serving:?}"
        ));
    }
    // A killed worker lives on while its process ends (on a GPU, tearing its context down takes
    // a while, longer on a loaded machine), meanwhile its replacement may start, and it is a
    // zombie until the pool reaps it: give all that time.
    let mut seen = children();
    let settled = eventually(Duration::from_secs(5), || {
        seen = children();
        seen.len() <= max_workers && seen.iter().all(|c| c.state != 'Z')
    });
    bounds.max_children = bounds.max_children.max(seen.len());
    if !settled {
        let zombies = seen.iter().filter(|c| c.state == 'Z').count();
        tally.fail(format!(
            "batch {batch}: {} child processes ({zombies} zombies) 5 s after the batch, for a pool of at most {max_workers}: {}",
            seen.len(),
            held_where(host, &seen)
        ));
    }
    let (fds, rss) = (open_fds(), rss_bytes());
    bounds.last_fds = fds;
    bounds.last_rss = rss;
    if batch < WARMUP_BATCHES {
        bounds.fds = bounds.fds.max(fds);
        bounds.rss = bounds.rss.max(rss);
    } else {
        if fds > bounds.fds + FD_SLACK {
            tally.fail(format!(
                "batch {batch}: {fds} open descriptors, past the first batches' peak {} + {FD_SLACK}",
                bounds.fds
            ));
        }
        if rss > bounds.rss + RSS_SLACK {
            tally.fail(format!(
                "batch {batch}: resident memory {} MiB, past the first batches' peak {} MiB + {} MiB",
                rss >> 20,
                bounds.rss >> 20,
                RSS_SLACK >> 20
            ));
        }
    }
}

/// Device memory in use on the device `uuid` (a GPU or a MIG instance), as NVML reports it,
/// read by a worker in its inventory mode as a host reads it: NVML loaded in this process would
/// add descriptors of its own to the ones the soak counts.
fn device_memory_used(worker: &WorkerCommand, uuid: &str) -> Result<u64, String> {
    use tasklet_worker::nvml::{inventory_via_worker, same_uuid};
    let inventory = inventory_via_worker(worker, Duration::from_secs(30))?;
    if let Some(gpu) = inventory.gpus.iter().find(|g| same_uuid(&g.uuid, uuid)) {
        return Ok(gpu.memory_used);
    }
    inventory
        .gpus
        .iter()
        .flat_map(|g| &g.mig_instances)
        .find(|m| same_uuid(&m.uuid, uuid))
        .map(|m| m.memory_total.saturating_sub(m.memory_free))
        .ok_or_else(|| format!("NVML lists no GPU or MIG instance {uuid}"))
}

/// The pool back at its warm size with nothing leased, then the device memory NVML reports,
/// waited for until it is within [`NVML_SLACK`] of `base` (a killed worker's context is freed by
/// the driver a little after the process is gone): the first reading, the last, and how long it
/// took to come back (`None`: it did not within [`NVML_WAIT`]).
fn settled_device_memory(
    host: &Host,
    worker: &WorkerCommand,
    uuid: &str,
    base: u64,
) -> Result<(u64, u64, Option<Duration>), String> {
    let pool = host.pool();
    let (warm, _) = pool.limits();
    if !eventually(Duration::from_secs(20), || {
        pool.busy() == 0 && pool.idle() == warm
    }) {
        return Err(format!(
            "the pool did not settle at {warm} idle workers: {} idle, {} busy",
            pool.idle(),
            pool.busy()
        ));
    }
    let read = || device_memory_used(worker, uuid);
    let first = read()?;
    let started = Instant::now();
    let mut last = first;
    let mut error = None;
    let back = eventually(NVML_WAIT, || match read() {
        Ok(m) => {
            last = m;
            m <= base.saturating_add(NVML_SLACK)
        }
        Err(e) => {
            error = Some(e);
            true
        }
    });
    if let Some(e) = error {
        return Err(e);
    }
    Ok((first, last, back.then(|| started.elapsed())))
}

fn main() {
    let o = options();
    println!(
        "soak: seed {} ({} cycles, {} tenants, backend {}, worker {})",
        o.seed,
        o.cycles,
        o.tenants,
        o.backend.as_str(),
        o.worker.display()
    );
    let mut policy = Policy::default();
    // A spare worker per tenant: a cycle whose worker was killed or faulted gets the next one
    // at once (a CUDA worker takes a few hundred ms to make its context).
    policy.workers.warm = o.tenants;
    policy.workers.max = 2 * o.tenants;
    policy.workers.kernel_deadline = Duration::from_secs(2);
    policy.workers.op_timeout = Duration::from_secs(10);
    policy.workers.emu_memory = 256 << 20;
    policy.gpu.max_vram = LEASE_MAX;
    policy.gpu.max_leases = 2;
    // One device: the pool, the books and the NVML reading the checks compare are its own (on a
    // machine with several GPUs the host would otherwise lend them all).
    if o.backend == BackendKind::Cuda && policy.devices.cuda.is_none() {
        policy.devices.cuda = Some(vec![DeviceSelector::Index(0)]);
    }
    let max_workers = policy.workers.max;
    let worker = WorkerCommand {
        program: o.worker.clone(),
        args: Vec::new(),
    };
    let host = match Host::new(HostConfig {
        policy,
        worker: worker.clone(),
        backend: o.backend,
    }) {
        Ok(h) => h,
        Err(e) => {
            println!(
                "soak: FAIL: the host does not start on {}: {e}",
                o.backend.as_str()
            );
            std::process::exit(1);
        }
    };
    let grant = host.policy().ceiling();
    let uuid = host.device().uuid.clone();
    let nvml_base = match o.backend {
        BackendKind::Cuda if o.no_nvml => {
            println!(
                "soak: skipped: the NVML device-memory checks (--no-nvml: other processes use the GPU meanwhile)"
            );
            None
        }
        // Once the warm workers have made their contexts.
        BackendKind::Cuda => {
            match settled_device_memory(&host, &worker, &uuid, u64::MAX).and_then(|_| {
                std::thread::sleep(Duration::from_secs(1));
                settled_device_memory(&host, &worker, &uuid, u64::MAX)
            }) {
                Ok(m) => Some(m.0),
                Err(e) => {
                    println!("soak: FAIL: NVML: {e}");
                    std::process::exit(1);
                }
            }
        }
        BackendKind::Emu => None,
    };
    let tally = Tally::default();
    let mut bounds = Bounds::default();
    let started = Instant::now();
    let per_batch = o.tenants as u64 * o.per_tenant;
    let batches = o.cycles.div_ceil(per_batch);
    let mut cycles = 0u64;
    let mut nvml_worst = 0i64;
    let mut nvml_longest = Duration::ZERO;
    let mut next_nvml = 0u64;
    let mut next_report = 400u64;
    for batch in 0..batches {
        let first = cycles;
        let end = (first + per_batch).min(o.cycles);
        std::thread::scope(|s| {
            for t in 0..o.tenants as u64 {
                let (host, tally) = (&host, &tally);
                s.spawn(move || {
                    // This tenant's cycles of the batch, one after another.
                    for cycle in (first + t..end).step_by(o.tenants) {
                        let rng = Rng(o.seed ^ cycle.wrapping_mul(0x2545_f491_4f6c_dd1d));
                        let label = format!("cycle {cycle} (tenant {t})");
                        run_cycle(grant, host, rng, tally, label);
                    }
                });
            }
        });
        cycles = end;
        check_batch(&host, batch, &mut bounds, &tally, max_workers);
        let last = batch + 1 == batches;
        if let Some(base) = nvml_base {
            if cycles >= next_nvml || last {
                next_nvml = cycles + 400;
                match settled_device_memory(&host, &worker, &uuid, base) {
                    Ok((first, now, back)) => {
                        nvml_worst = nvml_worst.max(first as i64 - base as i64);
                        match back {
                            Some(took) => nvml_longest = nvml_longest.max(took),
                            None => tally.fail(format!(
                                "after cycle {cycles}: NVML reports {} MiB in use {NVML_WAIT:?} after the pool settled, \
                                 baseline {} MiB",
                                now >> 20,
                                base >> 20
                            )),
                        }
                    }
                    Err(e) => tally.fail(format!("after cycle {cycles}: NVML: {e}")),
                }
            }
        }
        if cycles >= next_report || last {
            next_report = cycles + 400;
            println!(
                "soak: {cycles} cycles in {:.1?}: {} fds, {} MiB resident, {} children, {} failures",
                started.elapsed(),
                bounds.last_fds,
                bounds.last_rss >> 20,
                children().len(),
                tally.failed.load(Ordering::Relaxed)
            );
        }
    }
    let took = started.elapsed();
    println!("soak: operations and outcomes:");
    for (what, n) in tally
        .counts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
    {
        println!("  {n:>8}  {what}");
    }
    println!(
        "soak: {cycles} cycles in {:.1} s ({:.1} cycles/s); fds {} (first batches' peak {}), resident {} MiB (peak {} MiB), \
         at most {} children; accounting settled within {:?} at worst",
        took.as_secs_f64(),
        cycles as f64 / took.as_secs_f64(),
        bounds.last_fds,
        bounds.fds,
        bounds.last_rss >> 20,
        bounds.rss >> 20,
        bounds.max_children,
        bounds.longest_settle
    );
    println!(
        "soak: dropping a service with a kernel running took {:?} at most",
        Duration::from_micros(tally.longest_drop_us.load(Ordering::Relaxed))
    );
    if let Some(base) = nvml_base {
        println!(
            "soak: NVML device memory baseline {} MiB; at a check, once the pool settled, at most {} MiB over it, \
             back within {} MiB of it after {:?} at worst",
            base >> 20,
            nvml_worst.max(0) >> 20,
            NVML_SLACK >> 20,
            nvml_longest
        );
    }
    println!("soak: open descriptors now: {}", fd_kinds());
    let failed = tally.failed.load(Ordering::Relaxed);
    if failed == 0 {
        println!("soak: PASS (seed {})", o.seed);
    } else {
        for f in tally
            .failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            println!("soak: failure: {f}");
        }
        println!("soak: FAIL: {failed} failures (seed {})", o.seed);
        std::process::exit(1);
    }
}
