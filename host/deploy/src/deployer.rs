//! The deployer: one node's deployed tasklets, pushed into its store and run from it by digest.

use std::sync::Arc;

use tasklet_runtime::config::Manifest;
use tasklet_runtime::{HostError, Runner};
use tasklet_store::{Deleted, Deployment, Digest, Store};

use crate::compile_gate::CompileGate;
use crate::config::DeployConfig;
use crate::error::{one_line, Error};
use crate::manifest;
use crate::warm::WarmSet;

/// Pushes tasklets into a node's store and runs them by digest; see the [crate] docs.
///
/// Cloning is cheap and shares everything: the engine, the store and the warm set. It is meant
/// to be shared by every connection of a node; all methods take `&self`.
#[derive(Clone)]
pub struct Deployer {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) store: Store,
    pub(crate) runner: Runner,
    /// The runner's engine fingerprint, the compiled cache's key beside the component digest.
    pub(crate) engine: String,
    pub(crate) config: DeployConfig,
    pub(crate) warm: WarmSet,
    /// Every compile passes it (see `compile_gate`).
    pub(crate) compiles: CompileGate,
}

impl Deployer {
    /// A deployer over `store`, with an engine of its own.
    ///
    /// Its own, so that nothing it compiled can be run by another engine, nor anything another
    /// engine compiled by it (wasmtime refuses to mix them, by panicking).
    pub fn new(store: Store, config: DeployConfig) -> Result<Deployer, Error> {
        let runner = Runner::new().map_err(|e| match e {
            HostError::Engine(message) => Error::Engine(one_line(&message)),
            other => Error::Engine(one_line(&other.to_string())),
        })?;
        Ok(Deployer::with_runner(store, runner, config))
    }

    /// A deployer over `store` whose tasklets run on `runner` (one configured otherwise than
    /// [`Runner::new`] does). The deployer owns it from now on, for the reason [`Deployer::new`]
    /// gives.
    pub fn with_runner(store: Store, runner: Runner, config: DeployConfig) -> Deployer {
        let engine = runner.engine_fingerprint();
        Deployer {
            inner: Arc::new(Inner {
                store,
                runner,
                engine,
                config,
                warm: WarmSet::new(config.warm_tasklets, config.warm_bytes),
                compiles: CompileGate::per_core(),
            }),
        }
    }

    /// The store deployments are kept in.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The deployer's limits.
    pub fn config(&self) -> &DeployConfig {
        &self.inner.config
    }

    /// The fingerprint of the engine tasklets are compiled by: with a component's digest, the
    /// key of its entry in the store's compiled cache.
    pub fn engine_fingerprint(&self) -> &str {
        &self.inner.engine
    }

    /// The manifest of deployment `digest`, as its runs see it (its `component` is
    /// `sha256:<component digest>`): what a node consults before deciding to run it.
    ///
    /// Taken from a warm tasklet of the deployment when there is one (a deployment's manifest
    /// never changes, and a deleted one's warm tasklets are dropped): reading it back from the
    /// store, verifying its digest and parsing it cost a warm run as much as the run itself.
    pub fn manifest(&self, digest: &Digest) -> Result<Manifest, Error> {
        if let Some(manifest) = self.inner.warm.manifest(digest) {
            return Ok(manifest);
        }
        let deployment = self.inner.deployment(digest)?;
        self.inner.manifest(&deployment)
    }

    /// Deletes deployment `digest` from the store (its blobs and compiled forms unless another
    /// deployment shares them) and drops its warm tasklets. Runs under way finish.
    pub fn delete(&self, digest: &Digest) -> Result<Deleted, Error> {
        let deleted = self.inner.store.delete_deployment(digest);
        // After the deletion, so that a run which loaded the deployment before it cannot put
        // its tasklet back into the warm set after it.
        self.inner.warm.forget(digest);
        deleted.map_err(|e| missing_deployment(digest, e))
    }

    /// How many linked tasklets are kept warm now, all deployments together.
    pub fn warm_tasklets(&self) -> usize {
        self.inner.warm.len()
    }
}

impl Inner {
    /// The stored deployment `digest`.
    pub(crate) fn deployment(&self, digest: &Digest) -> Result<Deployment, Error> {
        self.store
            .deployment(digest)
            .map_err(|e| missing_deployment(digest, e))
    }

    /// A stored deployment's manifest, read (digest-verified) and parsed.
    pub(crate) fn manifest(&self, deployment: &Deployment) -> Result<Manifest, Error> {
        let bytes = self.store.read_blob(&deployment.manifest.digest)?;
        manifest::parse(&bytes, &deployment.component.digest).map_err(|(line, message)| {
            Error::Unloadable {
                digest: deployment.digest,
                message: format!(
                    "its manifest is not valid here: {}{message}",
                    line.map(|l| format!("line {l}: ")).unwrap_or_default()
                ),
            }
        })
    }
}

/// A store error about deployment `digest`, where the store lacking it is [`Error::NotFound`].
fn missing_deployment(digest: &Digest, e: tasklet_store::Error) -> Error {
    if e.is_not_found() {
        Error::NotFound { digest: *digest }
    } else {
        Error::Store(e)
    }
}
