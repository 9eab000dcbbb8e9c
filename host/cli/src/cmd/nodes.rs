//! `tasklet nodes`: the cluster's live nodes, as the registry holds them.

use crate::backend::rounded_size;
use crate::cluster::{live_nodes, NatsArgs};
use anyhow::{anyhow, Result};
use std::process::ExitCode;
use tasklet_cluster::LiveNode;

/// List the nodes registered in the cluster: their devices, free VRAM, load, and the age of
/// their last heartbeat.
///
/// A node is listed while its record is fresh: it rewrites it every 2 s, and one that stops
/// (killed, cut off from NATS) is gone within 10 s. A draining node is listed, marked so; it
/// is never chosen for new work.
#[derive(clap::Args, Debug)]
#[command(mut_arg("nats", |arg| arg.required(true)))]
#[command(after_help = "Examples:\n  \
    tasklet nodes --nats nats://127.0.0.1:4222\n  \
    tasklet nodes --nats tls://nats.example:4222 --nats-ca ca.pem --nats-creds user.creds --json")]
pub struct NodesArgs {
    #[command(flatten)]
    pub nats: NatsArgs,
    /// Print JSON: an array of the nodes' records (name, address, cert_sha256, version,
    /// devices, load, draining, heartbeat_unix_ms) each with "age_ms", its heartbeat's age.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: NodesArgs) -> Result<ExitCode> {
    let config = args
        .nats
        .config("tasklet nodes")
        .ok_or_else(|| anyhow!("tasklet nodes needs the cluster: --nats nats://HOST:PORT"))?;
    let nodes = live_nodes(&config)?;
    if args.json {
        let records = nodes
            .iter()
            .map(|node| {
                let mut value = serde_json::to_value(&node.record)?;
                if let Some(object) = value.as_object_mut() {
                    object.insert("age_ms".into(), (node.age.as_millis() as u64).into());
                }
                Ok(value)
            })
            .collect::<Result<Vec<_>, serde_json::Error>>()?;
        outln!("{}", serde_json::Value::Array(records));
    } else if nodes.is_empty() {
        outln!("no nodes registered at {}", config.display_url());
    } else {
        out!("{}", table(&nodes));
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per device, the node's columns on its first.
fn table(nodes: &[LiveNode]) -> String {
    let mut rows = vec![[
        "NAME", "ADDRESS", "DEVICE", "FREE", "LEASES", "LOAD", "AGE", "STATE",
    ]
    .map(String::from)];
    for node in nodes {
        let r = &node.record;
        let load = format!("{} conn, {} runs", r.load.connections, r.load.runs);
        let age = format!("{:.1}s", node.age.as_secs_f64());
        let state = if r.draining { "draining" } else { "serving" };
        if r.devices.is_empty() {
            rows.push([
                r.name.to_string(),
                r.address.clone(),
                "-".into(),
                "-".into(),
                "0".into(),
                load,
                age,
                state.into(),
            ]);
            continue;
        }
        for (i, d) in r.devices.iter().enumerate() {
            let first = i == 0;
            let keep = |s: &str| if first { s.to_owned() } else { String::new() };
            rows.push([
                keep(r.name.as_str()),
                keep(&r.address),
                format!(
                    "{} {} ({}, cc {})",
                    d.index, d.name, d.backend, d.compute_capability
                ),
                format!(
                    "{} of {}",
                    rounded_size(d.free_vram),
                    rounded_size(d.total_vram)
                ),
                d.leases.to_string(),
                keep(&load),
                keep(&age),
                keep(state),
            ]);
        }
    }
    let widths: Vec<usize> = (0..8)
        .map(|c| {
            rows.iter()
                .map(|row| row[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}
