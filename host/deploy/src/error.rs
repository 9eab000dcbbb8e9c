//! The errors of pushing and running deployed tasklets: each says, in one line, what happened
//! and what to do about it.
//!
//! How a run *ended* (the tasklet failed, trapped, ran out of time) is not an error of the
//! deployer: it is the run's [`ExitStatus`](crate::ExitStatus).

use tasklet_store::Digest;

/// Why a push or a run could not be carried out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The wasm engine could not be set up.
    #[error("cannot set up the wasm engine for deployed tasklets: {0}")]
    Engine(String),
    /// A pushed manifest is larger than a manifest may be.
    #[error("the manifest is {len} bytes, more than the {limit} a tasklet manifest may hold")]
    ManifestTooLarge {
        /// Its length.
        len: usize,
        /// The most allowed.
        limit: usize,
    },
    /// A pushed manifest is not a tasklet manifest.
    #[error("the manifest is not a valid tasklet.toml: {}{message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
    InvalidManifest {
        /// The line at fault, when known.
        line: Option<u32>,
        /// What is wrong with it.
        message: String,
    },
    /// A pushed component grew past the deployer's limit; nothing of it was kept.
    #[error("the component is larger than {limit} bytes, this node's limit; raise `{setting}` in the node's policy, or push something smaller")]
    ComponentTooLarge {
        /// The limit, in bytes.
        limit: u64,
        /// The configuration key that sets it.
        setting: &'static str,
    },
    /// The pushed component could not be read from its source.
    #[error("cannot read the component being pushed: {0}")]
    ComponentRead(#[source] std::io::Error),
    /// A pushed component is not a tasklet this node's engine can run: not a WebAssembly
    /// component, or one whose imports or exports are not the tasklet world's.
    #[error("the component is not a tasklet this node can run: {message}")]
    InvalidComponent {
        /// What the engine said.
        message: String,
    },
    /// A push was fed after it had failed.
    #[error("this push already failed; start a new one")]
    PushClosed,
    /// No deployment has this digest.
    #[error("no deployment {digest} on this node: push it with `tasklet deploy push`, and use the digest that prints")]
    NotFound {
        /// The digest asked for.
        digest: Digest,
    },
    /// A stored deployment that can no longer be loaded (its manifest or component was accepted
    /// by another version of the node).
    #[error("deployment {digest} cannot be loaded by this node: {message}; push it again")]
    Unloadable {
        /// The deployment.
        digest: Digest,
        /// Why.
        message: String,
    },
    /// The store failed (see [`tasklet_store::Error`]).
    #[error(transparent)]
    Store(tasklet_store::Error),
    /// The operating system's random source failed.
    #[error("cannot draw a run id from the operating system's random source: {0}")]
    Entropy(String),
}

impl Error {
    /// Whether this error says there is no such deployment.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }
}

impl From<tasklet_store::Error> for Error {
    fn from(err: tasklet_store::Error) -> Error {
        Error::Store(err)
    }
}

/// Engine and parser messages sometimes span lines; an error of this crate never does.
pub(crate) use tasklet_runtime::one_line;
