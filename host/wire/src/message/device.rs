//! A device in GET_INVENTORY's reply.

use crate::codec::{Reader, Writer};
use crate::error::{DecodeError, EncodeError};
use crate::limits::{MAX_DEVICES, MAX_NAME};

/// A GPU the node lends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// The index LEASE_ALLOC's `device` names.
    pub index: u32,
    pub name: String,
    /// `cuda` or `emu`.
    pub backend: String,
    /// `GPU-…`; empty for the emulator.
    pub uuid: String,
    /// Bytes the node lends on this device in all.
    pub total_memory: u64,
    /// Bytes not yet granted to leases.
    pub free_memory: u64,
    /// (major, minor).
    pub compute_capability: (u32, u32),
    /// The CUDA driver's version (12080 = 12.8); 0 for the emulator.
    pub driver_version: u32,
    /// Leases running on the device now, every client's (a count only: whose they are is not
    /// said).
    pub leases: u32,
}

/// The fewest bytes a device takes on the wire (empty strings).
const DEVICE_MIN_BYTES: usize = 4 + 3 * 4 + 8 + 8 + 4 + 4 + 4 + 4;

pub(crate) fn encode_devices(devices: &[Device], w: &mut Writer) -> Result<(), EncodeError> {
    w.count("devices", devices.len(), MAX_DEVICES)?;
    for device in devices {
        w.u32(device.index);
        w.string("devices[].name", &device.name, MAX_NAME)?;
        w.string("devices[].backend", &device.backend, MAX_NAME)?;
        w.string("devices[].uuid", &device.uuid, MAX_NAME)?;
        w.u64(device.total_memory);
        w.u64(device.free_memory);
        w.u32(device.compute_capability.0);
        w.u32(device.compute_capability.1);
        w.u32(device.driver_version);
        w.u32(device.leases);
    }
    Ok(())
}

pub(crate) fn decode_devices(r: &mut Reader) -> Result<Vec<Device>, DecodeError> {
    let count = r.count("devices", MAX_DEVICES, DEVICE_MIN_BYTES)?;
    let mut devices = Vec::with_capacity(count);
    for _ in 0..count {
        devices.push(Device {
            index: r.u32("devices[].index")?,
            name: r.string("devices[].name", MAX_NAME)?,
            backend: r.string("devices[].backend", MAX_NAME)?,
            uuid: r.string("devices[].uuid", MAX_NAME)?,
            total_memory: r.u64("devices[].total_memory")?,
            free_memory: r.u64("devices[].free_memory")?,
            compute_capability: (r.u32("devices[].cc_major")?, r.u32("devices[].cc_minor")?),
            driver_version: r.u32("devices[].driver_version")?,
            leases: r.u32("devices[].leases")?,
        });
    }
    Ok(devices)
}
