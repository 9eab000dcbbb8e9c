//! GET_INVENTORY: the devices a node lends, each with its free memory and running leases.

use tasklet_runtime::Host;
use tasklet_wire::Device;

pub(crate) fn devices(host: &Host) -> Vec<Device> {
    let usage = host.device_usage();
    host.devices()
        .iter()
        .map(|d| Device {
            index: d.index,
            name: d.name.clone(),
            backend: d.backend.to_string(),
            uuid: d.uuid.clone(),
            total_memory: d.total_memory,
            free_memory: host.free_memory_on(d.index),
            compute_capability: d.compute_capability,
            driver_version: d.driver_version,
            leases: usage
                .iter()
                .find(|u| u.index == d.index)
                .map_or(0, |u| u32::try_from(u.leases).unwrap_or(u32::MAX)),
        })
        .collect()
}
