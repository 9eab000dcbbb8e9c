//! Which devices a host lends: one slot per device, each served by a warm pool of its own.
//!
//! - **emu**: one slot per entry of `[emu] devices` (each its size), or one of
//!   `[workers] emu-memory`.
//! - **cuda**: the slots `[cuda] devices` lists, or else every GPU NVML lists — every MIG
//!   instance of a GPU in MIG mode, in its place — each slot's workers bound to its UUID. A GPU
//!   listed twice is two slots that share its memory equally. Without NVML (no management
//!   library, or a failure), or with `CUDA_VISIBLE_DEVICES` set and no `[cuda] devices`, the
//!   host lends one unbound slot: device 0 of what its workers see.
//!
//! [`plan`] decides from the policy and an NVML inventory alone, so that it can be tested
//! against recorded inventories (MIG included) on machines without such GPUs.

use crate::config::{DevicePolicy, DeviceSelector};
use tasklet_worker::nvml::{same_uuid, Inventory, MigMode};
use tasklet_worker::{BackendKind, DeviceBinding};

/// One device slot to start a pool for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotPlan {
    /// Where the slot's workers run.
    pub binding: DeviceBinding,
    /// emu: the emulated device's memory. cuda: unused (the worker reports its device's).
    pub emu_memory: u64,
    /// How many slots share this slot's device (its memory is split between them).
    pub share: u32,
}

/// Why the policy's devices cannot be lent here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("`[cuda] devices` names {0} by index, but NVML cannot list this machine's GPUs ({1}); name the GPUs by UUID (nvidia-smi -L)")]
    NoInventory(String, String),
    #[error("`[cuda] devices` names {0}, which NVML does not list here; `tasklet inventory` lists the GPUs and MIG instances")]
    NotFound(String),
    #[error("`[cuda] devices` names GPU {0}, which is in MIG mode; name its MIG instances by UUID (`tasklet inventory` lists them)")]
    MigParent(u32),
}

/// The slots to lend, from the policy's devices, the NVML inventory (or why there is none) and
/// the host's `CUDA_VISIBLE_DEVICES`.
pub fn plan(
    backend: BackendKind,
    devices: &DevicePolicy,
    emu_memory: u64,
    nvml: Result<&Inventory, &str>,
    visible_devices: Option<&str>,
) -> Result<Vec<SlotPlan>, PlanError> {
    let unbound = || SlotPlan {
        binding: DeviceBinding::default(),
        emu_memory,
        share: 1,
    };
    if backend == BackendKind::Emu {
        let sizes = devices.emu.clone().unwrap_or_else(|| vec![emu_memory]);
        return Ok(sizes
            .into_iter()
            .map(|m| SlotPlan {
                emu_memory: m,
                ..unbound()
            })
            .collect());
    }
    let uuids: Vec<String> = match (&devices.cuda, nvml) {
        (None, _) if visible_devices.is_some() => return Ok(vec![unbound()]),
        (None, Err(_)) => return Ok(vec![unbound()]),
        (None, Ok(inv)) => inv
            .gpus
            .iter()
            .flat_map(|g| -> Vec<String> {
                if g.mig == MigMode::Enabled && !g.mig_instances.is_empty() {
                    g.mig_instances.iter().map(|m| m.uuid.clone()).collect()
                } else {
                    vec![g.uuid.clone()]
                }
            })
            .filter(|u| !u.trim().is_empty())
            .collect(),
        (Some(list), nvml) => list
            .iter()
            .map(|s| resolve(s, nvml))
            .collect::<Result<_, _>>()?,
    };
    if uuids.is_empty() {
        return Ok(vec![unbound()]);
    }
    Ok(uuids
        .iter()
        .map(|uuid| SlotPlan {
            binding: DeviceBinding::uuid(uuid.clone()).with_peers(peers_of(uuid, &uuids)),
            emu_memory,
            share: uuids.iter().filter(|u| same_uuid(u, uuid)).count() as u32,
        })
        .collect())
}

/// The other whole GPUs among `lent` that a worker of `uuid` also sees, each once, for copies
/// between the GPUs of a group lease. None for a MIG instance: MIG instances have no peer
/// access, and a process sees one at most.
fn peers_of(uuid: &str, lent: &[String]) -> Vec<String> {
    let whole = |u: &str| u.starts_with("GPU-");
    if !whole(uuid) {
        return Vec::new();
    }
    let mut peers: Vec<String> = Vec::new();
    for u in lent {
        if whole(u) && !same_uuid(u, uuid) && !peers.iter().any(|p| same_uuid(p, u)) {
            peers.push(u.clone());
        }
    }
    peers
}

/// A `[cuda] devices` entry's UUID.
fn resolve(s: &DeviceSelector, nvml: Result<&Inventory, &str>) -> Result<String, PlanError> {
    match (s, nvml) {
        (DeviceSelector::Index(_), Err(why)) => {
            Err(PlanError::NoInventory(s.to_string(), why.to_owned()))
        }
        (DeviceSelector::Index(i), Ok(inv)) => {
            let g = inv
                .gpus
                .iter()
                .find(|g| g.index == *i)
                .ok_or_else(|| PlanError::NotFound(s.to_string()))?;
            if g.mig == MigMode::Enabled {
                return Err(PlanError::MigParent(*i));
            }
            Ok(g.uuid.clone())
        }
        // Without an inventory a UUID is taken as written: the worker's start says whether it
        // is a device.
        (DeviceSelector::Uuid(u), Err(_)) => Ok(u.clone()),
        (DeviceSelector::Uuid(u), Ok(inv)) => {
            for g in &inv.gpus {
                if same_uuid(&g.uuid, u) {
                    if g.mig == MigMode::Enabled {
                        return Err(PlanError::MigParent(g.index));
                    }
                    return Ok(g.uuid.clone());
                }
                if let Some(m) = g.mig_instances.iter().find(|m| same_uuid(&m.uuid, u)) {
                    return Ok(m.uuid.clone());
                }
            }
            Err(PlanError::NotFound(s.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two H100s, the second in MIG mode with two instances, as a worker's `--inventory` prints
    /// them (recorded form; no MIG-enabled GPU was at hand to read one from).
    const RECORDED: &str = "driver\t580.159\t13000\n\
        gpu\t0\tNVIDIA H100 80GB HBM3\tGPU-aaaa0000-0000-0000-0000-000000000000\t9.0\t85520809984\t84000000000\t1520809984\tdisabled\t00000000:19:00.0\n\
        gpu\t1\tNVIDIA H100 80GB HBM3\tGPU-bbbb0000-0000-0000-0000-000000000000\t9.0\t85520809984\t85000000000\t520809984\tenabled\t00000000:3B:00.0\n\
        mig\t1\t0\tNVIDIA H100 80GB HBM3 MIG 3g.40gb\tMIG-cccc0000-0000-0000-0000-000000000000\t42580574208\t42000000000\n\
        mig\t1\t1\tNVIDIA H100 80GB HBM3 MIG 3g.40gb\tMIG-dddd0000-0000-0000-0000-000000000000\t42580574208\t42000000000\n";

    fn uuids(p: &[SlotPlan]) -> Vec<(String, u32)> {
        p.iter()
            .map(|s| (s.binding.uuid.clone().unwrap_or_default(), s.share))
            .collect()
    }

    #[test]
    fn emu_lends_the_listed_sizes_or_one_device() {
        let none = DevicePolicy::default();
        let p = plan(BackendKind::Emu, &none, 1 << 30, Err("no NVML"), None).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].emu_memory, 1 << 30);
        let three = DevicePolicy {
            emu: Some(vec![16 << 30, 16 << 30, 8 << 30]),
            cuda: None,
        };
        let p = plan(BackendKind::Emu, &three, 1 << 30, Err("no NVML"), None).unwrap();
        let sizes: Vec<u64> = p.iter().map(|s| s.emu_memory).collect();
        assert_eq!(sizes, [16 << 30, 16 << 30, 8 << 30]);
        assert!(p.iter().all(|s| s.binding.uuid.is_none() && s.share == 1));
    }

    #[test]
    fn cuda_default_is_every_gpu_with_mig_instances_in_place_of_their_gpu() {
        let inv = Inventory::parse(RECORDED).unwrap();
        let p = plan(
            BackendKind::Cuda,
            &DevicePolicy::default(),
            0,
            Ok(&inv),
            None,
        )
        .unwrap();
        assert_eq!(
            uuids(&p),
            [
                ("GPU-aaaa0000-0000-0000-0000-000000000000".into(), 1),
                ("MIG-cccc0000-0000-0000-0000-000000000000".into(), 1),
                ("MIG-dddd0000-0000-0000-0000-000000000000".into(), 1),
            ]
        );
        // Without NVML, or with the operator's CUDA_VISIBLE_DEVICES, one unbound slot.
        for (nvml, visible) in [(Err("no NVML"), None), (Ok(&inv), Some("1"))] {
            let p = plan(
                BackendKind::Cuda,
                &DevicePolicy::default(),
                0,
                nvml,
                visible,
            )
            .unwrap();
            assert_eq!(uuids(&p), [(String::new(), 1)]);
        }
    }

    #[test]
    fn whole_gpus_see_each_other_and_mig_instances_see_none() {
        let two = "driver\t580.159\t13000\n\
            gpu\t0\tNVIDIA H200\tGPU-aaaa0000-0000-0000-0000-000000000000\t9.0\t150000000000\t149000000000\t1000000000\tdisabled\t00000000:19:00.0\n\
            gpu\t1\tNVIDIA H200\tGPU-eeee0000-0000-0000-0000-000000000000\t9.0\t150000000000\t149000000000\t1000000000\tdisabled\t00000000:3B:00.0\n";
        let inv = Inventory::parse(two).unwrap();
        let p = plan(
            BackendKind::Cuda,
            &DevicePolicy::default(),
            0,
            Ok(&inv),
            None,
        )
        .unwrap();
        let (a, e) = (
            "GPU-aaaa0000-0000-0000-0000-000000000000",
            "GPU-eeee0000-0000-0000-0000-000000000000",
        );
        assert_eq!(p[0].binding.peers, [e]);
        assert_eq!(p[1].binding.peers, [a]);
        assert_eq!(
            p[0].binding.env(),
            Some(("CUDA_VISIBLE_DEVICES", format!("{a},{e}")))
        );
        // Two slots of one GPU: no peer (the GPU itself is not its own peer).
        let one = DevicePolicy {
            emu: None,
            cuda: Some(vec![DeviceSelector::Index(0), DeviceSelector::Index(0)]),
        };
        let p = plan(BackendKind::Cuda, &one, 0, Ok(&inv), None).unwrap();
        assert!(p.iter().all(|s| s.binding.peers.is_empty()));
        // Beside MIG instances, a whole GPU sees no instance, and an instance sees nothing.
        let recorded = Inventory::parse(RECORDED).unwrap();
        let p = plan(
            BackendKind::Cuda,
            &DevicePolicy::default(),
            0,
            Ok(&recorded),
            None,
        )
        .unwrap();
        assert!(p.iter().all(|s| s.binding.peers.is_empty()));
        assert_eq!(
            p[1].binding.env(),
            Some((
                "CUDA_VISIBLE_DEVICES",
                "MIG-cccc0000-0000-0000-0000-000000000000".to_string()
            ))
        );
    }

    #[test]
    fn cuda_list_resolves_indexes_shares_repeats_and_refuses_what_is_not_there() {
        let inv = Inventory::parse(RECORDED).unwrap();
        let list = |l: &[&str]| DevicePolicy {
            emu: None,
            cuda: Some(
                l.iter()
                    .map(|s| DeviceSelector::parse(s).unwrap())
                    .collect(),
            ),
        };
        let two_slots = plan(BackendKind::Cuda, &list(&["0", "0"]), 0, Ok(&inv), None).unwrap();
        let a = "GPU-aaaa0000-0000-0000-0000-000000000000".to_string();
        assert_eq!(uuids(&two_slots), [(a.clone(), 2), (a.clone(), 2)]);
        let mig = plan(
            BackendKind::Cuda,
            &list(&[
                "MIG-dddd0000-0000-0000-0000-000000000000",
                "GPU-AAAA0000-0000-0000-0000-000000000000",
            ]),
            0,
            Ok(&inv),
            Some("0"),
        )
        .unwrap();
        assert_eq!(
            uuids(&mig),
            [
                ("MIG-dddd0000-0000-0000-0000-000000000000".into(), 1),
                (a, 1)
            ]
        );
        let err = |l: &[&str], nvml| plan(BackendKind::Cuda, &list(l), 0, nvml, None).unwrap_err();
        assert_eq!(err(&["7"], Ok(&inv)), PlanError::NotFound("GPU 7".into()));
        assert_eq!(err(&["1"], Ok(&inv)), PlanError::MigParent(1));
        assert_eq!(
            err(&["GPU-bbbb0000-0000-0000-0000-000000000000"], Ok(&inv)),
            PlanError::MigParent(1)
        );
        assert_eq!(
            err(&["GPU-ffff"], Ok(&inv)),
            PlanError::NotFound("GPU-ffff".into())
        );
        let e = err(&["0"], Err("NVML not available")).to_string();
        assert!(
            e.contains("by UUID") && e.contains("NVML not available"),
            "{e}"
        );
        // Without NVML a UUID is taken as written.
        let p = plan(
            BackendKind::Cuda,
            &list(&["GPU-ffff"]),
            0,
            Err("no NVML"),
            None,
        )
        .unwrap();
        assert_eq!(uuids(&p), [("GPU-ffff".into(), 1)]);
    }
}
