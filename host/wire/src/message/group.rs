//! LEASE_ALLOC_GROUP's request and reply (protocol version 6).

use super::requirements::LeaseRequirements;
use crate::codec::{Reader, Writer};
use crate::error::{DecodeError, EncodeError};
use crate::ids::LeaseId;
use crate::limits::MAX_GROUP_LEASES;

/// LEASE_ALLOC_GROUP: `count` leases of at least `min_bytes` each for `seconds`, on `count`
/// distinct devices that each meet `requires`, all granted or none. `device` may name a device
/// only for a group of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGroup {
    pub min_bytes: u64,
    pub seconds: u32,
    pub device: Option<u32>,
    pub requires: LeaseRequirements,
    /// 1 to [`MAX_GROUP_LEASES`]; more is malformed, 0 is refused `INVALID_ARGUMENT`.
    pub count: u32,
}

/// One lease of a granted group, as LEASE_ALLOC's reply has it (its generation is 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupLease {
    pub lease: LeaseId,
    pub device: u32,
    pub granted_bytes: u64,
    pub ttl_ms: u64,
}

/// The bytes a lease of the reply takes on the wire.
const GROUP_LEASE_BYTES: usize = 8 + 4 + 8 + 8;

impl LeaseGroup {
    /// LEASE_ALLOC's fields, then the count.
    pub(crate) fn encode(&self, w: &mut Writer) -> Result<(), EncodeError> {
        w.u64(self.min_bytes);
        w.u32(self.seconds);
        w.bool(self.device.is_some());
        if let Some(device) = self.device {
            w.u32(device);
        }
        self.requires.encode(w)?;
        if self.count as usize > MAX_GROUP_LEASES {
            return Err(EncodeError::TooManyItems {
                field: "count",
                count: self.count.into(),
                limit: MAX_GROUP_LEASES as u64,
            });
        }
        w.u32(self.count);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<LeaseGroup, DecodeError> {
        let min_bytes = r.u64("min_bytes")?;
        let seconds = r.u32("seconds")?;
        let device = match r.present("device")? {
            true => Some(r.u32("device")?),
            false => None,
        };
        let requires = LeaseRequirements::decode(r)?;
        // Checked here, not by the node: no node lends more devices than an inventory lists.
        let count = r.u32("count")?;
        if count as usize > MAX_GROUP_LEASES {
            return Err(DecodeError::TooManyItems {
                field: "count",
                count: count.into(),
                limit: MAX_GROUP_LEASES as u64,
            });
        }
        Ok(LeaseGroup {
            min_bytes,
            seconds,
            device,
            requires,
            count,
        })
    }
}

pub(crate) fn encode_group_leases(
    leases: &[GroupLease],
    w: &mut Writer,
) -> Result<(), EncodeError> {
    w.count("leases", leases.len(), MAX_GROUP_LEASES)?;
    for l in leases {
        w.u64(l.lease.0);
        w.u32(l.device);
        w.u64(l.granted_bytes);
        w.u64(l.ttl_ms);
    }
    Ok(())
}

pub(crate) fn decode_group_leases(r: &mut Reader) -> Result<Vec<GroupLease>, DecodeError> {
    let count = r.count("leases", MAX_GROUP_LEASES, GROUP_LEASE_BYTES)?;
    let mut leases = Vec::with_capacity(count);
    for _ in 0..count {
        leases.push(GroupLease {
            lease: LeaseId(r.u64("leases[].lease")?),
            device: r.u32("leases[].device")?,
            granted_bytes: r.u64("leases[].granted_bytes")?,
            ttl_ms: r.u64("leases[].ttl_ms")?,
        });
    }
    Ok(leases)
}
