//! Running on the cluster: the nodes that meet a requirement, tried in the placement's order
//! until one takes the work.
//!
//! Where a call moves to the next node, and where it never does:
//!
//! 1. **Before the call started** — the node could not be reached, its certificate was refused
//!    or is not the one its record names, it refused with `CAPACITY_EXCEEDED` or `DRAINING`,
//!    or the connection was lost before the request went out (during a push): nothing ran
//!    there, so any call, a session included, goes to the next node ([`Tried::Refused`]).
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

use crate::cluster::live_nodes;
use crate::remote::RemoteArgs;
use anyhow::{anyhow, bail, Result};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::time::Duration;
use tasklet_cluster::{choose, LiveNode, NatsConfig, Requirement};
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
        ClientError::Unreachable { .. } | ClientError::Refused(_) | ClientError::Address { .. } => {
            true
        }
        ClientError::Failed { .. } => matches!(
            err.code(),
            Some(ErrorCode::CapacityExceeded | ErrorCode::Draining)
        ),
        _ => false,
    }
}

/// The nodes after the one a run was placed on, in the placement's order, each tried once:
/// where its stateless calls go when its node is lost.
pub struct NextNodes {
    rest: VecDeque<(Placed, ConnectOptions)>,
}

impl Fallback for NextNodes {
    fn next_node(&mut self, why: &str) -> Option<Result<NodeClient, ClientError>> {
        let (placed, options) = self.rest.pop_front()?;
        eprintln!(
            "tasklet: {why}; its stateless GPU calls go on on node {} ({})",
            placed.name, placed.addr
        );
        Some(NodeClient::connect_with(&options))
    }
}

/// Runs `attempt` on the nodes meeting `requirement`, best first, at most `tries` of them,
/// until one gives an answer.
pub fn place<T>(
    remote: &RemoteArgs,
    nats: &NatsConfig,
    requirement: &Requirement,
    tries: usize,
    attempt: impl FnMut(NodeClient, &Placed) -> Result<T, Tried>,
) -> Result<(T, Placed)> {
    place_keeping_rest(remote, nats, requirement, tries, attempt)
        .map(|(answer, placed, _)| (answer, placed))
}

/// As [`place`], with the candidates after the one that answered (all of them, whatever
/// `tries`), for the run's stateless calls to move to.
pub fn place_keeping_rest<T>(
    remote: &RemoteArgs,
    nats: &NatsConfig,
    requirement: &Requirement,
    tries: usize,
    mut attempt: impl FnMut(NodeClient, &Placed) -> Result<T, Tried>,
) -> Result<(T, Placed, NextNodes)> {
    let tenant = Tenant::new(&remote.tenant)?;
    let nodes = live_nodes(nats)?;
    let candidates = choose(requirement, &nodes);
    if candidates.is_empty() {
        bail!("{}", nobody_meets(requirement, nats, &nodes));
    }
    let mut candidates: VecDeque<(Placed, ConnectOptions)> = candidates
        .iter()
        .map(|candidate| {
            let node = candidate.node;
            let placed = Placed {
                name: node.name.to_string(),
                addr: node.address.clone(),
            };
            let mut options = ConnectOptions::new(&node.address, &remote.certs, tenant.clone());
            options.connect_timeout = CONNECT_TIMEOUT;
            options.idle_timeout = IDLE_TIMEOUT;
            options.node_sha256 = Some(node.cert_sha256.clone());
            (placed, options)
        })
        .collect();
    let total = candidates.len();
    let mut refusals = String::new();
    for _ in 0..tries.max(1) {
        let Some((placed, options)) = candidates.pop_front() else {
            break;
        };
        let tried = match NodeClient::connect_with(&options) {
            Ok(client) => attempt(client, &placed),
            // A certificate folder that cannot be used fails the same way everywhere.
            Err(err @ ClientError::Certs(_)) => return Err(err.into()),
            Err(err) => Err(err.into()),
        };
        match tried {
            Ok(answer) => return Ok((answer, placed, NextNodes { rest: candidates })),
            Err(Tried::Final(err)) => return Err(err),
            Err(Tried::Refused(err)) => {
                eprintln!(
                    "tasklet: node {} ({}) did not take it: {err}",
                    placed.name, placed.addr
                );
                let _ = write!(refusals, "; {}: {err}", placed.name);
            }
            Err(Tried::Lost(err)) => {
                eprintln!(
                    "tasklet: node {} ({}) was lost before it answered ({err}); running it on the next node",
                    placed.name, placed.addr
                );
                let _ = write!(refusals, "; {}: {err}", placed.name);
            }
        }
    }
    Err(anyhow!(
        "no node took it ({} of {} meeting {requirement} tried){refusals}",
        tries.max(1).min(total),
        total
    ))
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
            let devices: Vec<String> = r
                .devices
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
            let devices = if devices.is_empty() {
                "no devices".to_owned()
            } else {
                devices.join(" + ")
            };
            let draining = if r.draining { ", draining" } else { "" };
            format!("{} ({devices}{draining})", r.name)
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
        assert_eq!(kind(Tried::stateless(unreachable())), "next node");
        // 2. A stateless call lost in flight runs again; a session's loss is its answer.
        assert_eq!(kind(Tried::stateless(lost())), "run again on the next node");
        assert_eq!(kind(Tried::from(lost())), "the answer");
        // 3. Any other answer of the node is final, stateless or not.
        for code in [
            ErrorCode::NotFound,
            ErrorCode::Internal,
            ErrorCode::Unauthorized,
        ] {
            assert_eq!(kind(Tried::stateless(failed(code))), "the answer");
            assert_eq!(kind(Tried::from(failed(code))), "the answer");
        }
        assert_eq!(
            kind(Tried::stateless(ClientError::Protocol("bad".into()))),
            "the answer"
        );
    }
}
