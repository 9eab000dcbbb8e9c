//! Choosing a backend and starting a host on it.
//!
//! `auto` starts the host on CUDA and falls back to the emulator when that fails, saying why:
//! starting the host *is* the probe (its first worker opens a CUDA context and reports the
//! device), so a usable GPU costs no extra context start. The host process itself never calls
//! CUDA: whether the driver loads, and what the device is, is found out by a worker process.

use anyhow::{anyhow, Context, Result};
use clap::ValueEnum;
use std::path::{Path, PathBuf};
use tasklet_runtime::{BackendKind, Host, HostConfig, HostError, Policy, WorkerCommand};
use tasklet_worker::WorkerError;

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
    /// Refuses `--backend` (and `--policy` unless `policy_used`) where no host of this machine
    /// serves the GPU work: with `--node` or `--nats` the node's own backend and policy decide,
    /// and a flag that silently did nothing would mislead.
    pub fn refuse_where_unused(&self, policy_used: bool) -> anyhow::Result<()> {
        if self.backend != BackendChoice::Auto {
            anyhow::bail!(
                "--backend chooses this machine's backend, and with --node or --nats the node's own serves the \
                 GPU work: leave it out (the node says which backend it has in `tasklet inventory --node`)"
            );
        }
        if !policy_used && self.policy.is_some() {
            anyhow::bail!(
                "--policy caps this machine's host, and with --node the node's own policy decides: leave it out"
            );
        }
        Ok(())
    }
}

/// A started host and, when `auto` fell back to the emulator, why CUDA was not used.
pub struct Started {
    pub host: Host,
    pub cuda_unusable: Option<String>,
}

/// This program, as a worker command (`tasklet worker …`). Started through `/proc/self/exe`
/// where there is one: that is the image this process runs even after the file at its path was
/// replaced (a rebuild or an upgrade under a running node), and a worker must be built from the
/// same source as its host (their channel refuses another version).
pub fn worker_command() -> Result<WorkerCommand> {
    let running = Path::new("/proc/self/exe");
    let program = if running.exists() {
        running.to_path_buf()
    } else {
        std::env::current_exe().context("cannot find this program to start workers from")?
    };
    Ok(WorkerCommand {
        program,
        args: vec!["worker".into()],
    })
}

/// The reason a host could not start on a backend, in the worker's own words where there are
/// some (e.g. "no CUDA driver found (libcuda.so.1 not loadable)").
fn why(e: &HostError) -> String {
    match e {
        HostError::Workers(WorkerError::Spawn(m)) => m.clone(),
        other => other.to_string(),
    }
}

pub use tasklet_runtime::config::units::rounded_size;

/// One line describing the device a host serves (the first, and how many more), for stderr.
pub fn describe(host: &Host) -> String {
    let d = host.device();
    let more = match host.devices().len() {
        1 => String::new(),
        n => format!(
            " and {} more device(s); `tasklet inventory` lists them",
            n - 1
        ),
    };
    let first = match d.backend {
        "cuda" => format!(
            "backend cuda: {} (compute {}.{}, {} lent of {}, CUDA driver {}.{})",
            d.name,
            d.compute_capability.0,
            d.compute_capability.1,
            rounded_size(d.total_memory),
            rounded_size(d.device_memory),
            d.driver_version / 1000,
            (d.driver_version % 1000) / 10
        ),
        other => format!(
            "backend {other} ({}, {})",
            d.name,
            rounded_size(d.total_memory)
        ),
    };
    first + &more
}

impl HostArgs {
    pub fn start_host(&self, quiet: bool) -> Result<Host> {
        Ok(self.start(quiet)?.host)
    }

    /// Starts a host on the chosen backend, saying on stderr (unless `quiet`) which and why.
    pub fn start(&self, quiet: bool) -> Result<Started> {
        self.start_with(self.load_policy()?, quiet)
    }

    /// `--policy`'s file read, or the default policy.
    pub fn load_policy(&self) -> Result<Policy> {
        Ok(match &self.policy {
            Some(path) => Policy::load(path)?,
            None => Policy::default(),
        })
    }

    /// [`HostArgs::start`] with the policy already read.
    pub fn start_with(&self, policy: Policy, quiet: bool) -> Result<Started> {
        let worker = worker_command()?;
        let start = |backend| {
            Host::new(HostConfig {
                policy: policy.clone(),
                worker: worker.clone(),
                backend,
            })
        };
        let say = |line: String| {
            if !quiet {
                errln!("tasklet: {line}");
            }
        };
        match self.backend {
            BackendChoice::Emu => {
                let host = start(BackendKind::Emu)?;
                say(format!("{} (chosen with --backend emu)", describe(&host)));
                Ok(Started { host, cuda_unusable: None })
            }
            BackendChoice::Cuda => match start(BackendKind::Cuda) {
                Ok(host) => {
                    say(describe(&host));
                    Ok(Started { host, cuda_unusable: None })
                }
                Err(e) => Err(anyhow!(
                    "the cuda backend is not usable on this machine: {}; use --backend emu (or auto) to run on the PTX emulator",
                    why(&e)
                )),
            },
            BackendChoice::Auto => match start(BackendKind::Cuda) {
                Ok(host) => {
                    say(describe(&host));
                    Ok(Started { host, cuda_unusable: None })
                }
                Err(e) => {
                    let why = why(&e);
                    say(format!("backend emu: {why} (the PTX emulator runs the kernels on the CPU)"));
                    let host = start(BackendKind::Emu)?;
                    Ok(Started { host, cuda_unusable: Some(why) })
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::rounded_size;

    #[test]
    fn sizes_round_to_one_decimal_of_the_largest_unit() {
        assert_eq!(rounded_size(512), "512 B");
        assert_eq!(rounded_size(256 << 20), "256 MiB");
        assert_eq!(rounded_size(1536), "1.5 KiB");
        assert_eq!(rounded_size((140 << 30) + (400 << 20)), "140.4 GiB");
    }
}
