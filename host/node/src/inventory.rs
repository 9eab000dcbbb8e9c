//! GET_INVENTORY: the devices a node lends, their free memory and running leases.

use tasklet_runtime::Host;
use tasklet_wire::Device;

pub(crate) fn devices(host: &Host) -> Vec<Device> {
    let d = host.device();
    vec![Device {
        index: d.index,
        name: d.name.clone(),
        backend: d.backend.to_string(),
        uuid: d.uuid.clone(),
        total_memory: d.total_memory,
        free_memory: host.free_memory(),
        compute_capability: d.compute_capability,
        driver_version: d.driver_version,
        leases: u32::try_from(host.accounting().leases).unwrap_or(u32::MAX),
    }]
}
