//! `tasklet node`: this machine's GPUs served to remote clients (a thin command over
//! `tasklet_node`).

use crate::backend::{describe, HostArgs};
use crate::cluster::{hostname, NatsArgs};
use anyhow::{anyhow, Context, Result};
use clap::ValueEnum;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tasklet_node::{NodeBuilder, DEFAULT_LISTEN};
use tokio::signal::unix::{signal, SignalKind};

/// Serve this machine's GPUs (or, without one, the PTX emulator) to remote clients over QUIC
/// with mutual TLS.
///
/// Clients prove their tenant with a certificate from the folder's CA; the policy's
/// [tenants.NAME] sections say what each tenant gets (with none, every certified tenant gets
/// [tasklets]; with some, unlisted tenants are refused). SIGINT or SIGTERM drains the node: new
/// leases are refused, running ones finish or expire, then it exits 0; a second signal (0.2 s
/// or more after the first) stops it at once, and it exits 1.
///
/// Deployed tasklets (`tasklet deploy`) are kept in the --store folder; --metrics serves
/// Prometheus text at http://ADDR/metrics.
///
/// With --nats the node joins a cluster: its record (name, --advertise address, certificate
/// fingerprint, devices and free VRAM, leases, load) is in the NATS registry while it serves,
/// refreshed every 2 s, marked draining on a drain and removed when it stops. Clients find it
/// with `tasklet nodes` and place work on it with `--nats URL --requires gpu…`. A node that
/// cannot reach NATS serves anyway and registers once NATS answers.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tasklet certs init certs && tasklet node --backend emu\n  \
    tasklet node --listen 0.0.0.0:5701 --certs /etc/tasklet/certs --policy /etc/tasklet/policy.toml \\\n      \
    --store /var/lib/tasklet/store --metrics 127.0.0.1:9101\n\n\
    Then, from a client: tasklet run --node HOST tasklets/iota; tasklet deploy run tasklets/iota --node HOST; \
    tasklet inventory --node HOST; curl http://127.0.0.1:9101/metrics\n\n\
    In a cluster (the node's certificate must name the host it advertises):\n  \
    tasklet certs node certs --name gpu1.example\n  \
    tasklet node --listen 0.0.0.0:5701 --advertise gpu1.example:5701 --nats nats://nats.example:4222")]
pub struct NodeArgs {
    /// The UDP address to serve on (IP[:PORT], or HOST[:PORT] resolved once at start; the port
    /// defaults to 5701, as a client's --node does).
    #[arg(long, value_name = "ADDR", default_value_t = DEFAULT_LISTEN, value_parser = listen_address)]
    pub listen: SocketAddr,
    /// The certificate folder (ca.pem, node.pem, node.key) from `tasklet certs init`.
    #[arg(long, value_name = "DIR", default_value = "certs")]
    pub certs: PathBuf,
    /// What the node calls itself to clients, and its key in the cluster registry (1 to 64 of
    /// A-Z a-z 0-9 - _ .) [default with --nats: this machine's host name]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    #[command(flatten)]
    pub nats: NatsArgs,
    /// The address clients reach this node at (HOST:PORT), as its cluster record says
    /// [default: --listen, unless that is a wildcard such as 0.0.0.0]
    #[arg(long, value_name = "HOST:PORT", requires = "nats")]
    pub advertise: Option<String>,
    /// The folder deployed tasklets are kept in (created if need be; one node's at a time, so
    /// give each node on a machine its own) [default: $XDG_STATE_HOME/tasklet/store, else
    /// ~/.local/state/tasklet/store, else ./tasklet-store]
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (plain HTTP: bind it to an address only
    /// your scraper reaches, e.g. 127.0.0.1:9101 or localhost:9101).
    #[arg(long, value_name = "ADDR", value_parser = metrics_address)]
    pub metrics: Option<SocketAddr>,
    /// How log lines are written to stderr (RUST_LOG filters them; default info, the NATS
    /// client's at warn; with json a failure to start is an ERROR line too).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub host: HostArgs,
}

/// `--listen`: an address to bind, its port 5701 unless given.
fn listen_address(text: &str) -> Result<SocketAddr, String> {
    let bracketless = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    if let Ok(ip) = bracketless.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, tasklet_wire::DEFAULT_PORT));
    }
    let (host, with_port) = match text.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => (host, text.to_owned()),
        _ => (text, format!("{text}:{}", tasklet_wire::DEFAULT_PORT)),
    };
    // Digits and dots that are no IP address (a port alone, `5701`; `1.2`) are not handed to
    // the resolver, which would read them as an address of the old inet_aton forms.
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && host.parse::<std::net::Ipv4Addr>().is_err()
    {
        return Err(format!(
            "{text} is not an address to bind (IP[:PORT] or HOST[:PORT], e.g. 0.0.0.0:5701 or \
             [::]:5701; a port alone is not one)"
        ));
    }
    bind_address(
        text,
        &with_port,
        "IP[:PORT] or HOST[:PORT], e.g. 0.0.0.0:5701 or [::]:5701",
    )
}

/// `--metrics`: an address to bind, port included.
fn metrics_address(text: &str) -> Result<SocketAddr, String> {
    bind_address(text, text, "IP:PORT or HOST:PORT, e.g. 127.0.0.1:9101")
}

/// `address` (what `given` says, a port added) as an address to bind: an IP and port, or a host
/// name and port resolved now to its first address (for `localhost`, the resolver's order:
/// `127.0.0.1` or `::1`).
fn bind_address(given: &str, address: &str, spelled: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = address.parse() {
        return Ok(addr);
    }
    use std::net::ToSocketAddrs as _;
    match address.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("{given} resolves to no address")),
        Err(e) => Err(format!(
            "{given} is not an address to bind ({spelled}): {e}"
        )),
    }
}

/// Signals this soon after the first are the same stop, not a second one: a person pressing
/// Ctrl-C twice takes longer.
const SAME_STOP: std::time::Duration = std::time::Duration::from_millis(200);

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    /// One JSON object per line.
    Json,
}

pub fn run(args: NodeArgs) -> Result<ExitCode> {
    let format = args.log_format;
    init_logs(format);
    match serve(args) {
        // In JSON, the failure is a log line like the rest (level ERROR), not a line of text
        // among them; the exit status says it as for text.
        // (Unless RUST_LOG leaves errors out: then as a line of text, not nothing.)
        Err(e) if format == LogFormat::Json && tracing::enabled!(tracing::Level::ERROR) => {
            tracing::error!("{}", crate::one_line(&e));
            Err(anyhow::Error::new(crate::ReportedInLog))
        }
        result => result,
    }
}

/// The node, from its arguments' checks to the end of its drain.
fn serve(args: NodeArgs) -> Result<ExitCode> {
    let store = args.store.clone().unwrap_or_else(default_store);
    // Arguments, the policy, the certificates, the store folder and the ports before the
    // backend: a node that cannot serve is refused before a GPU worker starts (the node checks
    // them again when built).
    let nats = args.nats.config("tasklet node");
    let name = node_name(args.name.clone(), nats.is_some())?;
    let policy = args.host.load_policy()?;
    tasklet_node::check_policy_tenants(&policy)?;
    tasklet_node::check_certs(&args.certs)?;
    tasklet_node::check_store(&store)?;
    tasklet_node::check_addresses(args.listen, args.metrics)?;
    if nats.is_some() {
        tasklet_node::check_advertise(args.listen, args.advertise.as_deref(), &args.certs)?;
    }
    let started = args.host.start_with(policy, true)?;
    tracing::info!("{}", describe(&started.host));
    if let Some(why) = &started.cuda_unusable {
        tracing::info!("CUDA not used: {why}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("tasklet-node")
        .enable_all()
        .build()
        .context("cannot start the node's runtime")?;
    let forced = Arc::new(AtomicBool::new(false));
    let forced_in = Arc::clone(&forced);
    runtime.block_on(async move {
        let mut builder = NodeBuilder::new()
            .listen(args.listen)
            .certs(&args.certs)
            .host(started.host)
            .store(store);
        if let Some(config) = nats {
            builder = builder.nats(config);
            if let Some(addr) = args.advertise {
                builder = builder.advertise(addr);
            }
        }
        if let Some(name) = name {
            builder = builder.name(name);
        }
        if let Some(addr) = args.metrics {
            builder = builder.metrics(addr);
        }
        let node = builder.build()?;
        let control = node.control();
        let mut interrupt = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
        let mut terminate = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
        let stopped_by_force = Arc::clone(&forced_in);
        tokio::spawn(async move {
            let mut first: Option<std::time::Instant> = None;
            loop {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
                match first {
                    None => {
                        first = Some(std::time::Instant::now());
                        tracing::info!("signal: draining (a second signal stops at once)");
                        control.drain();
                    }
                    // One stop sent twice: `timeout` signals its command and then its process
                    // group, the command included, and a terminal's Ctrl-C reaches the node and
                    // whatever started it alike.
                    Some(at) if at.elapsed() < SAME_STOP => {}
                    Some(_) => {
                        tracing::info!("second signal: stopping now");
                        stopped_by_force.store(true, Ordering::Release);
                        control.stop();
                    }
                }
            }
        });
        node.serve().await?;
        Ok::<_, anyhow::Error>(())
    })?;
    // A drain that ran its course is a clean stop; one cut short by a second signal is not, so
    // that whatever supervises the node can tell.
    Ok(match forced.load(Ordering::Acquire) {
        false => ExitCode::SUCCESS,
        true => ExitCode::FAILURE,
    })
}

/// The node's name: `--name`, or in a cluster this machine's host name. Either follows the
/// registry's rule, with or without a cluster, so that a name works when one is added.
fn node_name(given: Option<String>, in_cluster: bool) -> Result<Option<String>> {
    match given {
        Some(name) => {
            tasklet_cluster::NodeName::new(name.clone())
                .with_context(|| format!("--name {name:?}"))?;
            Ok(Some(name))
        }
        None if in_cluster => {
            let name = hostname().ok_or_else(|| {
                anyhow!("cannot read this machine's host name for the node's name: give one with --name")
            })?;
            tasklet_cluster::NodeName::new(name.clone()).with_context(|| {
                format!("this machine's host name {name:?} cannot be the node's name: give one with --name")
            })?;
            Ok(Some(name))
        }
        None => Ok(None),
    }
}

/// Where a node keeps deployed tasklets unless told: the user's state folder (XDG), or, with no
/// home to put it in, `./tasklet-store`.
fn default_store() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|dir| !dir.is_empty())
                .map(|home| PathBuf::from(home).join(".local/state"))
        });
    match state {
        Some(dir) => dir.join("tasklet/store"),
        None => PathBuf::from("tasklet-store"),
    }
}

fn init_logs(format: LogFormat) {
    // The NATS client logs each failed reconnection at INFO (once a second while NATS is
    // down), which the node's own lines about its registration already say once.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,async_nats=warn"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        // A log line that cannot be written (the reader of stderr went away) is dropped: said
        // on stderr, as the default does, it would panic the task that logged (the signal
        // watcher among them) and leave a node that serves nobody and cannot be stopped.
        .log_internal_errors(false);
    // Another subscriber already set is the embedding program's choice: keep it.
    let _ = match format {
        LogFormat::Text => logs.try_init(),
        LogFormat::Json => logs.json().try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::{listen_address, metrics_address};

    #[test]
    fn a_bind_address_is_an_ip_and_port_or_a_host_name_and_port() {
        assert_eq!(
            metrics_address("127.0.0.1:9101"),
            Ok("127.0.0.1:9101".parse().unwrap())
        );
        assert_eq!(
            metrics_address("[::]:5701"),
            Ok("[::]:5701".parse().unwrap())
        );
        let resolved = metrics_address("localhost:9101").expect("localhost resolves");
        assert!(
            resolved.ip().is_loopback() && resolved.port() == 9101,
            "{resolved}"
        );
        let err = metrics_address("localhost:x").unwrap_err();
        assert!(err.contains("IP:PORT or HOST:PORT"), "{err}");
        // The metrics port has no default.
        let err = metrics_address("127.0.0.1").unwrap_err();
        assert!(
            err.starts_with("127.0.0.1 is not an address to bind"),
            "{err}"
        );
    }

    #[test]
    fn a_listen_address_without_a_port_takes_5701_as_a_client_does() {
        for (given, meant) in [
            ("127.0.0.1", "127.0.0.1:5701"),
            ("0.0.0.0", "0.0.0.0:5701"),
            ("::1", "[::1]:5701"),
            ("[::]", "[::]:5701"),
            ("127.0.0.1:9000", "127.0.0.1:9000"),
            ("[::1]:9000", "[::1]:9000"),
        ] {
            assert_eq!(listen_address(given), Ok(meant.parse().unwrap()), "{given}");
        }
        let resolved = listen_address("localhost").expect("localhost resolves");
        assert!(
            resolved.ip().is_loopback() && resolved.port() == 5701,
            "{resolved}"
        );
        for not_one in ["5701", "1.2", "1.2:80", ""] {
            let err = listen_address(not_one).unwrap_err();
            assert!(
                err.contains("is not an address to bind"),
                "{not_one}: {err}"
            );
        }
        let err = listen_address("127.0.0.1:x").unwrap_err();
        assert!(
            err.starts_with("127.0.0.1:x is not an address to bind (IP[:PORT]"),
            "{err}"
        );
    }
}
