//! What LEASE_ALLOC requires of its device, besides its index (protocol version 4).

use crate::codec::{Reader, Writer};
use crate::error::{DecodeError, EncodeError};
use crate::limits::MAX_PEER_NAME;

/// Requirements a lease puts on its device; each absent field requires nothing. Of the devices
/// that meet them and have the lease's bytes free, the node takes the one with the most memory
/// free, then the fewest leases, then the lowest index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseRequirements {
    /// The device with this UUID (`Device::uuid`; `GPU-` prefix and case aside).
    pub uuid: Option<String>,
    /// A device whose name contains this text, case aside.
    pub model: Option<String>,
    /// A device of at least this compute capability, (major, minor).
    pub min_compute_capability: Option<(u32, u32)>,
    /// A device that lends at least this many bytes in all (`Device::total_memory`).
    pub min_total_memory: Option<u64>,
}

impl LeaseRequirements {
    /// Whether it requires nothing.
    pub fn is_empty(&self) -> bool {
        *self == LeaseRequirements::default()
    }

    /// Each field as an option: a presence byte, then the value.
    pub(crate) fn encode(&self, w: &mut Writer) -> Result<(), EncodeError> {
        for (field, text) in [("uuid", &self.uuid), ("model", &self.model)] {
            w.bool(text.is_some());
            if let Some(text) = text {
                w.string(field, text, MAX_PEER_NAME)?;
            }
        }
        w.bool(self.min_compute_capability.is_some());
        if let Some((major, minor)) = self.min_compute_capability {
            w.u32(major);
            w.u32(minor);
        }
        w.bool(self.min_total_memory.is_some());
        if let Some(bytes) = self.min_total_memory {
            w.u64(bytes);
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<LeaseRequirements, DecodeError> {
        let mut text = |field| -> Result<Option<String>, DecodeError> {
            Ok(match r.present(field)? {
                true => Some(r.string(field, MAX_PEER_NAME)?),
                false => None,
            })
        };
        let uuid = text("uuid")?;
        let model = text("model")?;
        let min_compute_capability = match r.present("min_compute_capability")? {
            true => Some((
                r.u32("min_compute_capability")?,
                r.u32("min_compute_capability")?,
            )),
            false => None,
        };
        let min_total_memory = match r.present("min_total_memory")? {
            true => Some(r.u64("min_total_memory")?),
            false => None,
        };
        Ok(LeaseRequirements {
            uuid,
            model,
            min_compute_capability,
            min_total_memory,
        })
    }
}
