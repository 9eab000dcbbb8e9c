//! `tasklet run`'s compiled-component cache: what the engine made of a component, kept on disk
//! so that the next run of the same component skips compiling it.
//!
//! It is the compiled cache of a [`tasklet_store::Store`], the one a node's deploy store keeps:
//! entries keyed by the component's digest and the engine's fingerprint
//! ([`Runner::engine_fingerprint`]), verified on every read (a damaged entry is removed and the
//! component compiled again), and bounded in size, the entries used longest ago evicted first.
//! The store's other folders stay empty here.
//!
//! A warm start neither reads nor hashes the component when its file is unchanged since it was
//! last hashed ([`source_digest`]), and loads the entry by mapping its file
//! ([`Runner::load_precompiled_file`]) once the store has checked it: an 18 MB Python component
//! starts without copying its 35 MB compiled form (~7 ms on the 2-core development machine,
//! against ~100 ms reading, hashing and copying both).
//!
//! Where: `--compile-cache DIR`, else `$TASKLET_COMPILE_CACHE`, else `$XDG_CACHE_HOME/tasklet`,
//! else `~/.cache/tasklet`; `off` (flag or variable) turns it off. A cache that cannot be
//! opened or written costs a compile, never the run.

mod source_digest;

use anyhow::{anyhow, bail, Context, Result};
use source_digest::SourceDigests;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tasklet_runtime::config::units::parse_size;
use tasklet_runtime::config::Grant;
use tasklet_runtime::{HostError, Manifest, Runner, Tasklet};
use tasklet_store::{CachedFile, Digest, Lookup, Store, StoreConfig};

/// The variable naming the cache's folder (or `off`) when `--compile-cache` is not given.
pub const DIR_VAR: &str = "TASKLET_COMPILE_CACHE";
/// The variable bounding the cache's size when `--compile-cache-size` is not given.
pub const SIZE_VAR: &str = "TASKLET_COMPILE_CACHE_SIZE";
/// The default bound: room for dozens of compiled Python or JavaScript tasklets (each tens of
/// MiB) and thousands of Rust ones.
const DEFAULT_SIZE: u64 = 1 << 30;

/// The cache options of `tasklet run`.
#[derive(clap::Args, Debug)]
pub struct CompileCacheArgs {
    /// Keep compiled components in DIR (`off`: compile on every run). Default:
    /// $TASKLET_COMPILE_CACHE, else $XDG_CACHE_HOME/tasklet, else ~/.cache/tasklet.
    #[arg(long, value_name = "DIR|off")]
    pub compile_cache: Option<String>,
    /// The most the compiled cache may hold (e.g. 512MiB); the entries used longest ago are
    /// evicted past it. Default: $TASKLET_COMPILE_CACHE_SIZE, else 1GiB.
    #[arg(long, value_name = "SIZE")]
    pub compile_cache_size: Option<String>,
}

/// How a run's component was made ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadKind {
    /// Read from the cache: not compiled.
    Hit,
    /// Compiled (the cache had no entry), and cached.
    Miss,
    /// The cache's entry was damaged or no longer loads: discarded, compiled again, replaced.
    Discarded(String),
    /// Compiled, with no cache.
    Off,
}

impl LoadKind {
    /// `hit`, `miss`, `discarded` or `off`: `--stats`' `compiled-cache=` value.
    pub fn as_str(&self) -> &'static str {
        match self {
            LoadKind::Hit => "hit",
            LoadKind::Miss => "miss",
            LoadKind::Discarded(_) => "discarded",
            LoadKind::Off => "off",
        }
    }
}

/// How a component was made ready, and how long that took (reading, hashing, compiling or
/// loading from the cache, and linking).
#[derive(Debug, Clone)]
pub struct Loaded {
    pub kind: LoadKind,
    pub took: Duration,
}

/// An opened cache for one engine.
pub struct CompileCache {
    store: Store,
    engine: String,
    sources: SourceDigests,
}

impl CompileCache {
    /// The cache `args` (or the environment) names, for `runner`'s engine; `None` when it is
    /// turned off or cannot be opened (which is said on stderr: the run goes on uncached).
    pub fn open(args: &CompileCacheArgs, runner: &Runner) -> Result<Option<CompileCache>> {
        let size = match args
            .compile_cache_size
            .clone()
            .or_else(|| std::env::var(SIZE_VAR).ok())
        {
            Some(text) => {
                parse_size(text.trim()).map_err(|e| anyhow!("bad compiled-cache size: {e}"))?
            }
            None => DEFAULT_SIZE,
        };
        let Some(dir) = cache_dir(args.compile_cache.clone())? else {
            return Ok(None);
        };
        let config = StoreConfig {
            compiled_cache_bytes: size,
            ..StoreConfig::default()
        };
        match Store::open(&dir, config) {
            Ok(store) => Ok(Some(CompileCache {
                store,
                engine: runner.engine_fingerprint(),
                sources: SourceDigests::new(&dir),
            })),
            Err(e) => {
                errln!("tasklet: no compiled cache ({e}); compiling on every run");
                Ok(None)
            }
        }
    }
}

/// The cache's folder: `flag`, else the environment's choice, else the user's cache folder;
/// `None` when turned off, or when there is no home to put it in.
fn cache_dir(flag: Option<String>) -> Result<Option<PathBuf>> {
    let chosen = flag.or_else(|| std::env::var(DIR_VAR).ok().filter(|v| !v.is_empty()));
    match chosen.as_deref() {
        Some("off") => return Ok(None),
        Some("") => bail!("--compile-cache needs a folder, or `off`"),
        Some(dir) => return Ok(Some(PathBuf::from(dir))),
        None => {}
    }
    let env_dir = |key: &str| {
        std::env::var_os(key)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    Ok(env_dir("XDG_CACHE_HOME")
        .or_else(|| env_dir("HOME").map(|home| home.join(".cache")))
        .map(|base| base.join("tasklet")))
}

/// The manifest's component compiled by `runner` and linked to run with `grant`: from `cache`
/// when it holds it, else compiled (and put there).
pub fn load(
    runner: &Runner,
    cache: Option<&CompileCache>,
    manifest: Manifest,
    grant: Grant,
) -> Result<(Tasklet, Loaded)> {
    let started = Instant::now();
    let Some(cache) = cache else {
        let tasklet = runner.load(manifest, grant)?;
        return Ok((tasklet, loaded(LoadKind::Off, started)));
    };
    let path = manifest.component.clone();
    let hashed = cache
        .sources
        .digest(&path)
        .with_context(|| format!("cannot read component {}", path.display()))?;
    let compiled = cache.store.compiled();
    let kind = match compiled.open(&hashed.digest, &cache.engine) {
        Ok(Lookup::Hit(entry)) => {
            // SAFETY: entries under this engine fingerprint are what `Runner::precompile` of
            // such an engine made (`put` below, or a node sharing the folder), in the user's own
            // cache folder; the store verified this one's checksum through the very file handed
            // on here, and entries are only ever written whole and renamed into place, never
            // rewritten, so the bytes mapped are the ones verified.
            match unsafe { load_entry(runner, manifest.clone(), grant, &entry) } {
                Ok(tasklet) => {
                    let loaded = loaded(LoadKind::Hit, started);
                    tracing::info!(component = %hashed.digest, took = ?loaded.took, "compiled cache hit");
                    return Ok((tasklet, loaded));
                }
                // Same engine, yet it no longer links (the host's interfaces changed): compiled
                // again below, and the new form replaces it.
                Err(e) => LoadKind::Discarded(format!("it no longer loads: {e}")),
            }
        }
        Ok(Lookup::Miss) => LoadKind::Miss,
        Ok(Lookup::Discarded { reason }) => LoadKind::Discarded(reason),
        Err(e) => LoadKind::Discarded(format!("cannot read it: {e}")),
    };
    // The entry is keyed by the digest of the bytes compiled, read now if the digest came from
    // a record: the file may have changed since that lookup.
    let (wasm, digest) = match hashed.bytes {
        Some(bytes) => (bytes, hashed.digest),
        None => {
            let bytes = std::fs::read(&path)
                .with_context(|| format!("cannot read component {}", path.display()))?;
            let digest = Digest::of(&bytes);
            (bytes, digest)
        }
    };
    if let LoadKind::Discarded(why) = &kind {
        errln!(
            "tasklet: compiling {} again: its cached form was discarded ({why})",
            path.display()
        );
    }
    let bytes = runner
        .precompile(&wasm)
        .with_context(|| format!("cannot compile {}", path.display()))?;
    // SAFETY: `bytes` is what this runner's `precompile` just returned, untouched.
    let tasklet = unsafe { runner.load_precompiled(manifest, grant, &bytes) }?;
    let loaded = loaded(kind, started);
    // A cache that cannot take it (a full disk, a read-only folder) costs the next run a compile.
    match compiled.put(&digest, &cache.engine, &bytes) {
        Ok(put) if put.stored => {}
        Ok(_) => errln!(
            "tasklet: {} compiled is {} bytes, more than the compiled cache holds; not cached",
            path.display(),
            bytes.len()
        ),
        Err(e) => errln!("tasklet: could not cache the compiled component: {e}"),
    }
    tracing::info!(component = %digest, took = ?loaded.took, cache = loaded.kind.as_str(), "compiled");
    Ok((tasklet, loaded))
}

/// Links the cached entry `entry`: on Linux by mapping the open file through its
/// `/proc/self/fd` path (the same file the store verified, however its name changes meanwhile);
/// elsewhere, or without /proc, from its bytes read into memory.
///
/// # Safety
///
/// `entry` holds what `Runner::precompile` of `runner`'s engine made, verified, and nothing
/// writes the file while the tasklet lives.
unsafe fn load_entry(
    runner: &Runner,
    manifest: Manifest,
    grant: Grant,
    entry: &CachedFile,
) -> Result<Tasklet, HostError> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let path = PathBuf::from(format!("/proc/self/fd/{}", entry.file().as_raw_fd()));
        if path.exists() {
            // SAFETY: the caller's contract; the path is the verified file itself.
            return unsafe { runner.load_precompiled_file(manifest, grant, &path) };
        }
    }
    let bytes = entry.read_compiled().map_err(|e| HostError::Component {
        path: manifest.component.display().to_string(),
        message: format!("cannot read its compiled form: {e}"),
    })?;
    // SAFETY: the caller's contract.
    unsafe { runner.load_precompiled(manifest, grant, &bytes) }
}

fn loaded(kind: LoadKind, started: Instant) -> Loaded {
    Loaded {
        kind,
        took: started.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_turns_the_cache_off_and_a_folder_moves_it() {
        assert_eq!(cache_dir(Some("off".into())).unwrap(), None);
        assert_eq!(
            cache_dir(Some("/tmp/c".into())).unwrap(),
            Some(PathBuf::from("/tmp/c"))
        );
        assert!(cache_dir(Some(String::new())).is_err());
    }
}
