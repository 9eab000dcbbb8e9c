//! Pushing a deployment: the manifest checked as it arrives, the component received within the
//! size limit, then compiled and linked by this node's engine, and only then stored, with its
//! compiled form put in the compiled cache so that no run compiles it.
//!
//! A push that fails at any step leaves the store as it was.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tasklet_runtime::config::Manifest;
use tasklet_store::{Deployment, Digest, MAX_BLOB_SETTING};

use crate::config::{MAX_COMPONENT_SETTING, MAX_MANIFEST_BYTES};
use crate::deployer::{Deployer, Inner};
use crate::error::Error;
use crate::load::compile_and_link;
use crate::manifest::{component_path, parse_pushed};

/// What a push stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pushed {
    /// The deployment's digest: what `tasklet deploy push` prints and a run names.
    pub digest: Digest,
    /// The component's digest.
    pub component: Digest,
    /// Whether the store already held this deployment (the push then changed nothing).
    pub already_present: bool,
    /// How long compiling (and linking) the component took; `None` when the compiled cache
    /// already held it (pushed before, alone or with another manifest).
    pub compiled_in: Option<Duration>,
}

/// A push in progress: feed it the component's chunks as they arrive, then
/// [`finish`](Push::finish) it. Dropping it, or any error, stores nothing.
pub struct Push {
    inner: Arc<Inner>,
    manifest_bytes: Vec<u8>,
    manifest: Manifest,
    component: Vec<u8>,
    limit: ComponentLimit,
    failed: bool,
}

/// The most bytes a component may have, and the setting that says so.
#[derive(Clone, Copy)]
struct ComponentLimit {
    bytes: u64,
    setting: &'static str,
}

impl Deployer {
    /// Starts a push of `manifest` (a `tasklet.toml`, stored as given): refused at once if it
    /// is not a valid tasklet manifest.
    pub fn start_push(&self, manifest: &[u8]) -> Result<Push, Error> {
        if manifest.len() > MAX_MANIFEST_BYTES {
            return Err(Error::ManifestTooLarge {
                len: manifest.len(),
                limit: MAX_MANIFEST_BYTES,
            });
        }
        let parsed = parse_pushed(manifest)
            .map_err(|(line, message)| Error::InvalidManifest { line, message })?;
        let inner = &self.inner;
        // The store refuses a blob past its own limit; whichever limit is lower is the one a
        // component meets first, and the one its error names.
        let store_limit = inner.store.config().max_blob_bytes;
        let limit = if store_limit < inner.config.max_component_bytes {
            ComponentLimit {
                bytes: store_limit,
                setting: MAX_BLOB_SETTING,
            }
        } else {
            ComponentLimit {
                bytes: inner.config.max_component_bytes,
                setting: MAX_COMPONENT_SETTING,
            }
        };
        Ok(Push {
            inner: Arc::clone(inner),
            manifest_bytes: manifest.to_vec(),
            manifest: parsed,
            component: Vec::new(),
            limit,
            failed: false,
        })
    }

    /// Pushes `manifest` with the component read from `component` to its end.
    pub fn push(&self, manifest: &[u8], component: impl Read) -> Result<Pushed, Error> {
        let mut push = self.start_push(manifest)?;
        // One byte past the limit tells a component at the limit from one over it.
        component
            .take(push.limit.bytes.saturating_add(1))
            .read_to_end(&mut push.component)
            .map_err(Error::ComponentRead)?;
        if push.component.len() as u64 > push.limit.bytes {
            return Err(push.too_large());
        }
        push.finish()
    }
}

impl Push {
    /// Appends `chunk` to the component. Past the size limit the push fails, keeping nothing.
    pub fn write_chunk(&mut self, chunk: &[u8]) -> Result<(), Error> {
        if self.failed {
            return Err(Error::PushClosed);
        }
        if self.len().saturating_add(chunk.len() as u64) > self.limit.bytes {
            self.failed = true;
            self.component = Vec::new();
            return Err(self.too_large());
        }
        self.component.extend_from_slice(chunk);
        Ok(())
    }

    /// How many bytes of the component have arrived.
    pub fn len(&self) -> u64 {
        self.component.len() as u64
    }

    /// Whether no byte of the component has arrived yet.
    pub fn is_empty(&self) -> bool {
        self.component.is_empty()
    }

    /// Completes the push: the component is compiled and linked (unless the compiled cache
    /// already holds it), then the deployment is stored and the compiled form cached.
    ///
    /// This compiles: seconds of CPU for a large component. An async caller runs it where
    /// blocking is allowed.
    pub fn finish(self) -> Result<Pushed, Error> {
        self.compile()?.store()
    }

    /// The first half of [`finish`](Push::finish): compiles and links the component (unless
    /// the compiled cache already holds it), storing nothing. For a caller that records who
    /// pushed what under a lock of its own around [`Compiled::store`], so that concurrent
    /// pushes of one deployment are told apart by which stored it first, without holding the
    /// lock while compiling.
    pub fn compile(self) -> Result<Compiled, Error> {
        if self.failed {
            return Err(Error::PushClosed);
        }
        let component = Digest::of(&self.component);
        let mut manifest = self.manifest;
        manifest.component = component_path(&component);
        let mut compiled = None;
        if self.inner.cached_compiled(&component).is_none() {
            let start = Instant::now();
            let (_, bytes) = compile_and_link(&self.inner, &self.component, manifest)
                .map_err(|message| Error::InvalidComponent { message })?;
            compiled = Some((bytes, start.elapsed()));
        }
        Ok(Compiled {
            inner: self.inner,
            manifest_bytes: self.manifest_bytes,
            component: self.component,
            digest: component,
            compiled,
        })
    }

    fn too_large(&self) -> Error {
        Error::ComponentTooLarge {
            limit: self.limit.bytes,
            setting: self.limit.setting,
        }
    }
}

/// A push whose component is compiled and linked, not yet stored (see [`Push::compile`]).
pub struct Compiled {
    inner: Arc<Inner>,
    manifest_bytes: Vec<u8>,
    component: Vec<u8>,
    digest: Digest,
    /// The compiled form and how long compiling took; `None` when the cache held it.
    compiled: Option<(Vec<u8>, Duration)>,
}

impl Compiled {
    /// The digest storing it gives the deployment (see [`Pushed::digest`]).
    pub fn deployment_digest(&self) -> Digest {
        Deployment::of(&self.manifest_bytes, &self.component)
            .0
            .digest
    }

    /// Stores the deployment and caches the compiled form.
    pub fn store(self) -> Result<Pushed, Error> {
        let pushed = self
            .inner
            .store
            .push_deployment(&self.manifest_bytes, &self.component)?;
        if let Some((bytes, _)) = &self.compiled {
            self.inner.cache_compiled(&self.digest, bytes);
        }
        Ok(Pushed {
            digest: pushed.deployment.digest,
            component: self.digest,
            already_present: pushed.already_present,
            compiled_in: self.compiled.map(|(_, took)| took),
        })
    }
}
