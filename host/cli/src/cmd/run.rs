//! `tasklet run`: build if needed, run once, output to stdout; the GPU work on this machine or,
//! with `--node`, on a node.

use crate::backend::HostArgs;
use crate::build;
use crate::remote::RemoteArgs;
use anyhow::{Context, Result};
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tasklet_remote::RemoteGpu;
use tasklet_runtime::config::MANIFEST_FILE;
use tasklet_runtime::{Manifest, Policy, RunError, Runner};

/// Run a tasklet once: input from --input or stdin (empty when stdin is a terminal), output to stdout.
///
/// Given a tasklet folder, its component is built with cargo first when it is missing or older than
/// its sources. Given a .wasm, the tasklet.toml beside it is used if there is one.
///
/// With --node the tasklet still runs here, unchanged, and its GPU operations go to the node,
/// which grants the manifest's [gpu] request as far as its policy allows the tenant.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tasklet run tasklets/iota <<< 10\n  \
    tasklet run --node localhost tasklets/iota <<< 10            the GPU work on the node (tenant dev, ./certs)\n  \
    tasklet run --node gpu1:5701 --certs ~/certs --tenant team-7 tasklets/scale --input nums.txt\n\n\
    Exit status: 0 ok, 1 the tasklet failed, 2 it could not be run (bad manifest, no node, refused), \
    3 it trapped or ran out of time.")]
pub struct RunArgs {
    /// A tasklet folder (with tasklet.toml) or a component (.wasm).
    pub tasklet: PathBuf,
    /// Read the input from FILE instead of stdin.
    #[arg(long, short, value_name = "FILE")]
    pub input: Option<PathBuf>,
    #[command(flatten)]
    pub host: HostArgs,
    #[command(flatten)]
    pub remote: RemoteArgs,
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
    let result = match &args.remote.node {
        Some(addr) => run_remote(&args, addr, manifest, &input)?,
        None => {
            let host = args.host.start_host(false)?;
            let tasklet = host.load(manifest)?;
            host.run(&tasklet, &input)
        }
    };
    match result {
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

/// Runs the tasklet here with its GPU on the node at `addr`. The wasm's own limits (memory, wall
/// time) are this machine's policy's; the GPU grant is the node's.
fn run_remote(
    args: &RunArgs,
    addr: &str,
    manifest: Manifest,
    input: &[u8],
) -> Result<Result<Vec<u8>, RunError>> {
    let policy = match &args.host.policy {
        Some(path) => Policy::load(path)?,
        None => Policy::default(),
    };
    let client = args.remote.connect(addr)?;
    let gpu = RemoteGpu::for_manifest(client, &manifest)?;
    let runner = Runner::new()?;
    let grant = policy.grant(&manifest);
    let tasklet = runner.load(manifest, grant)?;
    Ok(runner.run(&tasklet, input, Box::new(gpu)))
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
