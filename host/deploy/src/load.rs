//! Loading a deployment for a run: from the warm set, else from the store's compiled cache,
//! else by compiling its component (and caching what was compiled).

use tasklet_runtime::config::Manifest;
use tasklet_runtime::{HostError, Tasklet};
use tasklet_store::{Deployment, Digest, Lookup};

use crate::deployer::Inner;
use crate::error::{one_line, Error};
use crate::manifest::asked_for;
use crate::warm::{Generation, Linked};

/// Where a run's linked tasklet came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LoadKind {
    /// Kept in memory since an earlier run: nothing was loaded.
    Warm,
    /// Read from the store's compiled cache and linked.
    Cached,
    /// Compiled from the component (the compiled cache lacked it, or held a damaged entry), then
    /// linked; what was compiled went into the cache.
    Compiled,
}

impl LoadKind {
    /// `warm`, `cached` or `compiled`.
    pub fn as_str(self) -> &'static str {
        match self {
            LoadKind::Warm => "warm",
            LoadKind::Cached => "cached",
            LoadKind::Compiled => "compiled",
        }
    }
}

impl std::fmt::Display for LoadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Inner {
    /// A linked tasklet of deployment `digest` for one run, where it came from, and the
    /// generation to give it back to the warm set with when the run is over.
    pub(crate) fn checkout(
        &self,
        digest: &Digest,
    ) -> Result<(Linked, LoadKind, Generation), Error> {
        let generation = self.warm.generation();
        if let Some(linked) = self.warm.take(digest) {
            return Ok((linked, LoadKind::Warm, generation));
        }
        let deployment = self.deployment(digest)?;
        let manifest = self.manifest(&deployment)?;
        if let Some(linked) = self.load_cached(&deployment, &manifest)? {
            return Ok((linked, LoadKind::Cached, generation));
        }
        let linked = self.compile(&deployment, manifest)?;
        Ok((linked, LoadKind::Compiled, generation))
    }

    /// The deployment's compiled form from the cache, linked; `None` when the cache has none,
    /// or had a damaged one (which the store removed).
    fn load_cached(
        &self,
        deployment: &Deployment,
        manifest: &Manifest,
    ) -> Result<Option<Linked>, Error> {
        let Some(compiled) = self.cached_compiled(&deployment.component.digest) else {
            return Ok(None);
        };
        // SAFETY: entries under this engine fingerprint are what `Runner::precompile` of such an
        // engine made (this crate puts them, as does anything else the node lets share its
        // store, on the same terms), in a folder only the node writes; and the store verified
        // this one's digest on reading it back, so a damaged entry never reaches here.
        let linked = unsafe {
            self.runner
                .load_precompiled(manifest.clone(), asked_for(manifest), &compiled)
        };
        // An entry that no longer links (the runtime's interfaces changed within one engine
        // fingerprint) is compiled anew, and the new form replaces it.
        Ok(linked.ok().map(|tasklet| Linked {
            tasklet,
            weight: compiled.len() as u64,
        }))
    }

    /// Component `component`'s compiled form, if the store's compiled cache holds a good one.
    /// The cache only saves work: one that cannot be read is a miss (a compile), said in the
    /// node's log, never a failed push or run.
    pub(crate) fn cached_compiled(&self, component: &Digest) -> Option<Vec<u8>> {
        match self.store.compiled().get(component, &self.engine) {
            Ok(Lookup::Hit(bytes)) => Some(bytes),
            Ok(Lookup::Miss) => None,
            Ok(Lookup::Discarded { reason }) => {
                tracing::warn!("the compiled cache's entry for {component} was damaged and is removed, compiling instead: {reason}");
                None
            }
            Err(err) => {
                tracing::warn!("the compiled cache failed, compiling instead: {err}");
                None
            }
        }
    }

    /// Puts `compiled` into the compiled cache for `component`. One that cannot be written (a
    /// full disk) costs the next cold run a compile, said in the node's log; what is under way
    /// goes on.
    pub(crate) fn cache_compiled(&self, component: &Digest, compiled: &[u8]) {
        if let Err(err) = self.store.compiled().put(component, &self.engine, compiled) {
            tracing::warn!("the compiled cache failed, going on uncached: {err}");
        }
    }

    /// Compiles the deployment's component, caches the result and links it.
    fn compile(&self, deployment: &Deployment, manifest: Manifest) -> Result<Linked, Error> {
        let wasm = self.store.read_blob(&deployment.component.digest)?;
        let (tasklet, compiled) =
            compile_and_link(self, &wasm, manifest).map_err(|message| Error::Unloadable {
                digest: deployment.digest,
                message,
            })?;
        self.cache_compiled(&deployment.component.digest, &compiled);
        Ok(Linked {
            tasklet,
            weight: compiled.len() as u64,
        })
    }
}

/// Compiles `wasm` and links it, as `manifest` asks: the linked tasklet and the compiled bytes
/// (for the compiled cache), or, in one line, what the engine said was wrong. Linking proves
/// what compiling does not: that the component's imports are ones the host provides and that it
/// exports the tasklet world's `run`.
pub(crate) fn compile_and_link(
    inner: &Inner,
    wasm: &[u8],
    manifest: Manifest,
) -> Result<(Tasklet, Vec<u8>), String> {
    let compiled = {
        let _compiling = inner.compiles.enter();
        inner.runner.precompile(wasm).map_err(engine_message)?
    };
    let grant = asked_for(&manifest);
    // SAFETY: `compiled` is what this runner's `precompile` just returned, untouched.
    let tasklet = unsafe { inner.runner.load_precompiled(manifest, grant, &compiled) }
        .map_err(engine_message)?;
    Ok((tasklet, compiled))
}

/// What the engine said, without the runtime's framing (which names a file path, or says
/// "cannot set up the wasm engine" for a component that does not compile).
fn engine_message(e: HostError) -> String {
    match e {
        HostError::Engine(message)
        | HostError::Component { message, .. }
        | HostError::Compile(message) => one_line(&message),
        other => one_line(&other.to_string()),
    }
}
