//! A connection's grant: what GRANT asks for, and what its reply says the node granted.

use crate::codec::{Reader, Writer};
use crate::error::{DecodeError, EncodeError};

/// The rights a grant may hold, one bit each; every other bit is rejected.
pub mod rights {
    pub const ALLOC: u8 = 0x01;
    pub const WRITE: u8 = 0x02;
    pub const READ: u8 = 0x04;
    pub const LOAD: u8 = 0x08;
    pub const LAUNCH: u8 = 0x10;
    /// Every right.
    pub const ALL: u8 = ALLOC | WRITE | READ | LOAD | LAUNCH;
}

/// What a connection may do with the node's GPUs. In a GRANT request it is what the client asks
/// for (a tasklet's manifest); in the reply, what the node grants: the request cut down by the
/// node's policy for the client's tenant, field by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The most bytes one read may return (the client's memory for them).
    pub memory: u64,
    /// Most device memory held by all of the connection's leases at once.
    pub max_vram: u64,
    /// Most leases held at once.
    pub max_leases: u32,
    /// Longest a lease may last, renewals included, in milliseconds.
    pub max_lease_ms: u64,
    /// A set of [`rights`] bits.
    pub rights: u8,
}

impl Grant {
    pub(crate) fn encode(&self, w: &mut Writer) -> Result<(), EncodeError> {
        if self.rights & !rights::ALL != 0 {
            return Err(EncodeError::InvalidValue {
                field: "rights",
                reason: "only the bits of grant::rights are defined",
            });
        }
        w.u64(self.memory);
        w.u64(self.max_vram);
        w.u32(self.max_leases);
        w.u64(self.max_lease_ms);
        w.u8(self.rights);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Grant, DecodeError> {
        let grant = Grant {
            memory: r.u64("memory")?,
            max_vram: r.u64("max_vram")?,
            max_leases: r.u32("max_leases")?,
            max_lease_ms: r.u64("max_lease_ms")?,
            rights: r.u8("rights")?,
        };
        if grant.rights & !rights::ALL != 0 {
            return Err(DecodeError::InvalidValue {
                field: "rights",
                value: grant.rights.into(),
            });
        }
        Ok(grant)
    }
}
