//! The node-wide module cache: what loading a module compiled, kept by the host for every lease
//! on the node, so that loading a module any lease's worker has compiled before costs a lookup
//! and no compile (docs/design.md, "Module cache").
//!
//! Keyed by a SHA-256 ([`ModuleKey`]) over a domain tag, the kind of text (PTX or CUDA C), the
//! text, the NVRTC options, and what the compiled code depends on in the device (backend,
//! compute capability, driver version). Valued by what the worker compiled: for PTX on cuda the
//! cubin the driver's linker made of it; for CUDA C the PTX NVRTC produced and, on cuda, the
//! cubin. A value is only ever what one of this host's workers produced from exactly the text
//! under its key; the worker still takes each module's kernel table from the PTX, so what a
//! tenant may launch is what it would be without the cache. A cached image holds code only: a
//! module's `.global` variables live in each loaded copy, never here.
//!
//! Bounded by entries ([`MAX_ENTRIES`]) and bytes ([`MAX_BYTES`]), the least recently used
//! evicted first. Hits, misses and evictions are counted for the node's metrics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use sha2::{Digest, Sha256};
use tasklet_worker::LoadedModule;

use crate::error::GpuError;
use crate::lease::{Device, Lease, LeaseManager};

/// Entries the cache holds at most: a node's working set of distinct modules, with room to spare.
pub const MAX_ENTRIES: usize = 256;
/// Bytes of compiled code (PTX and images together) the cache holds at most.
pub const MAX_BYTES: usize = 256 << 20;

/// Ties the digest to this use and layout: a key of another scheme never equals one of these.
const DOMAIN: &[u8] = b"tasklet module cache v1\0";

/// What the text of a load is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleKind {
    Ptx,
    CudaC,
}

/// What a device's compiled code depends on: code compiled for one is loaded only on a device
/// with the same identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceIdentity<'a> {
    /// `emu` or `cuda`.
    pub backend: &'a str,
    pub compute_capability: (u32, u32),
    pub driver_version: u32,
}

/// The SHA-256 a cached module is found by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModuleKey([u8; 32]);

impl ModuleKey {
    /// The key of loading `text` (with NVRTC `options`, for CUDA C) on `device`. Every part is
    /// length-prefixed, so no two different loads share the digest's input.
    pub fn new(
        kind: ModuleKind,
        text: &str,
        options: &[String],
        device: &DeviceIdentity<'_>,
    ) -> ModuleKey {
        let mut h = Sha256::new();
        let mut part = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        part(DOMAIN);
        part(match kind {
            ModuleKind::Ptx => b"ptx",
            ModuleKind::CudaC => b"cuda-c",
        });
        part(text.as_bytes());
        part(&(options.len() as u64).to_le_bytes());
        for o in options {
            part(o.as_bytes());
        }
        part(device.backend.as_bytes());
        part(&device.compute_capability.0.to_le_bytes());
        part(&device.compute_capability.1.to_le_bytes());
        part(&device.driver_version.to_le_bytes());
        ModuleKey(h.finalize().into())
    }
}

/// What a load compiled: the PTX NVRTC produced (CUDA C; empty for PTX, whose text the caller
/// has) and the device code (cuda: a cubin; empty where the backend compiles none).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CachedModule {
    pub ptx: Arc<str>,
    pub image: Arc<[u8]>,
}

impl CachedModule {
    fn bytes(&self) -> usize {
        self.ptx.len() + self.image.len()
    }
}

/// Counts since the host started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModuleCacheStats {
    /// Loads that found what they compile in the cache.
    pub hits: u64,
    /// Loads that found nothing and compiled.
    pub misses: u64,
    /// Entries dropped to stay within the bounds.
    pub evictions: u64,
    pub entries: usize,
    pub bytes: usize,
}

struct Entry {
    value: CachedModule,
    /// When it was last inserted or found (the cache's own clock).
    used: u64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<ModuleKey, Entry>,
    bytes: usize,
    clock: u64,
}

/// The cache, shared by every lease of a host (one per `LeaseManager`).
pub struct ModuleCache {
    inner: Mutex<Inner>,
    max_entries: usize,
    max_bytes: usize,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

impl Default for ModuleCache {
    fn default() -> Self {
        ModuleCache::with_bounds(MAX_ENTRIES, MAX_BYTES)
    }
}

impl ModuleCache {
    /// A cache of at most `max_entries` entries and `max_bytes` bytes.
    pub fn with_bounds(max_entries: usize, max_bytes: usize) -> ModuleCache {
        ModuleCache {
            inner: Mutex::default(),
            max_entries,
            max_bytes,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What is cached under `key`, counted as a hit (and made the most recently used), or
    /// `None`, counted as a miss.
    pub fn get(&self, key: &ModuleKey) -> Option<CachedModule> {
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        let found = inner.map.get_mut(key).map(|e| {
            e.used = now;
            e.value.clone()
        });
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Keeps `value` under `key` (replacing what was there), evicting the least recently used
    /// entries until both bounds hold. A value with nothing in it, or larger than the whole
    /// byte bound, is not kept.
    pub fn insert(&self, key: ModuleKey, value: CachedModule) {
        let size = value.bytes();
        if size == 0 || size > self.max_bytes {
            return;
        }
        let mut inner = self.lock();
        inner.clock += 1;
        let used = inner.clock;
        if let Some(old) = inner.map.insert(key, Entry { value, used }) {
            inner.bytes -= old.value.bytes();
        }
        inner.bytes += size;
        while inner.map.len() > self.max_entries || inner.bytes > self.max_bytes {
            // At most MAX_ENTRIES to scan, and only when full: no ordered index to keep.
            let Some(oldest) = inner
                .map
                .iter()
                .filter(|(k, _)| **k != key)
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| *k)
            else {
                break;
            };
            if let Some(e) = inner.map.remove(&oldest) {
                inner.bytes -= e.value.bytes();
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Drops what is under `key` (an image a device refused): a bad entry is never served twice.
    pub fn remove(&self, key: &ModuleKey) {
        let mut inner = self.lock();
        if let Some(e) = inner.map.remove(key) {
            inner.bytes -= e.value.bytes();
        }
    }

    pub fn stats(&self) -> ModuleCacheStats {
        let inner = self.lock();
        ModuleCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            entries: inner.map.len(),
            bytes: inner.bytes,
        }
    }
}

impl DeviceIdentity<'_> {
    fn of(device: &Device) -> DeviceIdentity<'_> {
        DeviceIdentity {
            backend: device.backend,
            compute_capability: device.compute_capability,
            driver_version: device.driver_version,
        }
    }
}

impl LeaseManager {
    /// Loads PTX under `lease` (see [`LeaseManager::load_ptx_cached`]), its `.global`
    /// variables charged to the lease ([`LeaseManager::charge_variables`]).
    pub fn load_module(&self, lease: &Lease, ptx: &str) -> Result<LoadedModule, GpuError> {
        let loaded = self.load_ptx_cached(lease, ptx)?;
        self.charge_variables(lease, loaded)
    }

    /// Compiles CUDA C and loads it under `lease` (see [`LeaseManager::load_source_cached`]),
    /// its `.global` variables charged to the lease.
    pub fn load_source(
        &self,
        lease: &Lease,
        source: &str,
        options: &[String],
    ) -> Result<LoadedModule, GpuError> {
        let loaded = self.load_source_cached(lease, source, options)?;
        self.charge_variables(lease, loaded)
    }

    /// Loads PTX under `lease` through the node-wide cache: on cuda, the cubin an earlier load
    /// of exactly this text compiled on a device like the lease's, in any lease's worker, goes
    /// with it and the worker loads that, with no JIT; what the worker compiles is kept for the
    /// next. The emulator compiles no PTX (it interprets it): its loads go straight to the
    /// worker and are not counted.
    fn load_ptx_cached(&self, lease: &Lease, ptx: &str) -> Result<LoadedModule, GpuError> {
        let device = self.device_of(lease);
        if device.backend != "cuda" {
            return self.with_worker(lease, |w| w.load_module(ptx));
        }
        // A load of what this lease's worker already holds is answered by its client, with no
        // hash of the text and no image to send.
        if let Some(again) = self.with_worker(lease, |w| w.load_again(ptx))? {
            return Ok(again);
        }
        let key = ModuleKey::new(ModuleKind::Ptx, ptx, &[], &DeviceIdentity::of(device));
        let cache = self.module_cache();
        let image = cache.get(&key).map(|c| c.image).unwrap_or_default();
        let (loaded, compiled) = self.with_worker(lease, |w| w.load_module_cached(ptx, &image))?;
        if compiled.image_refused {
            cache.remove(&key);
        }
        cache.insert(
            key,
            CachedModule {
                ptx: "".into(),
                image: compiled.image.into(),
            },
        );
        Ok(loaded)
    }

    /// Compiles CUDA C and loads it under `lease` through the node-wide cache: where an earlier
    /// load of exactly this source with these options compiled it on a device like the lease's,
    /// the worker loads the PTX NVRTC produced then (on cuda with the cubin made of it), and
    /// NVRTC is not run again; otherwise what the worker compiles is kept for the next.
    fn load_source_cached(
        &self,
        lease: &Lease,
        source: &str,
        options: &[String],
    ) -> Result<LoadedModule, GpuError> {
        let device = self.device_of(lease);
        let key = ModuleKey::new(
            ModuleKind::CudaC,
            source,
            options,
            &DeviceIdentity::of(device),
        );
        let cache = self.module_cache();
        if let Some(hit) = cache.get(&key) {
            let (loaded, compiled) =
                self.with_worker(lease, |w| w.load_module_cached(&hit.ptx, &hit.image))?;
            if compiled.image_refused {
                // The PTX stays good: kept with the image compiled from it now (if any).
                cache.insert(
                    key,
                    CachedModule {
                        ptx: hit.ptx,
                        image: compiled.image.into(),
                    },
                );
            }
            return Ok(loaded);
        }
        let (loaded, compiled) =
            self.with_worker(lease, |w| w.load_source_cached(source, options))?;
        // No PTX back (a worker's own cache answered, or it did not fit the channel): nothing
        // to keep; an image without its PTX is never kept.
        if !compiled.ptx.is_empty() {
            cache.insert(
                key,
                CachedModule {
                    ptx: compiled.ptx.into(),
                    image: compiled.image.into(),
                },
            );
        }
        Ok(loaded)
    }

    /// Hits, misses and evictions of the node-wide module cache since the host started, and
    /// what it holds now.
    pub fn module_cache_stats(&self) -> ModuleCacheStats {
        self.module_cache().stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CUDA_90: DeviceIdentity<'static> = DeviceIdentity {
        backend: "cuda",
        compute_capability: (9, 0),
        driver_version: 13000,
    };

    fn key(text: &str) -> ModuleKey {
        ModuleKey::new(ModuleKind::Ptx, text, &[], &CUDA_90)
    }

    fn image(n: usize) -> CachedModule {
        CachedModule {
            ptx: "".into(),
            image: vec![7u8; n].into(),
        }
    }

    #[test]
    fn the_key_covers_kind_text_options_and_device() {
        let base = ModuleKey::new(ModuleKind::CudaC, "k", &["-O3".into()], &CUDA_90);
        let others = [
            ModuleKey::new(ModuleKind::Ptx, "k", &["-O3".into()], &CUDA_90),
            ModuleKey::new(ModuleKind::CudaC, "k ", &["-O3".into()], &CUDA_90),
            ModuleKey::new(ModuleKind::CudaC, "k", &[], &CUDA_90),
            ModuleKey::new(ModuleKind::CudaC, "k", &["-O3".into(), "".into()], &CUDA_90),
            // The same bytes split differently between text and options.
            ModuleKey::new(ModuleKind::CudaC, "k-O3", &[], &CUDA_90),
            ModuleKey::new(
                ModuleKind::CudaC,
                "k",
                &["-O3".into()],
                &DeviceIdentity {
                    compute_capability: (8, 0),
                    ..CUDA_90
                },
            ),
            ModuleKey::new(
                ModuleKind::CudaC,
                "k",
                &["-O3".into()],
                &DeviceIdentity {
                    driver_version: 12080,
                    ..CUDA_90
                },
            ),
            ModuleKey::new(
                ModuleKind::CudaC,
                "k",
                &["-O3".into()],
                &DeviceIdentity {
                    backend: "emu",
                    ..CUDA_90
                },
            ),
        ];
        for (i, o) in others.iter().enumerate() {
            assert_ne!(&base, o, "variant {i}");
        }
        assert_eq!(
            base,
            ModuleKey::new(ModuleKind::CudaC, "k", &["-O3".into()], &CUDA_90)
        );
    }

    #[test]
    fn hits_misses_and_replacement_are_counted() {
        let c = ModuleCache::default();
        assert_eq!(c.get(&key("a")), None);
        c.insert(key("a"), image(10));
        assert_eq!(c.get(&key("a")), Some(image(10)));
        c.insert(key("a"), image(4));
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.evictions), (1, 1, 0));
        assert_eq!((s.entries, s.bytes), (1, 4), "replaced, not added");
        c.remove(&key("a"));
        assert_eq!(c.get(&key("a")), None);
        assert_eq!((c.stats().entries, c.stats().bytes), (0, 0));
        // Nothing compiled: nothing kept.
        c.insert(key("b"), CachedModule::default());
        assert_eq!(c.stats().entries, 0);
    }

    #[test]
    fn the_entry_bound_evicts_the_least_recently_used() {
        let c = ModuleCache::with_bounds(3, usize::MAX);
        for t in ["a", "b", "c"] {
            c.insert(key(t), image(1));
        }
        // "a" used: "b" is now the oldest.
        assert!(c.get(&key("a")).is_some());
        c.insert(key("d"), image(1));
        let s = c.stats();
        assert_eq!((s.entries, s.evictions), (3, 1));
        assert!(c.get(&key("b")).is_none(), "the least recently used went");
        for t in ["a", "c", "d"] {
            assert!(c.get(&key(t)).is_some(), "{t} stays");
        }
    }

    #[test]
    fn the_byte_bound_evicts_until_it_holds() {
        let c = ModuleCache::with_bounds(usize::MAX, 100);
        c.insert(key("a"), image(40));
        c.insert(key("b"), image(40));
        c.insert(key("c"), image(40));
        let s = c.stats();
        assert_eq!((s.entries, s.bytes, s.evictions), (2, 80, 1));
        assert!(c.get(&key("a")).is_none());
        // One entry as large as the bound pushes out every other.
        c.insert(key("big"), image(100));
        let s = c.stats();
        assert_eq!((s.entries, s.bytes, s.evictions), (1, 100, 3));
        // Larger than the bound: not kept, nothing evicted for it.
        c.insert(key("huge"), image(101));
        assert_eq!(c.stats().entries, 1);
        assert!(c.get(&key("big")).is_some());
    }

    #[test]
    fn the_default_bounds_bite() {
        let c = ModuleCache::default();
        for i in 0..MAX_ENTRIES + 5 {
            c.insert(key(&i.to_string()), image(1));
        }
        let s = c.stats();
        assert_eq!((s.entries, s.evictions), (MAX_ENTRIES, 5));
        // The byte bound at its default: one image shared by the entries (the bound counts
        // each entry's bytes), so the test holds 1/4 of it in memory.
        let quarter = image(MAX_BYTES / 4);
        let c = ModuleCache::default();
        for i in 0..5 {
            c.insert(key(&i.to_string()), quarter.clone());
        }
        let s = c.stats();
        assert_eq!((s.entries, s.bytes, s.evictions), (4, MAX_BYTES, 1));
    }
}
