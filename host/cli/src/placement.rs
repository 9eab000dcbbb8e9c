//! Running on the cluster: the nodes that meet a requirement, tried in the placement's order
//! until one takes the work.
//!
//! A node is left for the next only when it could not have started anything: it could not be
//! reached, its certificate was refused or is not the one its record names, or it refused
//! with `CAPACITY_EXCEEDED` or `DRAINING`. Any other failure is the answer. The registry only
//! says where to try; each node admits or refuses for itself.

use crate::cluster::live_nodes;
use crate::remote::RemoteArgs;
use anyhow::{anyhow, bail, Result};
use std::fmt::Write as _;
use std::time::Duration;
use tasklet_cluster::{choose, LiveNode, NatsConfig, Requirement};
use tasklet_remote::{ClientError, ConnectOptions, NodeClient};
use tasklet_tls::Tenant;
use tasklet_wire::ErrorCode;

/// How long each candidate gets to answer the handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// The answer, whatever the node: no other is tried.
    Final(anyhow::Error),
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

/// Runs `attempt` on the nodes meeting `requirement`, best first, at most `tries` of them,
/// until one gives an answer.
pub fn place<T>(
    remote: &RemoteArgs,
    nats: &NatsConfig,
    requirement: &Requirement,
    tries: usize,
    mut attempt: impl FnMut(NodeClient, &Placed) -> Result<T, Tried>,
) -> Result<(T, Placed)> {
    let tenant = Tenant::new(&remote.tenant)?;
    let nodes = live_nodes(nats)?;
    let candidates = choose(requirement, &nodes);
    if candidates.is_empty() {
        bail!("{}", nobody_meets(requirement, nats, &nodes));
    }
    let mut refusals = String::new();
    for candidate in candidates.iter().take(tries.max(1)) {
        let node = candidate.node;
        let placed = Placed {
            name: node.name.to_string(),
            addr: node.address.clone(),
        };
        let mut options = ConnectOptions::new(&node.address, &remote.certs, tenant.clone());
        options.connect_timeout = CONNECT_TIMEOUT;
        options.node_sha256 = Some(node.cert_sha256.clone());
        let tried = match NodeClient::connect_with(&options) {
            Ok(client) => attempt(client, &placed),
            // A certificate folder that cannot be used fails the same way everywhere.
            Err(err @ ClientError::Certs(_)) => return Err(err.into()),
            Err(err) => Err(err.into()),
        };
        match tried {
            Ok(answer) => return Ok((answer, placed)),
            Err(Tried::Final(err)) => return Err(err),
            Err(Tried::Refused(err)) => {
                eprintln!(
                    "tasklet: node {} ({}) did not take it: {err}",
                    placed.name, placed.addr
                );
                let _ = write!(refusals, "; {}: {err}", placed.name);
            }
        }
    }
    Err(anyhow!(
        "no node took it ({} of {} meeting {requirement} tried){refusals}",
        tries.max(1).min(candidates.len()),
        candidates.len()
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
