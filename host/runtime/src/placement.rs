//! Which of a node's devices a lease goes to.
//!
//! A lease may require things of its device ([`DeviceRequirement`]): an index, a UUID, a
//! model, a compute capability, a size. Of the devices that meet every requirement and have the
//! lease's bytes free, the host takes the one with the most memory free, then the one with the
//! fewest leases, then the lowest index ([`rank`]): leases spread over the devices, and a large
//! lease finds room where small ones have not crowded it out. When none fits, the error names,
//! device by device, what was missing. A group of leases ([`rank_group`]) goes to as many
//! distinct devices, in the same order.

use crate::config::units::format_size;
use crate::error::quoted;
use crate::lease::Device;
use std::fmt::Write as _;

/// What a lease requires of its device; every field left out is no requirement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceRequirement {
    /// The device with this index (`inventory.devices`).
    pub index: Option<u32>,
    /// The device with this UUID (`GPU-…`, `MIG-…`, or `emu-N` for an emulated one).
    pub uuid: Option<String>,
    /// A device whose name contains this text, case aside (e.g. `H100`).
    pub model: Option<String>,
    /// A device of at least this compute capability (major, minor).
    pub min_compute_capability: Option<(u32, u32)>,
    /// A device that lends at least this many bytes in all (`total-memory`).
    pub min_total_memory: Option<u64>,
}

impl DeviceRequirement {
    /// Whether it requires nothing: any device with room will do.
    pub fn is_empty(&self) -> bool {
        *self == DeviceRequirement::default()
    }

    /// What `device` lacks of the requirement, in words (empty: nothing).
    fn missing(&self, device: &Device) -> Vec<String> {
        let mut missing = Vec::new();
        if let Some(i) = self.index.filter(|&i| i != device.index) {
            missing.push(format!("it is not device {i}"));
        }
        if let Some(u) = self.uuid.as_deref().filter(|u| !same_id(u, &device.uuid)) {
            missing.push(format!("its UUID is not {}", quoted(u)));
        }
        if let Some(m) = self
            .model
            .as_deref()
            .filter(|m| !has_model(&device.name, m))
        {
            missing.push(format!("its name does not contain {}", quoted(m)));
        }
        if let Some((a, b)) = self
            .min_compute_capability
            .filter(|&cc| device.compute_capability < cc)
        {
            let (ha, hb) = device.compute_capability;
            missing.push(format!("compute capability {ha}.{hb}, {a}.{b} required"));
        }
        if let Some(min) = self.min_total_memory.filter(|&m| device.total_memory < m) {
            missing.push(format!(
                "lends {} in all, {} required",
                format_size(device.total_memory),
                format_size(min)
            ));
        }
        missing
    }
}

impl std::fmt::Display for DeviceRequirement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(i) = self.index {
            parts.push(format!("device {i}"));
        }
        if let Some(u) = &self.uuid {
            parts.push(format!("UUID {}", quoted(u)));
        }
        if let Some(m) = &self.model {
            parts.push(format!("model {}", quoted(m)));
        }
        if let Some((a, b)) = self.min_compute_capability {
            parts.push(format!("compute capability {a}.{b} or above"));
        }
        if let Some(m) = self.min_total_memory {
            parts.push(format!("at least {} in all", format_size(m)));
        }
        if parts.is_empty() {
            return f.write_str("any device");
        }
        f.write_str(&parts.join(", "))
    }
}

/// A device as placement sees it: what it is, what it has free, how many leases it serves.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub device: &'a Device,
    /// Bytes not granted to leases.
    pub free: u64,
    pub leases: usize,
}

/// Most devices a refusal describes one by one (the rest are counted).
const DESCRIBED: usize = 8;

/// The devices that can take a lease of `bytes` under `requires`, best first (most free memory,
/// then fewest leases, then lowest index); or, when none can, why not, device by device.
pub fn rank(
    candidates: &[Candidate<'_>],
    bytes: u64,
    requires: &DeviceRequirement,
) -> Result<Vec<u32>, String> {
    let sifted = sift(candidates, bytes, requires);
    if sifted.fitting.is_empty() {
        if candidates.is_empty() {
            return Err("this node lends no device".into());
        }
        return Err(format!(
            "no device of this node can take a lease of {} requiring {requires}{}; ask for less, require less, or \
             retry later",
            format_size(bytes),
            sifted.why
        ));
    }
    Ok(sifted.fitting)
}

/// The devices a group of `count` leases of `bytes` each may go to, one lease a device: every
/// device that can take one, in [`rank`]'s order (the group takes the first `count` that serve
/// it). When fewer than `count` can, why not: how many devices the node lends, how many of them
/// meet `requires` and have the room, and what each of the others lacked.
pub fn rank_group(
    candidates: &[Candidate<'_>],
    bytes: u64,
    requires: &DeviceRequirement,
    count: usize,
) -> Result<Vec<u32>, String> {
    let sifted = sift(candidates, bytes, requires);
    if sifted.fitting.len() >= count {
        return Ok(sifted.fitting);
    }
    Err(format!(
        "a group of {count} leases of {} needs {count} devices, one lease each; this node lends {}, of which {} \
         meet the requirements ({requires}) and {} of those have the room{}; ask for fewer leases, require less, \
         or retry later",
        format_size(bytes),
        candidates.len(),
        sifted.meeting,
        sifted.fitting.len(),
        sifted.why
    ))
}

/// The candidates sorted out for a lease of `bytes` under `requires`.
struct Sifted {
    /// Those that can take it, best first.
    fitting: Vec<u32>,
    /// How many meet the requirements, room aside.
    meeting: usize,
    /// What each of the others lacked (`; device N (name): …`, a few described, the rest counted).
    why: String,
}

fn sift(candidates: &[Candidate<'_>], bytes: u64, requires: &DeviceRequirement) -> Sifted {
    let mut fitting: Vec<&Candidate<'_>> = Vec::new();
    let mut meeting = 0;
    let mut why = String::new();
    let mut described = 0;
    for c in candidates {
        let mut missing = requires.missing(c.device);
        if missing.is_empty() {
            meeting += 1;
        }
        if bytes > c.free {
            missing.push(format!(
                "{} free, {} asked",
                format_size(c.free),
                format_size(bytes)
            ));
        }
        if missing.is_empty() {
            fitting.push(c);
            continue;
        }
        if described < DESCRIBED {
            let _ = write!(
                why,
                "; device {} ({}): {}",
                c.device.index,
                c.device.name,
                missing.join(", ")
            );
        }
        described += 1;
    }
    if described > DESCRIBED {
        let _ = write!(why, "; and {} more", described - DESCRIBED);
    }
    fitting.sort_by(|a, b| {
        b.free
            .cmp(&a.free)
            .then(a.leases.cmp(&b.leases))
            .then(a.device.index.cmp(&b.device.index))
    });
    Sifted {
        fitting: fitting.iter().map(|c| c.device.index).collect(),
        meeting,
        why,
    }
}

/// Whether two device ids name the same device: UUIDs as NVML writes them, `GPU-`/`MIG-` prefix
/// and case aside, or an emulated device's `emu-N`.
fn same_id(asked: &str, uuid: &str) -> bool {
    let norm = |s: &str| {
        let s = s.trim().to_ascii_lowercase();
        match s.strip_prefix("gpu-").or_else(|| s.strip_prefix("mig-")) {
            Some(rest) => rest.to_owned(),
            None => s,
        }
    };
    !asked.trim().is_empty() && norm(asked) == norm(uuid)
}

fn has_model(name: &str, model: &str) -> bool {
    name.to_ascii_lowercase()
        .contains(&model.trim().to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tasklet_worker::LaunchLimits;

    fn device(index: u32, name: &str, cc: (u32, u32), gib: u64) -> Device {
        Device {
            index,
            name: name.into(),
            backend: "cuda",
            total_memory: gib << 30,
            device_memory: gib << 30,
            compute_capability: cc,
            uuid: format!("GPU-{index:04}"),
            driver_version: 13000,
            pinned_data: true,
            launch_limits: LaunchLimits::SM_80,
        }
    }

    #[test]
    fn most_free_first_then_fewest_leases_then_lowest_index() {
        let d = [
            device(0, "NVIDIA A100", (8, 0), 40),
            device(1, "NVIDIA H100", (9, 0), 80),
            device(2, "NVIDIA H100", (9, 0), 80),
        ];
        let c = |i: usize, free_gib: u64, leases| Candidate {
            device: &d[i],
            free: free_gib << 30,
            leases,
        };
        let any = DeviceRequirement::default();
        assert_eq!(
            rank(&[c(0, 40, 0), c(1, 50, 3), c(2, 60, 9)], 1, &any),
            Ok(vec![2, 1, 0])
        );
        assert_eq!(
            rank(&[c(0, 50, 0), c(1, 50, 3), c(2, 50, 1)], 1, &any),
            Ok(vec![0, 2, 1])
        );
        assert_eq!(
            rank(&[c(0, 50, 2), c(1, 50, 2), c(2, 50, 2)], 1, &any),
            Ok(vec![0, 1, 2])
        );
        // Too little free memory is a miss like any other.
        assert_eq!(rank(&[c(0, 1, 0), c(1, 2, 0)], 2 << 30, &any), Ok(vec![1]));
    }

    #[test]
    fn each_requirement_narrows_and_a_refusal_names_what_was_missing() {
        let d = [
            device(0, "NVIDIA A100-SXM4-40GB", (8, 0), 40),
            device(1, "NVIDIA H100 80GB HBM3", (9, 0), 80),
        ];
        let all = [
            Candidate {
                device: &d[0],
                free: 40 << 30,
                leases: 0,
            },
            Candidate {
                device: &d[1],
                free: 8 << 30,
                leases: 0,
            },
        ];
        let req = |f: fn(&mut DeviceRequirement)| {
            let mut r = DeviceRequirement::default();
            f(&mut r);
            r
        };
        let cc9 = req(|r| r.min_compute_capability = Some((9, 0)));
        assert_eq!(rank(&all, 1 << 30, &cc9), Ok(vec![1]));
        let h100 = req(|r| r.model = Some("h100".into()));
        assert_eq!(rank(&all, 1 << 30, &h100), Ok(vec![1]));
        let by_uuid = req(|r| r.uuid = Some("gpu-0000".into()));
        assert_eq!(rank(&all, 1 << 30, &by_uuid), Ok(vec![0]));
        let big = req(|r| r.min_total_memory = Some(64 << 30));
        assert_eq!(rank(&all, 1 << 30, &big), Ok(vec![1]));
        let one = req(|r| r.index = Some(0));
        assert_eq!(rank(&all, 1 << 30, &one), Ok(vec![0]));

        // The H100 has 8 GiB free; 16 GiB on a cc 9.0 device fits nowhere, and the error says
        // what each device lacked.
        let e = rank(&all, 16 << 30, &cc9).unwrap_err();
        assert!(
            e.contains("requiring compute capability 9.0 or above"),
            "{e}"
        );
        assert!(
            e.contains("device 0 (NVIDIA A100-SXM4-40GB): compute capability 8.0, 9.0 required"),
            "{e}"
        );
        assert!(
            e.contains("device 1 (NVIDIA H100 80GB HBM3): 8GiB free, 16GiB asked"),
            "{e}"
        );
        let e = rank(&all, 1, &req(|r| r.model = Some("B200".into()))).unwrap_err();
        assert!(e.contains("its name does not contain \"B200\""), "{e}");
        let e = rank(&all, 1, &req(|r| r.uuid = Some("x".repeat(1 << 20)))).unwrap_err();
        assert!(
            e.len() < 1000,
            "a tenant's text is quoted in part: {} bytes",
            e.len()
        );
        assert_eq!(rank(&[], 1, &cc9), Err("this node lends no device".into()));
    }

    #[test]
    fn a_group_takes_distinct_devices_in_rank_order_or_says_how_many_fit() {
        let d = [
            device(0, "NVIDIA H100", (9, 0), 80),
            device(1, "NVIDIA H100", (9, 0), 80),
            device(2, "NVIDIA A100", (8, 0), 40),
        ];
        let c = |i: usize, free_gib: u64, leases| Candidate {
            device: &d[i],
            free: free_gib << 30,
            leases,
        };
        let all = [c(0, 20, 1), c(1, 70, 0), c(2, 40, 0)];
        let any = DeviceRequirement::default();
        assert_eq!(rank_group(&all, 1 << 30, &any, 3), Ok(vec![1, 2, 0]));
        // Every device that can take one, best first: the group takes the first it needs.
        assert_eq!(rank_group(&all, 1 << 30, &any, 2), Ok(vec![1, 2, 0]));
        assert_eq!(rank_group(&all, 1 << 30, &any, 0), Ok(vec![1, 2, 0]));

        // More leases than devices: how many the node lends and how many would do.
        let e = rank_group(&all, 1 << 30, &any, 4).unwrap_err();
        assert!(
            e.contains("a group of 4 leases of 1GiB needs 4 devices"),
            "{e}"
        );
        assert!(
            e.contains("this node lends 3, of which 3 meet the requirements (any device) and 3 of those have the room"),
            "{e}"
        );
        // A requirement two devices meet, and room on only one of those.
        let cc9 = DeviceRequirement {
            min_compute_capability: Some((9, 0)),
            ..DeviceRequirement::default()
        };
        assert_eq!(rank_group(&all, 1 << 30, &cc9, 2), Ok(vec![1, 0]));
        let e = rank_group(&all, 1 << 30, &cc9, 3).unwrap_err();
        assert!(e.contains("of which 2 meet the requirements"), "{e}");
        assert!(e.contains("9.0 required"), "{e}");
        let e = rank_group(&all, 30 << 30, &cc9, 2).unwrap_err();
        assert!(
            e.contains("of which 2 meet the requirements (compute capability 9.0 or above) and 1 of those have the room"),
            "{e}"
        );
        assert!(
            e.contains("device 0 (NVIDIA H100): 20GiB free, 30GiB asked"),
            "{e}"
        );
        let e = rank_group(&[], 1, &any, 1).unwrap_err();
        assert!(e.contains("this node lends 0"), "{e}");
    }

    #[test]
    fn a_refusal_describes_a_few_devices_and_counts_the_rest() {
        let d: Vec<Device> = (0..20).map(|i| device(i, "GPU", (8, 0), 1)).collect();
        let c: Vec<Candidate<'_>> = d
            .iter()
            .map(|device| Candidate {
                device,
                free: 0,
                leases: 0,
            })
            .collect();
        let e = rank(&c, 1, &DeviceRequirement::default()).unwrap_err();
        assert_eq!(e.matches("; device ").count(), DESCRIBED, "{e}");
        assert!(e.contains("and 12 more"), "{e}");
    }
}
