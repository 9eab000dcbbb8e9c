//! What a deployer is allowed to hold: its limits, and the names of the settings behind them.

/// The node policy's key that sets [`DeployConfig::max_component_bytes`]; errors name it so
/// that whoever reads one knows what to raise.
pub const MAX_COMPONENT_SETTING: &str = "max-component-size` under `[deploy]";

/// The most bytes a deployment's manifest may hold. A `tasklet.toml` is a few hundred bytes; the
/// bound only keeps a client from making the node parse megabytes of it.
pub const MAX_MANIFEST_BYTES: usize = 64 << 10;

/// A deployer's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeployConfig {
    /// The most bytes a pushed component may hold. A push is refused as soon as its bytes pass
    /// this, before they are compiled or stored. The store's own limit on one blob applies too.
    pub max_component_bytes: u64,
    /// The most linked tasklets kept in memory between runs, all deployments together.
    pub warm_tasklets: usize,
    /// The most bytes of compiled code those tasklets may account for (each is weighed by the
    /// size of its compiled form).
    pub warm_bytes: u64,
    /// The most bytes of what one run prints (its stdout and stderr together, in the order
    /// written) kept in its [`RunOutcome::printed`](crate::RunOutcome::printed); the rest is
    /// dropped and counted. What a tenant's tasklet prints never reaches the host's own streams.
    pub printed_bytes: usize,
}

impl DeployConfig {
    /// The default [`max_component_bytes`](Self::max_component_bytes): room for components
    /// that bundle an interpreter (a Python tasklet is tens of megabytes).
    pub const DEFAULT_MAX_COMPONENT_BYTES: u64 = 64 << 20;
    /// The default [`warm_tasklets`](Self::warm_tasklets).
    pub const DEFAULT_WARM_TASKLETS: usize = 64;
    /// The default [`warm_bytes`](Self::warm_bytes).
    pub const DEFAULT_WARM_BYTES: u64 = 1 << 30;
    /// The default [`printed_bytes`](Self::printed_bytes): a panic's message and a few lines
    /// of context.
    pub const DEFAULT_PRINTED_BYTES: usize = 4 << 10;
}

impl Default for DeployConfig {
    fn default() -> DeployConfig {
        DeployConfig {
            max_component_bytes: DeployConfig::DEFAULT_MAX_COMPONENT_BYTES,
            warm_tasklets: DeployConfig::DEFAULT_WARM_TASKLETS,
            warm_bytes: DeployConfig::DEFAULT_WARM_BYTES,
            printed_bytes: DeployConfig::DEFAULT_PRINTED_BYTES,
        }
    }
}
