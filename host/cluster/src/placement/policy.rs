//! Which nodes to try for a requirement, in which order (the policy is on [`choose`]).

use std::cmp::{Ordering, Reverse};

use super::requirement::Requirement;
use crate::record::{DeviceRecord, NodeRecord};

/// A node that may run the work, and the device on it that fits best.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub node: &'a NodeRecord,
    pub device: &'a DeviceRecord,
}

/// The eligible nodes among `nodes`, best first.
///
/// The policy, applied to the fresh records the registry returns:
///
/// 1. **Eligible**: the node is not draining and at least one of its devices fits the
///    requirement ([`Requirement::fits`]). The node's *device* for the run is its fitting
///    device with the most free VRAM (then fewest leases, then lowest index).
/// 2. **Order**: most free VRAM on that device first (work spreads out, and the run has the
///    most room to grow); then fewest leases on the node; then least load (sessions and runs
///    in progress, then connections); then the name, so that the same records always give the
///    same order.
///
/// The order is advice: the node still admits or refuses. The caller tries the first
/// candidate, and on `capacity-exceeded` or a connection failure *before the run started*
/// the next one; a run that started is never moved.
pub fn choose<'a, N: AsRef<NodeRecord>>(
    requirement: &Requirement,
    nodes: &'a [N],
) -> Vec<Candidate<'a>> {
    let mut candidates: Vec<Candidate<'a>> = nodes
        .iter()
        .map(AsRef::as_ref)
        .filter(|node| !node.draining)
        .filter_map(|node| {
            let device = node
                .devices
                .iter()
                .filter(|device| requirement.fits(device))
                .min_by(|a, b| device_order(a, b))?;
            Some(Candidate { node, device })
        })
        .collect();
    candidates.sort_by(candidate_order);
    candidates
}

/// Best device first.
fn device_order(a: &DeviceRecord, b: &DeviceRecord) -> Ordering {
    let key = |d: &DeviceRecord| (Reverse(d.free_vram), d.leases, d.index);
    key(a).cmp(&key(b))
}

/// Best candidate first.
fn candidate_order(a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
    let key = |c: &Candidate<'_>| {
        let load = c.node.load;
        (
            Reverse(c.device.free_vram),
            c.node.leases(),
            u64::from(load.sessions) + u64::from(load.runs),
            load.connections,
        )
    };
    key(a)
        .cmp(&key(b))
        .then_with(|| a.node.name.cmp(&b.node.name))
}

impl AsRef<NodeRecord> for NodeRecord {
    fn as_ref(&self) -> &NodeRecord {
        self
    }
}
