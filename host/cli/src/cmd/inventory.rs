//! `tasklet inventory`: the devices this node lends.

use crate::backend::HostArgs;
use anyhow::Result;
use std::process::ExitCode;
use tasklet_runtime::config::units::format_size;

/// List the devices this node lends to tasklets.
#[derive(clap::Args, Debug)]
pub struct InventoryArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub host: HostArgs,
}

pub fn run(args: InventoryArgs) -> Result<ExitCode> {
    let host = args.host.start_host(args.json)?;
    let d = host.device();
    if args.json {
        println!(
            "[{{\"index\":{},\"name\":{:?},\"backend\":{:?},\"total_memory\":{},\"free_memory\":{},\"compute_capability\":[{},{}]}}]",
            d.index, d.name, d.backend, d.total_memory, host.free_memory(), d.compute_capability.0, d.compute_capability.1
        );
    } else {
        println!("{:<6} {:<8} {:<12} {:<12} {:<6} NAME", "INDEX", "BACKEND", "MEMORY", "FREE", "CC");
        println!(
            "{:<6} {:<8} {:<12} {:<12} {:<6} {}",
            d.index,
            d.backend,
            format_size(d.total_memory),
            format_size(host.free_memory()),
            format!("{}.{}", d.compute_capability.0, d.compute_capability.1),
            d.name
        );
    }
    Ok(ExitCode::SUCCESS)
}
