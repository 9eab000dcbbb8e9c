//! `tasklet inventory`: the devices this node lends, and the GPUs NVML sees; with `--node`, the
//! devices a remote node lends (GET_INVENTORY), their free memory and running leases.
//!
//! The lent devices come from the host (one slot per device the policy lends, each described by a
//! worker of its own pool, with what the node lends of it; `[emu] devices` lists emulated ones). NVML details (UUID, free memory, MIG) come from a short-lived worker process in its
//! `--inventory` mode, so the host process never loads NVIDIA libraries.

use crate::backend::{rounded_size, worker_command, HostArgs};
use crate::json::json_str;
use crate::remote::RemoteArgs;
use anyhow::Result;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;
use tasklet_runtime::config::units::sizes_told_apart;
use tasklet_runtime::Device;
use tasklet_worker::nvml::{self, Gpu, Inventory, MigMode};

/// List the devices this node lends to tasklets, and the GPUs NVML sees.
///
/// With --node, the devices that node lends, their free memory and running leases, and whether
/// it is draining; --backend and --policy choose this machine's host, so they are refused with
/// --node rather than ignored.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tasklet inventory                                    this machine's devices\n  \
    tasklet inventory --backend emu --policy policy.toml  as a node with that policy would lend them\n  \
    tasklet inventory --node gpu1:5701 --certs certs --json  what node gpu1 lends, as JSON\n\n\
    (policy.toml: a node policy, as docs/operating.md writes one)")]
pub struct InventoryArgs {
    /// Print JSON instead of a table: an array of devices, the lent ones first by index
    /// (`"lent": true`), then any GPU NVML lists that this node does not lend.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub host: HostArgs,
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// How long NVML may take to answer.
const NVML_TIMEOUT: Duration = Duration::from_secs(20);

pub fn run(args: InventoryArgs) -> Result<ExitCode> {
    if let Some(addr) = &args.remote.node {
        args.host.refuse_where_unused(false)?;
        return remote(&args, addr);
    }
    let started = args.host.start(args.json)?;
    let host = &started.host;
    let lent = host.devices();
    let nvml = worker_command()
        .map_err(|e| e.to_string())
        .and_then(|c| nvml::inventory_via_worker(&c, NVML_TIMEOUT));
    // The NVML GPU (or the GPU of the MIG instance) each lent device is.
    let nvml_gpu = |d: &Device| -> Option<&Gpu> {
        match (&nvml, d.backend) {
            (Ok(inv), "cuda") => inv.gpus.iter().find(|g| {
                nvml::same_uuid(&g.uuid, &d.uuid)
                    || g.mig_instances
                        .iter()
                        .any(|m| nvml::same_uuid(&m.uuid, &d.uuid))
            }),
            _ => None,
        }
    };
    let is_lent = |g: &Gpu| {
        lent.iter()
            .any(|d| nvml_gpu(d).is_some_and(|l| l.index == g.index))
    };
    if args.json {
        let mut out = String::from("[");
        for (i, d) in lent.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"index\":{},\"lent\":true,\"name\":{},\"backend\":{},\"total_memory\":{},\"free_memory\":{},\"compute_capability\":[{},{}],\"device_memory\":{},\"uuid\":{},\"driver_version\":{},\"pinned_data\":{}",
                d.index,
                json_str(&d.name),
                json_str(d.backend),
                d.total_memory,
                host.free_memory_on(d.index),
                d.compute_capability.0,
                d.compute_capability.1,
                d.device_memory,
                json_str(&d.uuid),
                d.driver_version,
                d.pinned_data
            );
            if let Some(g) = nvml_gpu(d) {
                let _ = write!(out, ",\"nvml\":{}", gpu_json(g, nvml.as_ref().ok()));
            }
            if let Some(why) = &started.cuda_unusable {
                let _ = write!(out, ",\"cuda_unusable\":{}", json_str(why));
            }
            if let Err(why) = &nvml {
                let _ = write!(out, ",\"nvml_error\":{}", json_str(why));
            }
            out.push('}');
        }
        if let Ok(inv) = &nvml {
            for g in inv.gpus.iter().filter(|g| !is_lent(g)) {
                let _ = write!(
                    out,
                    ",{{\"index\":{},\"lent\":false,\"name\":{},\"backend\":\"cuda\",\"uuid\":{},\"nvml\":{}}}",
                    g.index,
                    json_str(&g.name),
                    json_str(&g.uuid),
                    gpu_json(g, Some(inv))
                );
            }
        }
        out.push(']');
        outln!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:<6} {:<8} {:<12} {:<12} {:<6} {:<42} NAME",
        "INDEX",
        "BACKEND",
        "MEMORY",
        "FREE",
        "CC",
        "UUID"
    );
    for d in lent {
        outln!(
            "{:<6} {:<8} {:<12} {:<12} {:<6} {:<42} {}",
            d.index,
            d.backend,
            rounded_size(d.total_memory),
            rounded_size(host.free_memory_on(d.index)),
            format!("{}.{}", d.compute_capability.0, d.compute_capability.1),
            d.uuid,
            d.name
        );
        if d.backend == "cuda" {
            outln!(
                "       device memory {}; lent {} (the rest is reserved for worker contexts, withheld by the policy or lent as another slot); {}",
                rounded_size(d.device_memory),
                rounded_size(d.total_memory),
                if d.pinned_data { "pinned data region" } else { "pageable data region (cuMemHostRegister failed)" }
            );
        }
    }
    if let Some(why) = &started.cuda_unusable {
        outln!("CUDA not used: {why}");
    }
    match &nvml {
        Err(why) => outln!("GPUs: none listed ({why})"),
        Ok(inv) if inv.gpus.is_empty() => {
            outln!("GPUs: NVML (driver {}) lists none", inv.driver_version)
        }
        Ok(inv) => {
            outln!(
                "GPUs (NVML, driver {}, CUDA {}):",
                inv.driver_version,
                cuda_version(inv.cuda_version)
            );
            for g in &inv.gpus {
                let lent = if is_lent(g) { "  [lent]" } else { "" };
                let cc = g
                    .compute_capability
                    .map_or("?".into(), |(a, b)| format!("{a}.{b}"));
                outln!(
                    "  GPU {}  {}  {}  compute {cc}  memory {}, {} free  MIG {}{lent}",
                    g.index,
                    g.name,
                    g.uuid,
                    rounded_size(g.memory_total),
                    rounded_size(g.memory_free),
                    g.mig.as_str()
                );
                for m in &g.mig_instances {
                    outln!(
                        "    MIG {}  {}  {}  memory {}, {} free",
                        m.index,
                        m.name,
                        m.uuid,
                        rounded_size(m.memory_total),
                        rounded_size(m.memory_free)
                    );
                }
                if g.mig == MigMode::Enabled && g.mig_instances.is_empty() {
                    outln!("    (MIG enabled, no instances created)");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A node's devices, as its GET_INVENTORY reply lists them.
fn remote(args: &InventoryArgs, addr: &str) -> Result<ExitCode> {
    let mut client = args.remote.connect(addr)?;
    let inventory = client.node_inventory()?;
    let (devices, draining) = (inventory.devices, inventory.draining);
    if args.json {
        let mut out = String::from("[");
        for (i, d) in devices.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"node\":{},\"index\":{},\"name\":{},\"backend\":{},\"uuid\":{},\"total_memory\":{},\"free_memory\":{},\"leases\":{},\"compute_capability\":[{},{}],\"driver_version\":{},\"draining\":{draining}}}",
                json_str(client.node_name()),
                d.index,
                json_str(&d.name),
                json_str(&d.backend),
                json_str(&d.uuid),
                d.total_memory,
                d.free_memory,
                d.leases,
                d.compute_capability.0,
                d.compute_capability.1,
                d.driver_version
            );
        }
        out.push(']');
        outln!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    if draining {
        outln!(
            "node {addr}: {} (draining: it refuses new leases and runs, and stops once what runs has ended)",
            client.node_name()
        );
    } else {
        outln!("node {addr}: {}", client.node_name());
    }
    outln!(
        "{:<6} {:<8} {:<12} {:<12} {:<7} {:<6} NAME",
        "INDEX",
        "BACKEND",
        "MEMORY",
        "FREE",
        "LEASES",
        "CC"
    );
    for d in &devices {
        // A lease's few MiB stay visible: 4095MiB free of 4GiB, not 4.0 GiB of 4 GiB.
        let (total, free) = sizes_told_apart(d.total_memory, d.free_memory);
        outln!(
            "{:<6} {:<8} {:<12} {:<12} {:<7} {:<6} {}",
            d.index,
            d.backend,
            total,
            free,
            d.leases,
            format!("{}.{}", d.compute_capability.0, d.compute_capability.1),
            d.name
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn cuda_version(v: u32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn gpu_json(g: &Gpu, inv: Option<&Inventory>) -> String {
    let mut s = format!(
        "{{\"uuid\":{},\"pci_bus_id\":{},\"memory_total\":{},\"memory_free\":{},\"memory_used\":{},\"mig_mode\":{}",
        json_str(&g.uuid),
        json_str(&g.pci_bus_id),
        g.memory_total,
        g.memory_free,
        g.memory_used,
        json_str(g.mig.as_str())
    );
    match g.compute_capability {
        Some((a, b)) => {
            let _ = write!(s, ",\"compute_capability\":[{a},{b}]");
        }
        None => s.push_str(",\"compute_capability\":null"),
    }
    if let Some(inv) = inv {
        let _ = write!(
            s,
            ",\"driver\":{},\"cuda_version\":{}",
            json_str(&inv.driver_version),
            inv.cuda_version
        );
    }
    s.push_str(",\"mig_instances\":[");
    for (i, m) in g.mig_instances.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(
            s,
            "{{\"index\":{},\"name\":{},\"uuid\":{},\"memory_total\":{},\"memory_free\":{}}}",
            m.index,
            json_str(&m.name),
            json_str(&m.uuid),
            m.memory_total,
            m.memory_free
        );
    }
    s.push_str("]}");
    s
}
