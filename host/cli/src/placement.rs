//! Running on the cluster: the nodes that meet a requirement, tried in the placement's order
//! until one takes the work.
//!
//! Where a call moves to the next node, and where it never does:
//!
//! 1. **Before the call started** — the node could not be reached, its certificate was refused
//!    or is not the one its record names, it refused with `CAPACITY_EXCEEDED` or `DRAINING`,
//!    or with `UNAUTHORIZED` (its policy does not let this tenant do it: nodes' policies may
//!    differ), or the connection was lost before the request went out (during a push): nothing
//!    ran there, so any call, a session included, goes to the next node ([`Tried::Refused`]).
//! 2. **A stateless call in flight** — a deployed run whose connection was lost (the node
//!    died, or stopped answering within the idle timeout) before it answered: the run, if it
//!    began, ended with its connection and left nothing behind (a tasklet's only effect is its
//!    reply, its leases end with it), so it is run again on the next node ([`Tried::Lost`]).
//! 3. **After an answer** — any reply of the node (the tasklet's output, its failure, any
//!    other refusal) is the answer, never retried ([`Tried::Final`]); and a session (`run
//!    --nats`) whose node dies fails `disconnected`, never moved: its state was on that node.
//!
//! A run placed with `run --nats` keeps the nodes after its own ([`NextNodes`]): its one-shots
//! (the SDK's `GpuCall`), and a lease asked for while it holds nothing, are stateless, so when
//! its node is lost before they are answered they move there, as case 2 (`RemoteGpu`'s
//! fallback).
//!
//! The registry only says where to try; each node admits or refuses for itself.

use crate::cluster::RegistrySource;
use crate::remote::RemoteArgs;
use anyhow::{anyhow, bail, Result};
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tasklet_cluster::{choose, DeviceRecord, LiveNode, NatsConfig, Requirement};
use tasklet_remote::{ClientError, ConnectOptions, Fallback, NodeClient};
use tasklet_tls::Tenant;
use tasklet_wire::ErrorCode;

/// How long each candidate gets to answer the handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A placed connection that hears nothing from its node for this long is lost (keep-alives go
/// every third of it): a run in flight on a node that died moves to the next node, and a
/// session on it fails `disconnected`, this long after the death.
const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// The node the work went to.
#[derive(Debug, Clone)]
pub struct Placed {
    pub name: String,
    pub addr: String,
}

/// Why an attempt on one node did not give an answer.
pub enum Tried {
    /// Nothing started there: the next node may take it.
    Refused(ClientError),
    /// A stateless call lost with its connection before any answer: the next node runs it.
    Lost(ClientError),
    /// The answer, whatever the node: no other is tried.
    Final(anyhow::Error),
}

impl Tried {
    /// A stateless call's failure (a deployed run, sent whole): a lost connection is case 2
    /// of the module's boundary, the rest as for any call.
    pub fn stateless(err: ClientError) -> Tried {
        match err {
            lost @ ClientError::Disconnected(_) => Tried::Lost(lost),
            other => Tried::from(other),
        }
    }
}

impl From<ClientError> for Tried {
    fn from(err: ClientError) -> Tried {
        if before_anything_ran(&err) {
            Tried::Refused(err)
        } else {
            Tried::Final(err.into())
        }
    }
}

/// Errors after which the node cannot have started the work.
fn before_anything_ran(err: &ClientError) -> bool {
    match err {
        ClientError::Unreachable { .. }
        | ClientError::PortClosed { .. }
        | ClientError::Refused(_)
        | ClientError::Address { .. } => true,
        ClientError::Failed { .. } => matches!(
            err.code(),
            Some(ErrorCode::CapacityExceeded | ErrorCode::Draining | ErrorCode::Unauthorized)
        ),
        _ => false,
    }
}

/// The nodes after the one a run was placed on, in the placement's order, each tried once:
/// where its stateless calls go when its node is lost. When none is left, the registry is read
/// once more (a long run's list may be old), for nodes that have not failed it.
pub struct NextNodes {
    rest: VecDeque<(Placed, ConnectOptions)>,
    /// What reading the registry again takes, until it was read again.
    refresh: Option<Refresh>,
    /// The node the run's calls are on now (the last one handed out).
    current: String,
    failed: Failed,
}

/// What reading the registry again takes.
struct Refresh {
    registry: RegistrySource,
    requirement: Requirement,
    certs: PathBuf,
    tenant: Tenant,
}

impl Fallback for NextNodes {
    fn next_node(&mut self, why: &str) -> Option<Result<NodeClient, ClientError>> {
        self.failed.note(&self.current);
        // Stopped by a signal: the lost node was closed by this client, not lost.
        if crate::interrupt::interrupted() {
            return None;
        }
        if self.rest.is_empty() {
            let refresh = self.refresh.take()?;
            errln!("tasklet: {why}; no node of the placement is left, reading the registry again");
            match refresh.registry.live() {
                Ok(nodes) => {
                    self.rest = candidates(
                        &refresh.requirement,
                        &nodes,
                        &self.failed,
                        &refresh.certs,
                        &refresh.tenant,
                    );
                }
                Err(e) => errln!("tasklet: cannot read the registry again: {e:#}"),
            }
        }
        let (placed, options) = self.rest.pop_front()?;
        errln!(
            "tasklet: {why}; its stateless GPU calls go on on node {} ({})",
            placed.name,
            placed.addr
        );
        self.current = placed.name;
        let client = NodeClient::connect_with(&options);
        if let Ok(client) = &client {
            crate::interrupt::close_on_interrupt(client);
        }
        Some(client)
    }
}

/// The nodes that did not take the work in this command, and when.
#[derive(Default)]
struct Failed(HashMap<String, SystemTime>);

impl Failed {
    fn note(&mut self, name: &str) {
        self.0.insert(name.to_owned(), SystemTime::now());
    }

    /// Whether `node` is worth a try: it never failed here, or it wrote its record after it
    /// did (it is alive, and what it says of its room is newer than its refusal).
    fn worth_trying(&self, node: &LiveNode) -> bool {
        match self.0.get(node.record.name.as_str()) {
            None => true,
            Some(&failed_at) => SystemTime::now()
                .checked_sub(node.age)
                .is_some_and(|written| written > failed_at),
        }
    }
}

/// The nodes of `nodes` meeting `requirement` and worth a try, in the placement's order, as
/// connections to make.
fn candidates(
    requirement: &Requirement,
    nodes: &[LiveNode],
    failed: &Failed,
    certs: &Path,
    tenant: &Tenant,
) -> VecDeque<(Placed, ConnectOptions)> {
    let worth: Vec<&LiveNode> = nodes.iter().filter(|n| failed.worth_trying(n)).collect();
    let records: Vec<&tasklet_cluster::NodeRecord> = worth.iter().map(|n| &n.record).collect();
    choose(requirement, &records)
        .iter()
        .map(|candidate| {
            let node = candidate.node;
            let placed = Placed {
                name: node.name.to_string(),
                addr: node.address.clone(),
            };
            let mut options = ConnectOptions::new(&node.address, certs, tenant.clone());
            options.connect_timeout = CONNECT_TIMEOUT;
            options.idle_timeout = IDLE_TIMEOUT;
            options.node_sha256 = Some(node.cert_sha256.clone());
            (placed, options)
        })
        .collect()
}

/// Runs `attempt` on the nodes meeting `requirement`, best first, at most `tries` of them,
/// until one gives an answer.
pub fn place<T>(
    remote: &RemoteArgs,
    registry: &RegistrySource,
    requirement: &Requirement,
    tries: usize,
    attempt: impl FnMut(NodeClient, &Placed) -> Result<T, Tried>,
) -> Result<(T, Placed)> {
    place_keeping_rest(remote, registry, requirement, tries, attempt)
        .map(|(answer, placed, _)| (answer, placed))
}

/// As [`place`], with the candidates after the one that answered (all of them, whatever
/// `tries`), for the run's stateless calls to move to.
///
/// The nodes come from the view a recent command cached when there is one that has a node
/// meeting the requirement, else from the registry read now. A candidate from the cache that
/// does not take the work drops the cache (the next command reads the registry); when every
/// candidate failed and tries are left, the registry is read once more and the nodes that have
/// not failed since their last record (new ones, or ones that wrote theirs after failing) are
/// tried.
pub fn place_keeping_rest<T>(
    remote: &RemoteArgs,
    registry: &RegistrySource,
    requirement: &Requirement,
    tries: usize,
    mut attempt: impl FnMut(NodeClient, &Placed) -> Result<T, Tried>,
) -> Result<(T, Placed, NextNodes)> {
    let tenant = Tenant::new(&remote.tenant)?;
    let tries = tries.max(1);
    let mut failed = Failed::default();
    let cached = registry
        .cached()
        .filter(|nodes| !choose(requirement, nodes).is_empty());
    let from_cache = cached.is_some();
    let nodes = match cached {
        Some(nodes) => nodes,
        None => registry.live()?,
    };
    let mut queue = candidates(requirement, &nodes, &failed, &remote.certs, &tenant);
    if queue.is_empty() {
        bail!("{}", nobody_meets(requirement, registry.nats(), &nodes));
    }
    let mut total = queue.len();
    let (mut attempts, mut read_again) = (0, false);
    let mut refusals = String::new();
    while attempts < tries {
        // Stopped by a signal: no other node is asked (the last one's connection was closed by
        // this client, which is why it failed).
        if crate::interrupt::interrupted() {
            break;
        }
        let Some((placed, options)) = queue.pop_front() else {
            if read_again {
                break;
            }
            // Every candidate failed: the view may be older than the cluster.
            read_again = true;
            errln!("tasklet: no node of the placement took it; reading the registry again");
            let nodes = registry.live()?;
            queue = candidates(requirement, &nodes, &failed, &remote.certs, &tenant);
            total += queue.len();
            continue;
        };
        attempts += 1;
        let tried = match NodeClient::connect_with(&options) {
            Ok(client) => {
                crate::interrupt::close_on_interrupt(&client);
                attempt(client, &placed)
            }
            // A certificate folder that cannot be used fails the same way everywhere.
            Err(err @ ClientError::Certs(_)) => return Err(err.into()),
            // Lost during the handshake (the node died as it answered): nothing was asked.
            Err(lost @ ClientError::Disconnected(_)) => Err(Tried::Refused(lost)),
            Err(err) => Err(err.into()),
        };
        // Stopped by a signal while the node was asked: it failed because this client closed
        // its connection, and says nothing more (the command says it was stopped).
        if tried.is_err() && crate::interrupt::interrupted() {
            bail!("stopped by a signal while node {} was asked", placed.name);
        }
        let err = match tried {
            Ok(answer) => {
                let rest = NextNodes {
                    rest: queue,
                    refresh: (!read_again).then(|| Refresh {
                        registry: registry.clone(),
                        requirement: requirement.clone(),
                        certs: remote.certs.clone(),
                        tenant: tenant.clone(),
                    }),
                    current: placed.name.clone(),
                    failed,
                };
                return Ok((answer, placed, rest));
            }
            // The node's answer: which node gave it matters to whoever reads it.
            Err(Tried::Final(err)) => {
                return Err(err.context(format!("node {} ({})", placed.name, placed.addr)))
            }
            Err(Tried::Refused(err)) => {
                errln!(
                    "tasklet: node {} ({}) did not take it: {err}",
                    placed.name,
                    placed.addr
                );
                err
            }
            Err(Tried::Lost(err)) => {
                let next = match attempts < tries {
                    true => "; running it on the next node",
                    false => "",
                };
                errln!(
                    "tasklet: node {} ({}) was lost before it answered ({err}){next}",
                    placed.name,
                    placed.addr
                );
                err
            }
        };
        failed.note(&placed.name);
        if from_cache {
            registry.invalidate();
        }
        let _ = write!(refusals, "; {}: {err}", placed.name);
    }
    Err(anyhow!(
        "no node took it ({attempts} of {total} meeting {requirement} tried){refusals}"
    ))
}

/// A node's devices as a requirement sees them, in a few words each: `cuda 80 GiB free, cc 9.0
/// + …`, or `no devices`.
pub(crate) fn devices_offered(devices: &[DeviceRecord]) -> String {
    if devices.is_empty() {
        return "no devices".to_owned();
    }
    let each: Vec<String> = devices
        .iter()
        .map(|d| {
            format!(
                "{} {} free, cc {}",
                d.backend,
                crate::backend::rounded_size(d.free_vram),
                d.compute_capability
            )
        })
        .collect();
    each.join(" + ")
}

/// One line: nothing meets the requirement, and what the live nodes offer.
fn nobody_meets(requirement: &Requirement, nats: &NatsConfig, nodes: &[LiveNode]) -> String {
    if nodes.is_empty() {
        return format!(
            "no nodes registered at {} (start one with `tasklet node --nats URL`)",
            nats.display_url()
        );
    }
    let offers: Vec<String> = nodes
        .iter()
        .map(|node| {
            let r = &node.record;
            let draining = if r.draining { ", draining" } else { "" };
            format!("{} ({}{draining})", r.name, devices_offered(&r.devices))
        })
        .collect();
    format!(
        "no live node meets {requirement}; the nodes offer: {}",
        offers.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tasklet_wire::{ErrorReply, Opcode};

    fn failed(code: ErrorCode) -> ClientError {
        ClientError::Failed {
            opcode: Opcode::DeployRun,
            error: ErrorReply::new(code, "x"),
        }
    }

    fn kind(tried: Tried) -> &'static str {
        match tried {
            Tried::Refused(_) => "next node",
            Tried::Lost(_) => "run again on the next node",
            Tried::Final(_) => "the answer",
        }
    }

    #[test]
    fn the_did_not_start_boundary() {
        let unreachable = || ClientError::Unreachable {
            addr: "a".into(),
            seconds: 5,
        };
        let lost = || ClientError::Disconnected("the node stopped answering".into());
        // 1. Nothing started: any call moves on.
        assert_eq!(kind(Tried::from(unreachable())), "next node");
        assert_eq!(
            kind(Tried::from(ClientError::Refused("cert".into()))),
            "next node"
        );
        assert_eq!(
            kind(Tried::from(failed(ErrorCode::CapacityExceeded))),
            "next node"
        );
        assert_eq!(kind(Tried::from(failed(ErrorCode::Draining))), "next node");
        // This node's policy refuses the tenant what it asked; another node's may not.
        assert_eq!(
            kind(Tried::stateless(failed(ErrorCode::Unauthorized))),
            "next node"
        );
        assert_eq!(kind(Tried::stateless(unreachable())), "next node");
        // 2. A stateless call lost in flight runs again; a session's loss is its answer.
        assert_eq!(kind(Tried::stateless(lost())), "run again on the next node");
        assert_eq!(kind(Tried::from(lost())), "the answer");
        // 3. Any other answer of the node is final, stateless or not.
        for code in [ErrorCode::NotFound, ErrorCode::Internal] {
            assert_eq!(kind(Tried::stateless(failed(code))), "the answer");
            assert_eq!(kind(Tried::from(failed(code))), "the answer");
        }
        assert_eq!(
            kind(Tried::stateless(ClientError::Protocol("bad".into()))),
            "the answer"
        );
    }
}
