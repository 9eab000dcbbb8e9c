//! `tasklet run`: build if needed, run once, output to stdout.

use crate::backend::HostArgs;
use crate::build;
use anyhow::{Context, Result};
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tasklet_runtime::config::MANIFEST_FILE;
use tasklet_runtime::{Manifest, RunError};

/// Run a tasklet once: input from --input or stdin (empty when stdin is a terminal), output to stdout.
///
/// Given a tasklet folder, its component is built with cargo first when it is missing or older than
/// its sources. Given a .wasm, the tasklet.toml beside it is used if there is one.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// A tasklet folder (with tasklet.toml) or a component (.wasm).
    pub tasklet: PathBuf,
    /// Read the input from FILE instead of stdin.
    #[arg(long, short, value_name = "FILE")]
    pub input: Option<PathBuf>,
    #[command(flatten)]
    pub host: HostArgs,
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    let manifest = manifest_for(&args.tasklet)?;
    if args.tasklet.is_dir() {
        if let Some(why) = build::staleness(&args.tasklet, &manifest.component) {
            eprintln!("tasklet: building {} with cargo ({why})", manifest.name);
            build::build(&args.tasklet)?;
        }
    }
    let input = match &args.input {
        Some(path) => {
            std::fs::read(path).with_context(|| format!("cannot read input {}", path.display()))?
        }
        // A terminal on stdin would wait for an EOF nobody means to type: run on empty input.
        None if std::io::stdin().is_terminal() => Vec::new(),
        None => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .context("cannot read stdin")?;
            buf
        }
    };
    let host = args.host.start_host(false)?;
    let tasklet = host.load(manifest)?;
    match host.run(&tasklet, &input) {
        Ok(output) => {
            let mut out = std::io::stdout().lock();
            out.write_all(&output)
                .and_then(|_| out.flush())
                .context("cannot write output")?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(match e {
                RunError::Failed(_) => 1,
                _ => 3,
            }))
        }
    }
}

/// The manifest of a folder, or of a component: its neighbour, else one granting the policy's
/// defaults for a single lease.
fn manifest_for(path: &Path) -> Result<Manifest> {
    if path.is_dir() || path.file_name().is_some_and(|n| n == MANIFEST_FILE) {
        return Ok(Manifest::load(path)?);
    }
    let beside = path.with_file_name(MANIFEST_FILE);
    if beside.exists() {
        let mut m = Manifest::load(&beside)?;
        m.component = path.to_path_buf();
        return Ok(m);
    }
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "tasklet".into());
    eprintln!("tasklet: no {MANIFEST_FILE} beside {}; granting one lease of up to 256MiB for 60s with every right", path.display());
    let text = format!(
        "name = {name:?}\ncomponent = {:?}\n[gpu]\nmax-vram = \"256MiB\"\nmax-leases = 1\nmax-lease-secs = \"60s\"\nrights = [\"alloc\", \"write\", \"read\", \"load\", \"launch\"]\n",
        path.display().to_string()
    );
    Manifest::parse(&text, Path::new(".")).map_err(|(_, m)| anyhow::anyhow!(m))
}
