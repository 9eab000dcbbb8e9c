//! `tasklet check`: validate a manifest and show what the node would grant.

use anyhow::Result;
use std::path::PathBuf;
use std::process::ExitCode;
use tasklet_runtime::config::units::format_size;
use tasklet_runtime::{Manifest, Policy};

/// Validate a tasklet's manifest and print what this node's policy grants it.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// A tasklet folder (with tasklet.toml) or a manifest file.
    pub tasklet: PathBuf,
    /// Node policy to grant against (defaults without it).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
}

pub fn run(args: CheckArgs) -> Result<ExitCode> {
    let manifest = Manifest::load(&args.tasklet)?;
    let policy = match &args.policy {
        Some(p) => Policy::load(p)?,
        None => Policy::default(),
    };
    let grant = policy.grant(&manifest);
    println!("{}: manifest ok", manifest.name);
    println!(
        "  component     {}{}",
        manifest.component.display(),
        if manifest.component.exists() {
            ""
        } else {
            " (not built yet)"
        }
    );
    println!("  memory        {}", format_size(grant.limits.memory));
    println!("  wall time     {:?}", grant.limits.wall_time);
    if grant.gpu.max_leases == 0 {
        println!("  gpu           none (no [gpu] section)");
    } else {
        println!("  max vram      {}", format_size(grant.gpu.max_vram));
        println!("  max leases    {}", grant.gpu.max_leases);
        println!("  max lease     {:?}", grant.gpu.max_lease_time);
        println!("  rights        {}", grant.gpu.rights);
        let missing: Vec<_> = manifest
            .gpu
            .rights
            .iter()
            .filter(|r| !grant.gpu.rights.contains(*r))
            .collect();
        if !missing.is_empty() {
            let names: Vec<_> = missing.iter().map(|r| r.name()).collect();
            println!("  warning: the policy withholds {}", names.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}
