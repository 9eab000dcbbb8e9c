//! The compiled-component cache: what an engine made of a component, kept so that the next run
//! skips compiling it.
//!
//! An entry is keyed by the component's digest and an engine fingerprint that the caller
//! supplies (the runtime passes a hash of wasmtime's `Engine::precompile_compatibility_hash`),
//! so an engine that could not load an entry never finds it: a changed engine simply misses,
//! and its old entries age out. Entries carry the digest of their bytes, checked on every
//! read; a damaged entry is removed and reported as [`Lookup::Discarded`], which a caller
//! treats as a miss.
//!
//! The cache holds at most [`StoreConfig::compiled_cache_bytes`](crate::StoreConfig) bytes.
//! Each put evicts the entries used longest ago until the rest fit: "used" is the file's
//! modification time, set when the entry is written and again on every hit (access times are
//! not used, since filesystems mounted `noatime` or `relatime` do not keep them).

mod entry;

use std::io::Read;
use std::time::SystemTime;

use crate::digest::Digest;
use crate::error::Error;
use crate::layout::{compiled_name, compiled_prefix, is_compiled_name};
use crate::store::Store;
use crate::temp::TempFile;

/// The compiled-component cache of a store; see [`Store::compiled`].
pub struct CompiledCache<'s> {
    store: &'s Store,
}

/// What a cache lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The compiled bytes, verified.
    Hit(Vec<u8>),
    /// No entry for this component and engine.
    Miss,
    /// An entry was there but damaged; it has been removed. Compile, and put the result.
    Discarded {
        /// What was wrong with it.
        reason: String,
    },
}

impl Lookup {
    /// The compiled bytes of a hit; `None` for a miss of either kind.
    pub fn into_hit(self) -> Option<Vec<u8>> {
        match self {
            Lookup::Hit(bytes) => Some(bytes),
            Lookup::Miss | Lookup::Discarded { .. } => None,
        }
    }
}

/// What a put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePut {
    /// Whether the entry was stored: `false` when it alone is larger than the whole cache.
    pub stored: bool,
    /// How many older entries were evicted to make room.
    pub evicted: usize,
}

impl Store {
    /// The compiled-component cache.
    pub fn compiled(&self) -> CompiledCache<'_> {
        CompiledCache { store: self }
    }
}

impl CompiledCache<'_> {
    /// The compiled form of `component` made by the engine `engine`, if cached and intact.
    pub fn get(&self, component: &Digest, engine: &str) -> Result<Lookup, Error> {
        check_engine(engine)?;
        let inner = &self.store.inner;
        let name = compiled_name(component, engine);
        let Some((file, found)) = inner.compiled.open_file(&name)? else {
            return Ok(Lookup::Miss);
        };
        let bound = inner.config.compiled_cache_bytes;
        let reason = if found.len() > bound {
            // Never stored so large: written by something else, or the bound shrank since.
            Some(format!(
                "{} bytes, more than the cache's {bound}",
                found.len()
            ))
        } else {
            None
        };
        let mut bytes = Vec::new();
        if reason.is_none() {
            let capacity = usize::try_from(found.len()).unwrap_or(0);
            bytes.reserve_exact(capacity);
            // Read no further than the length found: a file growing under us is damaged.
            (&file)
                .take(found.len().saturating_add(1))
                .read_to_end(&mut bytes)
                .map_err(|err| inner.compiled.error("read", &name, err))?;
        }
        let verdict = match reason {
            Some(reason) => Err(reason),
            None => entry::verify(&bytes, component, engine),
        };
        match verdict {
            Ok(payload_start) => {
                // The hit makes the entry the most recently used. A failure to record that
                // (a read-only folder) only makes eviction less accurate, so it is ignored.
                let _ = file.into_std().set_modified(SystemTime::now());
                bytes.drain(..payload_start);
                Ok(Lookup::Hit(bytes))
            }
            Err(reason) => {
                let _cache = inner.cache();
                inner.remove_if_same(&inner.compiled, &name, &found)?;
                Ok(Lookup::Discarded { reason })
            }
        }
    }

    /// Stores `compiled`, what the engine `engine` made of `component`, replacing any entry
    /// for the same pair, then evicts the entries used longest ago until the cache fits its
    /// bound.
    pub fn put(
        &self,
        component: &Digest,
        engine: &str,
        compiled: &[u8],
    ) -> Result<CachePut, Error> {
        check_engine(engine)?;
        let inner = &self.store.inner;
        let header = entry::header(component, engine, compiled);
        let len = (header.len() as u64).saturating_add(compiled.len() as u64);
        if len > inner.config.compiled_cache_bytes {
            return Ok(CachePut {
                stored: false,
                evicted: 0,
            });
        }
        let mut temp = TempFile::create(inner)?;
        temp.write_all(&header)?;
        temp.write_all(compiled)?;
        // Set explicitly rather than left to the write: file times the kernel sets may be
        // coarser than the gap between two puts, and eviction orders by them.
        temp.set_modified(SystemTime::now())?;
        temp.sync()?;
        let name = compiled_name(component, engine);
        let _cache = inner.cache();
        temp.place(&inner.compiled, &name)?;
        let evicted = self.evict(&name)?;
        Ok(CachePut {
            stored: true,
            evicted,
        })
    }

    /// Removes every entry for `component`, whatever its engine; returns how many there were.
    pub fn remove_component(&self, component: &Digest) -> Result<usize, Error> {
        let inner = &self.store.inner;
        let prefix = compiled_prefix(component);
        let _cache = inner.cache();
        let mut removed = 0;
        for entry in inner.compiled.files()? {
            if entry.name.starts_with(&prefix) && inner.compiled.remove(&entry.name)? {
                removed += 1;
            }
        }
        if removed > 0 {
            inner.compiled.sync()?;
        }
        Ok(removed)
    }

    /// How many bytes the cache's entries take now.
    pub fn len_bytes(&self) -> Result<u64, Error> {
        let files = self.store.inner.compiled.files()?;
        Ok(files
            .iter()
            .filter(|entry| is_compiled_name(&entry.name))
            .map(|entry| entry.len)
            .sum())
    }

    /// Removes entries, least recently used first, until the cache fits its bound; `keep` (the
    /// entry just put, which fits by itself) is never removed. The caller holds the cache lock.
    fn evict(&self, keep: &str) -> Result<usize, Error> {
        let inner = &self.store.inner;
        let bound = inner.config.compiled_cache_bytes;
        let mut entries = inner.compiled.files()?;
        entries.retain(|entry| is_compiled_name(&entry.name));
        let mut total: u64 = entries.iter().map(|entry| entry.len).sum();
        entries.sort_by(|a, b| (a.modified, &a.name).cmp(&(b.modified, &b.name)));
        let mut evicted = 0;
        for entry in entries {
            if total <= bound {
                break;
            }
            if entry.name == keep {
                continue;
            }
            if inner.compiled.remove(&entry.name)? {
                evicted += 1;
            }
            total -= entry.len;
        }
        if evicted > 0 {
            inner.compiled.sync()?;
        }
        Ok(evicted)
    }
}

fn check_engine(engine: &str) -> Result<(), Error> {
    if engine.len() > entry::MAX_ENGINE_BYTES {
        return Err(Error::FingerprintTooLong {
            len: engine.len(),
            max: entry::MAX_ENGINE_BYTES,
        });
    }
    Ok(())
}
