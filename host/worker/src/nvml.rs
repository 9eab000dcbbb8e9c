//! GPU inventory through NVML (the management library, not CUDA: querying it creates no context).
//!
//! [`inventory`] reads it in this process. Hosts should prefer [`inventory_via_worker`], which
//! runs the worker binary in its one-shot `--inventory` mode and parses what it prints, so that a
//! hung or crashing management library can only take a short-lived child with it (and the host
//! process never loads NVIDIA libraries at all). NVML is loaded at run time (`libnvidia-ml.so.1`);
//! on a machine without it every function here returns an error saying so.

use std::fmt::Write as _;
use std::io::Read;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use crate::contract::WorkerCommand;

/// What NVML reports about the node's GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Inventory {
    /// The NVIDIA driver's version (e.g. "580.159").
    pub driver_version: String,
    /// The CUDA version the driver supports, as NVML encodes it (12080 = 12.8); 0 if unknown.
    pub cuda_version: u32,
    pub gpus: Vec<Gpu>,
}

/// One physical GPU.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Gpu {
    pub index: u32,
    pub name: String,
    /// `GPU-…`.
    pub uuid: String,
    pub pci_bus_id: String,
    pub compute_capability: Option<(u32, u32)>,
    pub memory_total: u64,
    pub memory_free: u64,
    pub memory_used: u64,
    pub mig: MigMode,
    /// The MIG instances when MIG is enabled.
    pub mig_instances: Vec<MigInstance>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MigMode {
    /// The GPU has no MIG (or NVML cannot say).
    #[default]
    Unsupported,
    Disabled,
    Enabled,
}

impl MigMode {
    pub fn as_str(self) -> &'static str {
        match self {
            MigMode::Unsupported => "unsupported",
            MigMode::Disabled => "disabled",
            MigMode::Enabled => "enabled",
        }
    }

    fn parse(s: &str) -> Option<MigMode> {
        [MigMode::Unsupported, MigMode::Disabled, MigMode::Enabled]
            .into_iter()
            .find(|m| m.as_str() == s)
    }
}

/// One MIG device (a GPU instance's compute instance), usable as a CUDA device by its UUID.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MigInstance {
    pub index: u32,
    pub name: String,
    /// `MIG-…`: what `CUDA_VISIBLE_DEVICES` takes to give a worker this instance.
    pub uuid: String,
    pub memory_total: u64,
    pub memory_free: u64,
}

fn nvml_error(what: &str, e: NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(e) => {
            format!("NVML not available (libnvidia-ml.so.1 not loadable: {e})")
        }
        NvmlError::DriverNotLoaded => "NVML: the NVIDIA kernel driver is not loaded".into(),
        NvmlError::NoPermission => format!("NVML: no permission to {what}"),
        other => format!("NVML: cannot {what}: {other}"),
    }
}

/// Reads the inventory in this process (see the module docs for why hosts should not).
pub fn inventory() -> Result<Inventory, String> {
    catch_unwind(AssertUnwindSafe(read_inventory)).unwrap_or_else(|_| {
        Err("NVML: the management library failed unexpectedly (panic in its wrapper)".into())
    })
}

fn read_inventory() -> Result<Inventory, String> {
    let nvml = Nvml::init().map_err(|e| nvml_error("initialise", e))?;
    let driver_version = nvml.sys_driver_version().unwrap_or_default();
    let cuda_version = nvml
        .sys_cuda_driver_version()
        .map(|v| v.max(0) as u32)
        .unwrap_or(0);
    let count = nvml
        .device_count()
        .map_err(|e| nvml_error("count the GPUs", e))?;
    let mut gpus = Vec::new();
    for index in 0..count {
        let d = nvml
            .device_by_index(index)
            .map_err(|e| nvml_error(&format!("open GPU {index}"), e))?;
        let mem = d
            .memory_info()
            .map_err(|e| nvml_error(&format!("read GPU {index}'s memory"), e))?;
        let mig = match d.mig_mode() {
            Ok(m) if m.current == 1 => MigMode::Enabled,
            Ok(_) => MigMode::Disabled,
            Err(_) => MigMode::Unsupported,
        };
        let mut mig_instances = Vec::new();
        if mig == MigMode::Enabled {
            let max = d.mig_device_count().unwrap_or(0);
            for i in 0..max {
                // Empty slots are NotFound.
                let Ok(m) = d.mig_device_by_index(i) else {
                    continue;
                };
                let mm = m.memory_info().ok();
                mig_instances.push(MigInstance {
                    index: i,
                    name: m.name().unwrap_or_default(),
                    uuid: m.uuid().unwrap_or_default(),
                    memory_total: mm.as_ref().map_or(0, |x| x.total),
                    memory_free: mm.as_ref().map_or(0, |x| x.free),
                });
            }
        }
        gpus.push(Gpu {
            index,
            name: d.name().unwrap_or_default(),
            uuid: d.uuid().unwrap_or_default(),
            pci_bus_id: d.pci_info().map(|p| p.bus_id).unwrap_or_default(),
            compute_capability: d
                .cuda_compute_capability()
                .ok()
                .map(|c| (c.major.max(0) as u32, c.minor.max(0) as u32)),
            memory_total: mem.total,
            memory_free: mem.free,
            memory_used: mem.used,
            mig,
            mig_instances,
        });
    }
    Ok(Inventory {
        driver_version,
        cuda_version,
        gpus,
    })
}

/// Device memory in use on the GPU or MIG instance with this UUID, or on GPU 0 without one, as
/// NVML reports it: every process's allocations and contexts (for tests and operators).
pub fn memory_used(uuid: Option<&str>) -> Result<u64, String> {
    let inv = inventory()?;
    let Some(u) = uuid else {
        return inv
            .gpus
            .first()
            .map(|g| g.memory_used)
            .ok_or_else(|| "NVML lists no GPU".to_string());
    };
    if let Some(g) = inv.gpus.iter().find(|g| same_uuid(&g.uuid, u)) {
        return Ok(g.memory_used);
    }
    inv.gpus
        .iter()
        .flat_map(|g| &g.mig_instances)
        .find(|m| same_uuid(&m.uuid, u))
        .map(|m| m.memory_total.saturating_sub(m.memory_free))
        .ok_or_else(|| format!("NVML lists no GPU or MIG instance {u}"))
}

/// Whether two device UUIDs name the same device (`GPU-` prefix and case aside).
pub fn same_uuid(a: &str, b: &str) -> bool {
    let strip = |s: &str| {
        s.trim()
            .trim_start_matches("GPU-")
            .trim_start_matches("MIG-")
            .to_ascii_lowercase()
    };
    !a.trim().is_empty() && strip(a) == strip(b)
}

/// Most bytes `--inventory` output may have (far above any real node's).
const MAX_OUTPUT: u64 = 1 << 20;

/// Runs `command … --inventory` (a worker binary in its one-shot inventory mode) and parses what
/// it prints. Errors say why there is no inventory (no NVML, no driver, the child hung…).
pub fn inventory_via_worker(
    command: &WorkerCommand,
    timeout: Duration,
) -> Result<Inventory, String> {
    let mut child = Command::new(&command.program)
        .args(&command.args)
        .arg("--inventory")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot run {} for the GPU inventory: {e}",
                command.program.display()
            )
        })?;
    let mut stdout = child
        .stdout
        .take()
        .ok_or("no stdout from the inventory child")?;
    let mut stderr = child
        .stderr
        .take()
        .ok_or("no stderr from the inventory child")?;
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = (&mut stdout).take(MAX_OUTPUT).read_to_end(&mut out);
        out
    });
    let err_reader = std::thread::spawn(move || {
        let mut err = Vec::new();
        let _ = (&mut stderr).take(MAX_OUTPUT).read_to_end(&mut err);
        err
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the GPU inventory did not answer within {timeout:?} (NVML hung?)"
                ));
            }
            Err(e) => return Err(format!("waiting for the inventory child: {e}")),
        }
    };
    let out = reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    let text = String::from_utf8_lossy(&out);
    if !status.success() {
        let why = String::from_utf8_lossy(&err).trim().to_string();
        return Err(if why.is_empty() {
            format!("the inventory child {status}")
        } else {
            why
        });
    }
    Inventory::parse(&text)
}

fn clean(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

impl Inventory {
    /// The line format `--inventory` prints: tab-separated records, one per line.
    ///
    /// ```text
    /// driver  <version> <cuda version>
    /// gpu     <index> <name> <uuid> <cc major.minor | -> <total> <free> <used> <mig mode> <pci bus id>
    /// mig     <gpu index> <mig index> <name> <uuid> <total> <free>
    /// ```
    pub fn to_lines(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "driver\t{}\t{}",
            clean(&self.driver_version),
            self.cuda_version
        );
        for g in &self.gpus {
            let cc = g
                .compute_capability
                .map_or("-".to_string(), |(a, b)| format!("{a}.{b}"));
            let _ = writeln!(
                s,
                "gpu\t{}\t{}\t{}\t{cc}\t{}\t{}\t{}\t{}\t{}",
                g.index,
                clean(&g.name),
                clean(&g.uuid),
                g.memory_total,
                g.memory_free,
                g.memory_used,
                g.mig.as_str(),
                clean(&g.pci_bus_id)
            );
            for m in &g.mig_instances {
                let _ = writeln!(
                    s,
                    "mig\t{}\t{}\t{}\t{}\t{}\t{}",
                    g.index,
                    m.index,
                    clean(&m.name),
                    clean(&m.uuid),
                    m.memory_total,
                    m.memory_free
                );
            }
        }
        s
    }

    /// Parses [`Inventory::to_lines`]. The text comes from another process: every field is checked.
    pub fn parse(text: &str) -> Result<Inventory, String> {
        let mut inv = Inventory::default();
        let mut saw_driver = false;
        for (n, line) in text.lines().enumerate() {
            let bad = |what: &str| format!("inventory line {}: {what}: {line:?}", n + 1);
            let f: Vec<&str> = line.split('\t').collect();
            let num = |i: usize| -> Result<u64, String> {
                f.get(i)
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| bad(&format!("field {i} is not a number")))
            };
            match f[0] {
                "" => continue,
                "driver" if f.len() == 3 => {
                    inv.driver_version = f[1].to_owned();
                    inv.cuda_version = num(2)? as u32;
                    saw_driver = true;
                }
                "gpu" if f.len() == 10 => {
                    let compute_capability = match f[4] {
                        "-" => None,
                        cc => {
                            let (a, b) = cc
                                .split_once('.')
                                .ok_or_else(|| bad("bad compute capability"))?;
                            Some((
                                a.parse().map_err(|_| bad("bad compute capability"))?,
                                b.parse().map_err(|_| bad("bad compute capability"))?,
                            ))
                        }
                    };
                    inv.gpus.push(Gpu {
                        index: num(1)? as u32,
                        name: f[2].to_owned(),
                        uuid: f[3].to_owned(),
                        compute_capability,
                        memory_total: num(5)?,
                        memory_free: num(6)?,
                        memory_used: num(7)?,
                        mig: MigMode::parse(f[8]).ok_or_else(|| bad("bad MIG mode"))?,
                        pci_bus_id: f[9].to_owned(),
                        mig_instances: Vec::new(),
                    });
                }
                "mig" if f.len() == 7 => {
                    let parent = num(1)? as u32;
                    let m = MigInstance {
                        index: num(2)? as u32,
                        name: f[3].to_owned(),
                        uuid: f[4].to_owned(),
                        memory_total: num(5)?,
                        memory_free: num(6)?,
                    };
                    inv.gpus
                        .iter_mut()
                        .find(|g| g.index == parent)
                        .ok_or_else(|| bad("MIG instance of an unlisted GPU"))?
                        .mig_instances
                        .push(m);
                }
                _ => return Err(bad("unknown record")),
            }
        }
        if !saw_driver {
            return Err("the inventory child printed no driver line".into());
        }
        Ok(inv)
    }
}

/// The worker's `--inventory` mode: prints the inventory, or the reason there is none on stderr.
pub(crate) fn inventory_main() -> i32 {
    match inventory() {
        Ok(inv) => {
            print!("{}", inv.to_lines());
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let inv = Inventory {
            driver_version: "580.159".into(),
            cuda_version: 13000,
            gpus: vec![
                Gpu {
                    index: 0,
                    name: "NVIDIA H200".into(),
                    uuid: "GPU-01234567-89ab-cdef-0123-456789abcdef".into(),
                    pci_bus_id: "00000000:19:00.0".into(),
                    compute_capability: Some((9, 0)),
                    memory_total: 150_754_820_096,
                    memory_free: 150_000_000_000,
                    memory_used: 754_820_096,
                    mig: MigMode::Enabled,
                    mig_instances: vec![MigInstance {
                        index: 0,
                        name: "NVIDIA H200 MIG 1g.18gb".into(),
                        uuid: "MIG-aaaa".into(),
                        memory_total: 18 << 30,
                        memory_free: 17 << 30,
                    }],
                },
                Gpu {
                    index: 1,
                    name: "odd\tname".into(),
                    ..Gpu::default()
                },
            ],
        };
        let back = Inventory::parse(&inv.to_lines()).unwrap();
        assert_eq!(back.gpus[0], inv.gpus[0]);
        assert_eq!(back.gpus[1].name, "odd name");
        assert_eq!(back.driver_version, "580.159");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for t in [
            "",
            "gpu\t0",
            "driver\tx\ty",
            "driver\t1\t2\ngpu\tx\t\t\t\t\t\t\t\t",
            "mig\t0\t0\ta\tb\t1\t2",
            "what\tever",
        ] {
            assert!(Inventory::parse(t).is_err(), "{t:?}");
        }
    }

    #[test]
    fn uuids_compare_without_prefix_or_case() {
        assert!(same_uuid("GPU-ABCD", "abcd"));
        assert!(!same_uuid("", ""));
        assert!(!same_uuid("GPU-1", "GPU-2"));
    }

    #[test]
    fn without_nvml_the_error_says_so() {
        // On machines with a driver this reads the real inventory instead.
        match inventory() {
            Ok(inv) => assert!(!inv.driver_version.is_empty() || inv.gpus.is_empty()),
            Err(e) => assert!(e.contains("NVML"), "{e}"),
        }
    }
}
