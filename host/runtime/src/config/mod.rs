//! Configuration: tasklet manifests, the node policy (with its tenants), and the grant that joins
//! them.

pub mod devices;
pub mod manifest;
pub mod policy;
pub mod rights;
pub mod tenants;
pub mod units;
mod value;

pub use devices::{DevicePolicy, DeviceSelector};
pub use manifest::{GpuRequest, Limits, Manifest, ManifestError, MANIFEST_FILE};
pub use policy::{DeployLimits, Grant, Policy, PolicyError, WorkerPolicy};
pub use rights::{Right, Rights};
pub use tenants::{DeployRefused, TenantCaps, TenantTotals, UnlistedTenant};
