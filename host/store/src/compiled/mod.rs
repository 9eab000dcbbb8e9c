//! The compiled-component cache: what an engine made of a component, kept so that the next run
//! skips compiling it.
//!
//! An entry is keyed by the component's digest and an engine fingerprint that the caller
//! supplies (the runtime passes a hash of wasmtime's `Engine::precompile_compatibility_hash`),
//! so an engine that could not load an entry never finds it: a changed engine simply misses,
//! and its old entries age out. Entries carry a checksum of their bytes, checked on every read;
//! a damaged entry is removed and reported as [`Lookup::Discarded`], which a caller treats as a
//! miss.
//!
//! [`CompiledCache::get`] returns an entry's bytes; [`CompiledCache::open`] returns it as an
//! open file whose first bytes are the compiled ones, for an engine that maps the file rather
//! than copying it (see `entry` for the layout).
//!
//! The cache holds at most [`StoreConfig::compiled_cache_bytes`](crate::StoreConfig) bytes.
//! Each put evicts the entries used longest ago until the rest fit: "used" is the file's
//! modification time, set when the entry is written and again on every hit (access times are
//! not used, since filesystems mounted `noatime` or `relatime` do not keep them).

mod entry;

use std::io::{Read, Seek, SeekFrom};
use std::time::SystemTime;

use cap_std::fs::{File, Metadata};

use crate::digest::Digest;
use crate::error::Error;
use crate::layout::{compiled_name, compiled_prefix, is_compiled_name};
use crate::store::Store;
use crate::temp::TempFile;

/// The compiled-component cache of a store; see [`Store::compiled`].
pub struct CompiledCache<'s> {
    store: &'s Store,
}

/// What a cache lookup found: `T` is the compiled bytes ([`CompiledCache::get`]) or the open
/// entry ([`CompiledCache::open`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<T = Vec<u8>> {
    /// The compiled bytes, verified.
    Hit(T),
    /// No entry for this component and engine.
    Miss,
    /// An entry was there but damaged; it has been removed. Compile, and put the result.
    Discarded {
        /// What was wrong with it.
        reason: String,
    },
}

impl<T> Lookup<T> {
    /// The compiled bytes of a hit; `None` for a miss of either kind.
    pub fn into_hit(self) -> Option<T> {
        match self {
            Lookup::Hit(bytes) => Some(bytes),
            Lookup::Miss | Lookup::Discarded { .. } => None,
        }
    }
}

/// A verified entry, open for reading: the compiled bytes are its first
/// [`CachedFile::compiled_len`] bytes, and the rest is the cache's own trailer, which an engine
/// that maps the file ignores (see `entry`).
#[derive(Debug)]
pub struct CachedFile {
    file: std::fs::File,
    compiled_len: u64,
}

impl CachedFile {
    /// The open entry. It is the file that was verified: load from it (or from its
    /// `/proc/self/fd` path), not from a path looked up again.
    pub fn file(&self) -> &std::fs::File {
        &self.file
    }

    /// How many of the file's first bytes are the compiled ones.
    pub fn compiled_len(&self) -> u64 {
        self.compiled_len
    }

    /// The compiled bytes, read into memory.
    pub fn read_compiled(&self) -> std::io::Result<Vec<u8>> {
        let mut bytes = Vec::with_capacity(usize::try_from(self.compiled_len).unwrap_or(0));
        let mut file = &self.file;
        file.seek(SeekFrom::Start(0))?;
        file.take(self.compiled_len).read_to_end(&mut bytes)?;
        if bytes.len() as u64 != self.compiled_len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(bytes)
    }
}

/// How much of an entry the streamed check reads at a time: large enough that system calls
/// cost little, small enough to stay in the CPU's caches.
const CHECK_CHUNK: usize = 256 * 1024;

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
        let verdict = match self.too_large(&found) {
            Some(reason) => Err(reason),
            None => {
                let mut bytes = Vec::new();
                bytes.reserve_exact(usize::try_from(found.len()).unwrap_or(0));
                // Read no further than the length found: a file growing under us is damaged.
                (&file)
                    .take(found.len().saturating_add(1))
                    .read_to_end(&mut bytes)
                    .map_err(|err| inner.compiled.error("read", &name, err))?;
                entry::verify(&bytes, component, engine).map(|len| {
                    bytes.truncate(len);
                    bytes
                })
            }
        };
        self.settle(&name, file, &found, verdict)
    }

    /// As [`CompiledCache::get`], with the entry left open rather than read into memory; it
    /// is read through once, to verify its checksum.
    pub fn open(&self, component: &Digest, engine: &str) -> Result<Lookup<CachedFile>, Error> {
        check_engine(engine)?;
        let inner = &self.store.inner;
        let name = compiled_name(component, engine);
        let Some((file, found)) = inner.compiled.open_file(&name)? else {
            return Ok(Lookup::Miss);
        };
        let verdict = match self.too_large(&found) {
            Some(reason) => Err(reason),
            None => verify_file(&file, found.len(), component, engine)
                .map_err(|err| inner.compiled.error("read", &name, err))?,
        };
        let file_for_caller = file
            .try_clone()
            .map_err(|err| inner.compiled.error("open", &name, err))?;
        let lookup = self.settle(&name, file, &found, verdict)?;
        Ok(match lookup {
            Lookup::Hit(compiled_len) => Lookup::Hit(CachedFile {
                file: file_for_caller.into_std(),
                compiled_len,
            }),
            Lookup::Miss => Lookup::Miss,
            Lookup::Discarded { reason } => Lookup::Discarded { reason },
        })
    }

    /// Why an entry `found` is refused before it is read, if it is.
    fn too_large(&self, found: &Metadata) -> Option<String> {
        let bound = self.store.inner.config.compiled_cache_bytes;
        // Never stored so large: written by something else, or the bound shrank since.
        (found.len() > bound)
            .then(|| format!("{} bytes, more than the cache's {bound}", found.len()))
    }

    /// After an entry's check: a hit makes it the most recently used; a failure removes it.
    fn settle<T>(
        &self,
        name: &str,
        file: File,
        found: &Metadata,
        verdict: Result<T, String>,
    ) -> Result<Lookup<T>, Error> {
        let inner = &self.store.inner;
        match verdict {
            Ok(hit) => {
                // A failure to record the use (a read-only folder) only makes eviction less
                // accurate, so it is ignored.
                let _ = file.into_std().set_modified(SystemTime::now());
                Ok(Lookup::Hit(hit))
            }
            Err(reason) => {
                let _cache = inner.cache();
                inner.remove_if_same(&inner.compiled, name, found)?;
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
        let trailer = entry::trailer(component, engine, compiled);
        let len = (trailer.len() as u64).saturating_add(compiled.len() as u64);
        if len > inner.config.compiled_cache_bytes {
            return Ok(CachePut {
                stored: false,
                evicted: 0,
            });
        }
        let mut temp = TempFile::create(inner)?;
        temp.write_all(compiled)?;
        temp.write_all(&trailer)?;
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

/// Checks the entry open as `file`, `len` bytes long, for (`component`, `engine`): its trailer
/// first (a stale entry is refused without reading the rest), then its checksum, read through
/// in chunks. `Ok(Err(why))` for a damaged or foreign entry; `Err` when it cannot be read.
fn verify_file(
    file: &File,
    len: u64,
    component: &Digest,
    engine: &str,
) -> std::io::Result<Result<u64, String>> {
    let mut file = file;
    let tail_len = (entry::trailer_len(engine.len()) as u64).min(len);
    let mut tail = vec![0; tail_len as usize];
    file.seek(SeekFrom::Start(len - tail_len))?;
    file.read_exact(&mut tail)?;
    let trailer = match entry::check_trailer(&tail, len, component, engine) {
        Ok(trailer) => trailer,
        Err(why) => return Ok(Err(why)),
    };
    file.seek(SeekFrom::Start(0))?;
    let mut checksum = crc32fast::Hasher::new();
    let mut chunk = vec![0; CHECK_CHUNK];
    let mut left = trailer.checked_len;
    while left > 0 {
        let want = usize::try_from(left).map_or(chunk.len(), |left| left.min(chunk.len()));
        let got = file.read(&mut chunk[..want])?;
        if got == 0 {
            return Ok(Err("cut short while it was read".into()));
        }
        checksum.update(&chunk[..got]);
        left -= got as u64;
    }
    if checksum.finalize() != trailer.checksum {
        return Ok(Err(entry::checksum_mismatch()));
    }
    Ok(Ok(trailer.payload_len))
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
