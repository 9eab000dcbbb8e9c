//! `tasklet run`: build if needed, run once, output to stdout; the GPU work on this machine or,
//! with `--node`, on a node.

use crate::backend::HostArgs;
use crate::cluster::{RegistryCacheArgs, RegistrySource};
use crate::compile_cache::{self, CompileCache, CompileCacheArgs, Loaded};
use crate::placement::{place_keeping_rest, Tried};
use crate::remote::{check_node_meets, PlacedArgs};
use crate::source::{read_input, Source};
use anyhow::{bail, Result};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tasklet_cluster::Requirement;
use tasklet_remote::RemoteGpu;
use tasklet_runtime::config::Grant;
use tasklet_runtime::gpu::{LocalGpu, UsageStats};
use tasklet_runtime::{Manifest, Policy, RunError, Runner};

/// Run a tasklet once: input from --input or stdin (empty when stdin is a terminal), output to stdout.
///
/// Given a tasklet folder, its component is built with cargo first when it is missing or older than
/// its sources. Given a .wasm, the tasklet.toml beside it is used if there is one.
///
/// With --node the tasklet still runs here, unchanged, and its GPU operations go to the node,
/// which grants the manifest's [gpu] request (cut down by --policy's caps, when given) as far as
/// its policy allows the tenant. With --nats
/// the node is chosen from the cluster as `deploy run` chooses it (--requires, default any
/// device); a node that cannot be reached or refuses the grant for capacity is left for the
/// next. When the node is lost mid-run, a one-shot GPU call (the SDK's GpuCall) not yet answered
/// runs again on the next node and the run goes on there, but a session on it fails
/// `disconnected`, never moved.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tasklet run tasklets/iota <<< 10\n  \
    tasklet run --node localhost tasklets/iota <<< 10            the GPU work on the node (tenant dev, ./certs)\n  \
    tasklet run --node gpu1:5701 --certs ~/certs --tenant team-7 tasklets/scale --input nums.txt\n  \
    tasklet run --nats nats://127.0.0.1:4222 --requires gpu:vram=1GiB tasklets/iota <<< 10\n  \
    tasklet run --stats tasklets/iota <<< 10                      GPU time, launches, bytes moved, peak VRAM on stderr\n\n\
    Exit status: 0 ok, 1 the tasklet failed, 2 it could not be run (bad manifest, no node, refused), \
    3 it trapped or ran out of time, 141 the output's reader went away (| head).")]
pub struct RunArgs {
    /// A tasklet folder (with tasklet.toml) or a component (.wasm).
    pub tasklet: PathBuf,
    /// Read the input from FILE instead of stdin.
    #[arg(long, short, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// After the run, print one line to stderr: `stats: gpu-time=S launches=N bytes-written=B
    /// bytes-read=B peak-vram=B wall-time=S compiled-cache=hit|miss|discarded|off load-time=S`
    /// (seconds and bytes; GPU time as the device measured it, all the run's leases together;
    /// load-time: compiling the component, or loading it from the compiled cache). For runs
    /// whose GPU is on this machine.
    #[arg(long)]
    pub stats: bool,
    #[command(flatten)]
    pub compile: CompileCacheArgs,
    #[command(flatten)]
    pub host: HostArgs,
    #[command(flatten)]
    pub remote: PlacedArgs,
    #[command(flatten)]
    pub registry_cache: RegistryCacheArgs,
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    log_if_asked();
    let Source { manifest, .. } = Source::load(&args.tasklet)?;
    let input = read_input(args.input.as_ref())?;
    let nats = args.remote.nats.config("tasklet run");
    if args.stats && (args.remote.remote.node.is_some() || nats.is_some()) {
        bail!(
            "--stats reports GPU work done on this machine; with --node or --nats the node counts it \
             (its gpu_time_seconds_total metric, by tenant)"
        );
    }
    if args.remote.remote.node.is_some() || nats.is_some() {
        // The tasklet runs here under `--policy`'s grant; its GPU work is the node's.
        args.host.refuse_where_unused(true)?;
    }
    let mut usage = None;
    let mut loaded = None;
    let started = Instant::now();
    let result = match (&args.remote.remote.node, nats) {
        (Some(_), Some(_)) => bail!("give --node (one node) or --nats (the cluster), not both"),
        (Some(addr), None) => {
            let grant = local_grant(&args, &manifest)?;
            let requirement: Option<Requirement> = match &args.remote.requires {
                Some(text) => Some(text.parse()?),
                None => None,
            };
            let mut client = args.remote.remote.connect(addr)?;
            if let Some(requirement) = &requirement {
                check_node_meets(&mut client, addr, requirement)?;
            }
            let gpu = remote_gpu(&args, client, &manifest, &grant)?;
            run_with(&args, gpu, manifest, grant, &input)?
        }
        (None, Some(nats)) => {
            let grant = local_grant(&args, &manifest)?;
            let requirement = match &args.remote.requires {
                Some(text) => text.parse()?,
                None => Default::default(),
            };
            let registry = RegistrySource::new(nats, &args.registry_cache)?;
            let (gpu, placed, rest) = place_keeping_rest(
                &args.remote.remote,
                &registry,
                &requirement,
                args.remote.tries,
                |client, _| {
                    // The node was chosen for a device of this compute capability: its leases
                    // go to such a device of the node too.
                    let requires = tasklet_wire::LeaseRequirements {
                        min_compute_capability: requirement
                            .min_compute_capability
                            .map(|cc| (cc.major, cc.minor)),
                        ..Default::default()
                    };
                    remote_gpu(&args, client, &manifest, &grant)
                        .map(|gpu| gpu.with_requirements(requires))
                        .map_err(Tried::from)
                },
            )?;
            errln!("tasklet: GPU work on {} ({})", placed.name, placed.addr);
            let gpu = gpu.with_fallback(Box::new(rest));
            run_with(&args, gpu, manifest, grant, &input)?
        }
        (None, None) => {
            if let Some(requires) = &args.remote.requires {
                bail!(
                    "--requires {requires} chooses or checks the node the GPU work goes to: give it with --node ADDR \
                     or --nats URL (a run on this machine uses its own devices)"
                );
            }
            let host = args.host.start_host(false)?;
            let grant = host.policy().grant(&manifest);
            let cache = CompileCache::open(&args.compile, host.runner())?;
            let (tasklet, how) =
                compile_cache::load(host.runner(), cache.as_ref(), manifest, grant)?;
            loaded = Some(how);
            // The run's GPU service is made here, not by `Host::run`, to keep a handle on what it
            // used: its leases are all ended (and their last GPU time charged) when the run ends.
            let gpu = LocalGpu::new(tasklet.grant, Arc::clone(host.leases()));
            let handle = gpu.usage();
            let run_started = Instant::now();
            let result = host.runner().run(&tasklet, &input, Box::new(gpu));
            usage = Some((handle.stats(), run_started.elapsed()));
            result
        }
    };
    let wall_time = started.elapsed();
    let code = match result {
        // Stopped by a signal, the tasklet ended because its connections were closed: what it
        // wrote then is no result (a local run the signal ends prints nothing), and the one
        // line that says why it stopped is the interruption's, which follows.
        Ok(_) if crate::interrupt::interrupted() => Ok(ExitCode::SUCCESS),
        Ok(output) => write_output(&output).map(|()| ExitCode::SUCCESS),
        Err(e) => {
            // Interrupted, the run failed because its connections were closed: the one line
            // that says so is the interruption's, which follows.
            if !crate::interrupt::interrupted() {
                errln!("error: {e}");
            }
            Ok(ExitCode::from(match e {
                RunError::Failed(_) => 1,
                _ => 3,
            }))
        }
    };
    // The stats are on stderr: a reader of stdout that went away does not lose them.
    if args.stats {
        let (stats, run_time) = usage.unwrap_or((UsageStats::default(), wall_time));
        errln!("{}", stats_line(&stats, run_time, loaded.as_ref()));
    }
    code
}

/// `--stats`' line: one `key=value` per figure, in seconds and bytes, for people and scripts
/// alike (`wall-time` is the run's, from instantiation to its end; `load-time` is before it).
fn stats_line(s: &UsageStats, wall_time: Duration, loaded: Option<&Loaded>) -> String {
    let mut line = format!(
        "stats: gpu-time={:.6}s launches={} bytes-written={} bytes-read={} peak-vram={} wall-time={:.6}s",
        s.gpu_time.as_secs_f64(),
        s.launches,
        s.bytes_written,
        s.bytes_read,
        s.peak_vram,
        wall_time.as_secs_f64()
    );
    if let Some(loaded) = loaded {
        line += &format!(
            " compiled-cache={} load-time={:.6}s",
            loaded.kind.as_str(),
            loaded.took.as_secs_f64()
        );
    }
    line
}

/// Log lines (the compiled cache's hits and misses, among others) on stderr when RUST_LOG asks
/// for them (`RUST_LOG=info`); none otherwise, so that stderr stays the tasklet's and the run's.
fn log_if_asked() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init();
    }
}

/// Writes a run's output to stdout.
pub fn write_output(output: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(output)
        .and_then(|_| out.flush())
        .map_err(crate::output_failed)
}

/// What `--policy` (else the default policy) grants the tasklet on this machine: with --node or
/// --nats its limits, and the GPU caps the node is asked for (which it narrows further to the
/// tenant's), as a local run would have them.
fn local_grant(args: &RunArgs, manifest: &Manifest) -> Result<Grant> {
    let policy = match &args.host.policy {
        Some(path) => Policy::load(path)?,
        None => Policy::default(),
    };
    Ok(policy.grant(manifest))
}

/// The GPU service on `client`'s node for a run here: with --policy the node is asked for that
/// policy's grant (`grant`: its rights and caps kept, as a run here would have them); without,
/// for the manifest's, which the node's policy for the tenant alone cuts down (this machine's
/// defaults are for its own devices).
fn remote_gpu(
    args: &RunArgs,
    client: tasklet_remote::NodeClient,
    manifest: &Manifest,
    grant: &Grant,
) -> Result<RemoteGpu, tasklet_remote::ClientError> {
    match &args.host.policy {
        Some(_) => RemoteGpu::for_grant(client, grant),
        None => RemoteGpu::for_manifest(client, manifest),
    }
}

/// Runs the tasklet here under `grant` (this machine's policy's, for the manifest), its GPU work
/// on the node `gpu` is connected to (which asked the node for the same grant).
fn run_with(
    args: &RunArgs,
    gpu: RemoteGpu,
    manifest: Manifest,
    grant: Grant,
    input: &[u8],
) -> Result<Result<Vec<u8>, RunError>> {
    let runner = Runner::new()?;
    let cache = CompileCache::open(&args.compile, &runner)?;
    let (tasklet, _) = compile_cache::load(&runner, cache.as_ref(), manifest, grant)?;
    Ok(runner.run(&tasklet, input, Box::new(gpu)))
}
