//! Choosing a backend and starting a host on it.

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use std::path::PathBuf;
use tasklet_runtime::{BackendKind, Host, HostConfig, Policy, WorkerCommand};

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// CUDA when a device is usable, else the emulator.
    Auto,
    /// The PTX emulator on the CPU.
    Emu,
    /// An NVIDIA GPU through the CUDA driver.
    Cuda,
}

/// Options every command that starts a host shares.
#[derive(clap::Args, Debug)]
pub struct HostArgs {
    /// Which backend runs the GPU work.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Node policy file (TOML) capping what tasklets get; sensible one-machine defaults without it.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
}

impl HostArgs {
    /// Resolves `auto`, saying on stderr which backend it chose and why.
    pub fn resolve(&self, quiet: bool) -> Result<BackendKind> {
        match self.backend {
            BackendChoice::Emu => Ok(BackendKind::Emu),
            BackendChoice::Cuda => bail!(
                "the cuda backend is not part of this build yet; use --backend emu (or auto) to run on the PTX emulator"
            ),
            BackendChoice::Auto => {
                if !quiet {
                    eprintln!("tasklet: backend emu (PTX emulator on the CPU; this build has no CUDA backend yet)");
                }
                Ok(BackendKind::Emu)
            }
        }
    }

    pub fn start_host(&self, quiet: bool) -> Result<Host> {
        let backend = self.resolve(quiet)?;
        let policy = match &self.policy {
            Some(path) => Policy::load(path)?,
            None => Policy::default(),
        };
        let program = std::env::current_exe().context("cannot find this program to start workers from")?;
        let worker = WorkerCommand { program, args: vec!["worker".into()] };
        Ok(Host::new(HostConfig { policy, worker, backend })?)
    }
}
