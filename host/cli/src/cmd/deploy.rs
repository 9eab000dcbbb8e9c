//! `tasklet deploy`: push a tasklet to a node, and run it there (the wasm and its GPU work both
//! on the node).

use crate::cluster::{NatsArgs, RegistryCacheArgs, RegistrySource};
use crate::cmd::run::write_output;
use crate::json::json_str;
use crate::placement::{place, Placed, Tried};
use crate::remote::{check_node_meets, PlacedArgs, RemoteArgs};
use crate::source::{read_input, Source};
use anyhow::{bail, Context as _, Result};
use base64::Engine as _;
use clap::Subcommand;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tasklet_cluster::{Cluster, ClusterDeployments, PublishedDeployment, Requirement};
use tasklet_remote::{deployment_digest, ClientError, DeployExit, DeployRun, Digest, NodeClient};
use tasklet_tls::Tenant;

/// Push tasklets to a node, and run them there.
///
/// A deployment is a manifest and a component, named by a digest of both: pushing the same
/// tasklet again is a no-op, and the digest that `push` prints is what `run` takes. A tenant
/// runs only the deployments it pushed itself. The node grants a run what the manifest asks
/// for, as far as its policy allows the tenant, and refuses pushes and runs of a tenant whose
/// policy says `deploy = false`.
#[derive(clap::Args, Debug)]
pub struct DeployArgs {
    #[command(subcommand)]
    pub command: DeployCommand,
}

#[derive(Subcommand, Debug)]
pub enum DeployCommand {
    Push(PushArgs),
    Run(RunArgs),
}

/// Upload a tasklet (its manifest and component) to a node, or to the cluster; prints its
/// digest.
///
/// Nothing is uploaded when the node (or the cluster) has it already. A node checks the
/// manifest and compiles the component before it stores anything.
///
/// With --nats the tasklet goes into the cluster's object store, by digest, recorded as pushed
/// by --tenant: `deploy run DIGEST --nats URL` then runs it on whichever node placement picks,
/// which fetches it from there, verifies it and keeps it in its own store. Only that tenant
/// can run it, as with a push to one node.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tasklet deploy push tasklets/iota --node localhost\n  \
    tasklet deploy push tasklets/scale --node gpu1 --certs ~/certs --tenant team-7 --json\n  \
    tasklet deploy push tasklets/iota --nats nats://127.0.0.1:4222 --tenant team-7")]
pub struct PushArgs {
    /// A tasklet folder (with tasklet.toml; built with cargo first if need be) or a component (.wasm).
    pub tasklet: PathBuf,
    #[command(flatten)]
    pub target: RemoteArgs,
    #[command(flatten)]
    pub nats: NatsArgs,
    /// Print JSON: {"node", "digest", "already_present", "uploaded"} ("node" is null with
    /// --nats).
    #[arg(long)]
    pub json: bool,
}

/// Run a deployed tasklet on a node, or on a node of the cluster: input from --input or stdin,
/// output to stdout.
///
/// Given a tasklet (folder, tasklet.toml or .wasm), its digest is computed here and the tasklet
/// pushed first if the node does not have it; given a digest, the node must have it already,
/// or, for a node in the cluster, the cluster must (`deploy push --nats` by the same tenant):
/// the node then fetches it from the cluster's object store before running it.
///
/// With --nats the node is chosen from the cluster's registry: among the live nodes not
/// draining with a device that meets --requires (default: any device), the one with the most
/// free VRAM on that device (then fewest leases, least load, name). A node that cannot be
/// reached, or refuses for capacity or because it drains before the run starts, is left for
/// the next (at most --tries). A run whose node is lost before it answers (it died, or stopped
/// answering) is run again on the next node: a tasklet's only effect is its output. Once a
/// node answered, its answer is final.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tasklet deploy run tasklets/iota --node localhost <<< 10\n  \
    tasklet deploy run tasklets/iota --nats nats://127.0.0.1:4222 --requires gpu:vram=1GiB <<< 10\n  \
    tasklet deploy run 3f2a…(64 hex digits) --node gpu1 --requires gpu --json < input.txt\n\n\
    Exit status: 0 ok, 1 the tasklet failed, 2 it could not be run (no node, refused, not found), \
    3 it trapped, ran out of time or could not be instantiated.")]
pub struct RunArgs {
    /// A tasklet folder, its tasklet.toml, a component (.wasm), or a deployment's digest.
    #[arg(value_name = "TASKLET|DIGEST")]
    pub tasklet: String,
    #[command(flatten)]
    pub target: PlacedArgs,
    #[command(flatten)]
    pub registry_cache: RegistryCacheArgs,
    /// Read the input from FILE instead of stdin.
    #[arg(long, short, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Print JSON: {"run_id", "node", "addr", "digest", "status", "exit_code", "elapsed_us",
    /// "output" (base64), "message"}; "node" and "addr" name the node that ran it; "exit_code"
    /// is this command's exit status, the same as without --json.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: DeployArgs) -> Result<ExitCode> {
    match args.command {
        DeployCommand::Push(args) => push(args),
        DeployCommand::Run(args) => run_deployed(args),
    }
}

fn push(args: PushArgs) -> Result<ExitCode> {
    // Where to, before a tasklet is built for it.
    let to = Where::of(
        &args.target.node,
        args.nats.config("tasklet deploy push"),
        "deploy push needs where to: --node ADDR, or --nats URL",
    )?;
    let source = Source::load(&args.tasklet)?;
    let component = source.component()?;
    let (node, pushed) = match to {
        Where::Node(addr) => {
            let mut client = args.target.connect(addr)?;
            let pushed = ensure_pushed(&mut client, &source, &component)?;
            (Some((client.node_name().to_owned(), addr.clone())), pushed)
        }
        Where::Cluster(nats) => {
            let tenant = Tenant::new(&args.target.tenant)?;
            let published = publish(&nats, tenant.as_str(), source.text.as_bytes(), &component)?;
            let pushed = Ensured {
                digest: Digest(*published.digest.as_bytes()),
                already_present: published.already_present,
                uploaded: published.uploaded > 0,
            };
            (None, pushed)
        }
    };
    if args.json {
        let node = node
            .as_ref()
            .map_or_else(|| "null".to_owned(), |(name, _)| json_str(name));
        // Present *before* this push: one that had to upload (the node's copy was missing
        // when asked) was not, whatever the node said once the upload ended.
        outln!(
            "{{\"node\":{node},\"digest\":\"{}\",\"already_present\":{},\"uploaded\":{}}}",
            pushed.digest,
            pushed.already_present && !pushed.uploaded,
            pushed.uploaded
        );
    } else {
        let place = match &node {
            Some((_, addr)) => addr.clone(),
            None => format!("the cluster, for tenant {}", args.target.tenant),
        };
        errln!(
            "tasklet: {} {} on {place}",
            source.manifest.name,
            match (pushed.already_present, pushed.uploaded) {
                (true, false) => "was already deployed",
                // The node did not have it for this tenant when asked, and had it when the
                // upload ended: another push of the same finished first. (A push that put
                // back a copy the node had lost is no different from a first one.)
                (true, true) => "uploaded, though another push of it finished first",
                (false, _) => "deployed",
            },
        );
        outln!("{}", pushed.digest);
    }
    Ok(ExitCode::SUCCESS)
}

/// Puts the deployment into the cluster's object store for `tenant`.
fn publish(
    nats: &tasklet_cluster::NatsConfig,
    tenant: &str,
    manifest: &[u8],
    component: &[u8],
) -> Result<PublishedDeployment> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the client's runtime")?;
    Ok(runtime.block_on(async {
        let cluster = Cluster::connect(nats).await?;
        ClusterDeployments::open(&cluster)
            .await?
            .publish(tenant, manifest, component)
            .await
    })?)
}

/// What making sure the node has a deployment did.
struct Ensured {
    digest: Digest,
    already_present: bool,
    uploaded: bool,
}

/// Pushes the tasklet unless the node has it for this tenant already.
fn ensure_pushed(client: &mut NodeClient, source: &Source, component: &[u8]) -> Result<Ensured> {
    let manifest = source.text.as_bytes();
    let digest = deployment_digest(manifest, component);
    if client.deploy_has(&digest)? {
        return Ok(Ensured {
            digest,
            already_present: true,
            uploaded: false,
        });
    }
    let pushed = client.deploy_push(manifest, component)?;
    if pushed.digest != digest {
        // The node's digest is the one that names the deployment there; a client computing
        // another would only ever upload again, so say so.
        errln!(
            "tasklet: warning: the node names this deployment {} where this client computed {digest}",
            pushed.digest
        );
    }
    Ok(Ensured {
        digest: pushed.digest,
        already_present: pushed.already_present,
        uploaded: true,
    })
}

/// Where a deploy command goes: one node, or the cluster.
enum Where<'a> {
    Node(&'a String),
    Cluster(tasklet_cluster::NatsConfig),
}

impl<'a> Where<'a> {
    /// From `--node` and `--nats`: one of them; `neither` says what to give when none is.
    fn of(
        node: &'a Option<String>,
        nats: Option<tasklet_cluster::NatsConfig>,
        neither: &str,
    ) -> Result<Self> {
        match (node, nats) {
            (Some(_), Some(_)) => {
                bail!("give --node (one node) or --nats (the cluster), not both")
            }
            (None, None) => bail!("{neither}"),
            (Some(addr), None) => Ok(Where::Node(addr)),
            (None, Some(nats)) => Ok(Where::Cluster(nats)),
        }
    }
}

fn run_deployed(args: RunArgs) -> Result<ExitCode> {
    let target = &args.target;
    // Where to, and what is required there, before a tasklet is built for it.
    let to = Where::of(
        &target.remote.node,
        target.nats.config("tasklet deploy run"),
        "deploy run needs where to run: --node ADDR, or --nats URL [--requires gpu…]",
    )?;
    let requirement: Option<Requirement> = match &target.requires {
        Some(text) => Some(text.parse()?),
        None => None,
    };
    // A path that exists is a tasklet, even one whose name looks like a digest.
    let path = Path::new(&args.tasklet);
    let named = if path.exists() {
        let source = Source::load(path)?;
        let component = source.component()?;
        Named::Tasklet(source, component)
    } else if let Some(digest) = Digest::from_hex(args.tasklet.as_bytes()) {
        Named::Digest(digest)
    } else {
        bail!(
            "{:?} is neither a tasklet (no such file or folder) nor a deployment's digest (64 lowercase hex digits)",
            args.tasklet
        );
    };
    let input = read_input(args.input.as_ref())?;
    let (run, digest, placed) = match to {
        Where::Node(addr) => {
            let mut client = target.remote.connect(addr)?;
            if let Some(requirement) = &requirement {
                check_node_meets(&mut client, addr, requirement)?;
            }
            let placed = Placed {
                name: client.node_name().to_owned(),
                addr: addr.clone(),
            };
            let (run, digest) = push_and_run(&mut client, &named, &input, &placed).map_err(
                |tried| match tried {
                    Tried::Refused(err) | Tried::Lost(err) => err.into(),
                    Tried::Final(err) => err,
                },
            )?;
            (run, digest, placed)
        }
        Where::Cluster(nats) => {
            let requirement = requirement.unwrap_or_default();
            let registry = RegistrySource::new(nats, &args.registry_cache)?;
            let ((run, digest), placed) = place(
                &target.remote,
                &registry,
                &requirement,
                target.tries,
                |mut client, placed| push_and_run(&mut client, &named, &input, placed),
            )?;
            if !args.json {
                errln!("tasklet: ran on {} ({})", placed.name, placed.addr);
            }
            (run, digest, placed)
        }
    };
    let code = match run.exit {
        DeployExit::Ok => 0,
        DeployExit::Failed => 1,
        _ => 3,
    };
    if args.json {
        let message = run
            .message()
            .map_or_else(|| "null".to_owned(), |m| json_str(&m));
        let output = match run.exit {
            DeployExit::Ok => base64::engine::general_purpose::STANDARD.encode(&run.output),
            _ => String::new(),
        };
        outln!(
            "{{\"run_id\":\"{:032x}\",\"node\":{},\"addr\":{},\"digest\":\"{digest}\",\"status\":\"{}\",\"exit_code\":{},\"elapsed_us\":{},\"output\":\"{output}\",\"message\":{message}}}",
            run.run_id,
            json_str(&placed.name),
            json_str(&placed.addr),
            run.exit.as_str(),
            code,
            run.elapsed.as_micros(),
        );
    } else {
        match run.message() {
            None => write_output(&run.output)?,
            Some(message) => errln!("error: {message}"),
        }
    }
    Ok(ExitCode::from(code))
}

/// Pushes the tasklet if the node lacks it, then runs it there. A refusal of the push or of
/// the run for capacity or a drain, or a connection lost before the run was asked for, leaves
/// the node for the next.
fn push_and_run(
    client: &mut NodeClient,
    named: &Named,
    input: &[u8],
    placed: &Placed,
) -> Result<(DeployRun, Digest), Tried> {
    let digest = match named {
        Named::Digest(digest) => *digest,
        Named::Tasklet(source, component) => {
            let ensured = ensure_pushed(client, source, component).map_err(|err| {
                match err.downcast::<ClientError>() {
                    // Nothing ran yet: a connection lost during the push is as good as none.
                    Ok(lost @ ClientError::Disconnected(_)) => Tried::Refused(lost),
                    Ok(other) => Tried::from(other),
                    Err(other) => Tried::Final(other),
                }
            })?;
            if ensured.uploaded {
                errln!(
                    "tasklet: pushed {} to {} ({})",
                    source.manifest.name,
                    placed.addr,
                    ensured.digest
                );
            }
            ensured.digest
        }
    };
    let run = client
        .deploy_run(&digest, input)
        .map_err(Tried::stateless)?;
    Ok((run, digest))
}

/// What `deploy run` was given.
enum Named {
    /// A tasklet here, and its component's bytes.
    Tasklet(Source, Vec<u8>),
    /// A deployment on the node.
    Digest(Digest),
}
