//! Properties of parsing and placement over generated requirements and node sets.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::record::{
    ComputeCapability, DeviceRecord, Load, NodeName, NodeRecord, BACKEND_CUDA, BACKEND_EMU,
    RECORD_FORMAT,
};

fn device() -> impl Strategy<Value = DeviceRecord> {
    (
        0u32..4,
        prop::sample::select(vec![BACKEND_CUDA, BACKEND_EMU]),
        0u64..=64,
        0u64..=64,
        (7u32..=10, 0u32..=9),
        0u32..8,
    )
        .prop_map(|(index, backend, total, used, (major, minor), leases)| {
            let total_vram = total << 28;
            DeviceRecord {
                index,
                name: format!("dev{index}"),
                backend: backend.to_string(),
                uuid: String::new(),
                total_vram,
                free_vram: total_vram.saturating_sub(used << 28),
                compute_capability: ComputeCapability::new(major, minor),
                leases,
            }
        })
}

/// Up to 12 nodes with distinct names (a registry's keys are distinct).
fn nodes() -> impl Strategy<Value = Vec<NodeRecord>> {
    prop::collection::vec(
        (
            prop::collection::vec(device(), 0..4),
            any::<bool>(),
            (0u32..4, 0u32..4, 0u32..4),
        ),
        0..12,
    )
    .prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(
                |(i, (devices, draining, (connections, sessions, runs)))| NodeRecord {
                    format: RECORD_FORMAT,
                    name: NodeName::new(format!("node-{i}")).unwrap(),
                    address: format!("127.0.0.1:{}", 5701 + i),
                    cert_sha256: String::new(),
                    version: String::new(),
                    devices,
                    load: Load {
                        connections,
                        sessions,
                        runs,
                    },
                    draining,
                    heartbeat_unix_ms: 0,
                },
            )
            .collect()
    })
}

fn requirement() -> impl Strategy<Value = Requirement> {
    (
        prop::option::of(0u64..=64),
        prop::option::of((7u32..=10, 0u32..=9)),
        prop::option::of(prop::sample::select(vec![BACKEND_CUDA, BACKEND_EMU])),
    )
        .prop_map(|(vram, cc, backend)| Requirement {
            min_free_vram: vram.map_or(0, |v| v << 28),
            min_compute_capability: cc.map(|(major, minor)| ComputeCapability::new(major, minor)),
            backend: backend.map(str::to_string),
        })
}

proptest! {
    #[test]
    fn display_parses_back(req in requirement()) {
        prop_assert_eq!(req.to_string().parse::<Requirement>(), Ok(req));
    }

    #[test]
    fn any_text_parses_or_errs_without_panic(text in ".{0,300}") {
        let _ = text.parse::<Requirement>();
    }

    #[test]
    fn near_miss_texts_parse_or_err_without_panic(text in "gpu[:,]?[a-z>=.,0-9GiMB ]{0,40}") {
        if let Ok(req) = text.parse::<Requirement>() {
            prop_assert_eq!(req.to_string().parse::<Requirement>(), Ok(req));
        }
    }

    #[test]
    fn candidates_are_exactly_the_eligible_nodes(req in requirement(), nodes in nodes()) {
        let chosen = choose(&req, &nodes);
        let chosen_names: BTreeSet<_> = chosen.iter().map(|c| c.node.name.clone()).collect();
        prop_assert_eq!(chosen_names.len(), chosen.len(), "a node offered twice");
        for node in &nodes {
            let eligible = !node.draining && node.devices.iter().any(|d| req.fits(d));
            prop_assert_eq!(eligible, chosen_names.contains(&node.name), "{}", node.name);
        }
        for candidate in &chosen {
            prop_assert!(req.fits(candidate.device));
            prop_assert!(!candidate.node.draining);
            // The device chosen on a node is its fitting device with the most free VRAM.
            let best = candidate.node.devices.iter().filter(|d| req.fits(d)).map(|d| d.free_vram).max();
            prop_assert_eq!(Some(candidate.device.free_vram), best);
        }
    }

    #[test]
    fn order_follows_the_policy(req in requirement(), nodes in nodes()) {
        let chosen = choose(&req, &nodes);
        for pair in chosen.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            prop_assert!(a.device.free_vram >= b.device.free_vram);
            if a.device.free_vram == b.device.free_vram {
                prop_assert!(a.node.leases() <= b.node.leases());
            }
        }
    }

    #[test]
    fn order_does_not_depend_on_input_order(req in requirement(), nodes in nodes(), seed in any::<u64>()) {
        let mut shuffled = nodes.clone();
        // A deterministic shuffle from the seed (Fisher-Yates with an LCG).
        let mut state = seed;
        for i in (1..shuffled.len()).rev() {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(i, (state >> 33) as usize % (i + 1));
        }
        let names = |c: Vec<Candidate<'_>>| c.iter().map(|c| c.node.name.clone()).collect::<Vec<_>>();
        prop_assert_eq!(names(choose(&req, &nodes)), names(choose(&req, &shuffled)));
    }
}

#[test]
fn an_emulated_device_satisfies_gpu_but_not_backend_cuda() {
    let mut node = NodeRecord {
        format: RECORD_FORMAT,
        name: NodeName::new("emu-node").unwrap(),
        address: "127.0.0.1:5701".into(),
        cert_sha256: String::new(),
        version: String::new(),
        devices: vec![DeviceRecord {
            index: 0,
            name: "emulator".into(),
            backend: BACKEND_EMU.into(),
            uuid: String::new(),
            total_vram: 1 << 30,
            free_vram: 1 << 30,
            compute_capability: ComputeCapability::new(9, 0),
            leases: 0,
        }],
        load: Load::default(),
        draining: false,
        heartbeat_unix_ms: 0,
    };
    let gpu: Requirement = "gpu".parse().unwrap();
    let cuda: Requirement = "gpu:backend=cuda".parse().unwrap();
    assert_eq!(choose(&gpu, std::slice::from_ref(&node)).len(), 1);
    assert!(choose(&cuda, std::slice::from_ref(&node)).is_empty());
    node.draining = true;
    assert!(choose(&gpu, std::slice::from_ref(&node)).is_empty());
}

#[test]
fn most_free_vram_then_fewest_leases_then_name() {
    let node = |name: &str, free_gib: u64, leases: u32| NodeRecord {
        format: RECORD_FORMAT,
        name: NodeName::new(name).unwrap(),
        address: String::new(),
        cert_sha256: String::new(),
        version: String::new(),
        devices: vec![DeviceRecord {
            index: 0,
            name: "d".into(),
            backend: BACKEND_EMU.into(),
            uuid: String::new(),
            total_vram: 64 << 30,
            free_vram: free_gib << 30,
            compute_capability: ComputeCapability::new(9, 0),
            leases,
        }],
        load: Load::default(),
        draining: false,
        heartbeat_unix_ms: 0,
    };
    let nodes = [
        node("c", 8, 1),
        node("b", 8, 1),
        node("a", 8, 3),
        node("d", 16, 9),
        node("e", 2, 0),
    ];
    let req: Requirement = "gpu:vram=4GiB".parse().unwrap();
    let order: Vec<_> = choose(&req, &nodes)
        .iter()
        .map(|c| c.node.name.to_string())
        .collect();
    assert_eq!(order, ["d", "b", "c", "a"]);
}
