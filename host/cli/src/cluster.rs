//! Options every command that talks to the cluster's NATS shares, and what they make.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::time::Duration;
use tasklet_cluster::{
    Cluster, Heartbeat, LiveNode, NatsConfig, Registry, ViewCache, DEFAULT_VIEW_MAX_AGE,
};

/// The environment variable that turns the registry view cache off (`off`) or sets how long a
/// view is used (`500ms`, `2s`; at most the registry's 10 s staleness bound).
pub const CACHE_ENV: &str = "TASKLET_REGISTRY_CACHE";

/// Where the cluster's NATS is and how to reach it.
#[derive(clap::Args, Debug, Clone)]
pub struct NatsArgs {
    /// The cluster's NATS (nats://HOST:PORT or tls://HOST:PORT; several separated by commas).
    #[arg(long, value_name = "URL", value_parser = nats_urls)]
    pub nats: Option<String>,
    /// A NATS credentials file (user JWT and NKey seed, as `nsc` writes them).
    #[arg(long, value_name = "FILE", requires = "nats")]
    pub nats_creds: Option<PathBuf>,
    /// The PEM file of the CA that signed the NATS server's certificate (implies TLS).
    #[arg(long, value_name = "FILE", requires = "nats")]
    pub nats_ca: Option<PathBuf>,
    /// A client certificate (PEM) for a NATS server that verifies its clients (implies TLS;
    /// with --nats-key).
    #[arg(long, value_name = "FILE", requires_all = ["nats", "nats_key"])]
    pub nats_cert: Option<PathBuf>,
    /// The key (PEM) of --nats-cert.
    #[arg(long, value_name = "FILE", requires = "nats_cert")]
    pub nats_key: Option<PathBuf>,
}

/// `--nats`: one URL or several separated by commas, each `HOST:PORT` or with a scheme NATS
/// speaks (nats, tls, ws, wss), checked here so that a mistyped one fails at once instead of
/// in a node's background retries.
fn nats_urls(text: &str) -> Result<String, String> {
    for url in text.split(',') {
        let url = url.trim();
        if url.is_empty() {
            return Err(
                "give a NATS URL, e.g. nats://127.0.0.1:4222 (several: separated by commas)".into(),
            );
        }
        if let Some((scheme, _)) = url.split_once("://") {
            if !["nats", "tls", "ws", "wss"].contains(&scheme.to_ascii_lowercase().as_str()) {
                return Err(format!(
                    "{url:?} is not a NATS URL ({scheme}:// is not a scheme NATS speaks): write nats://HOST:PORT or tls://HOST:PORT"
                ));
            }
        }
    }
    Ok(text.to_owned())
}

impl NatsArgs {
    /// The connection settings, if `--nats` was given.
    pub fn config(&self, client_name: &str) -> Option<NatsConfig> {
        let url = self.nats.as_ref()?;
        let mut config = NatsConfig::new(url.clone());
        config.credentials = self.nats_creds.clone();
        config.require_tls = self.nats_ca.is_some() || self.nats_cert.is_some();
        config.ca = self.nats_ca.clone();
        config.client_certificate = self.nats_cert.clone().zip(self.nats_key.clone());
        config.client_name = Some(client_name.to_owned());
        Some(config)
    }
}

/// Whether a placing command may use the registry view cached between commands.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RegistryCacheArgs {
    /// With --nats: read the registry now, neither using nor keeping the view cached between
    /// commands (the same as TASKLET_REGISTRY_CACHE=off).
    #[arg(long, requires = "nats")]
    pub no_registry_cache: bool,
}

/// The live nodes; none when no node ever registered with this NATS. One connection and one
/// listing (no look-up of the bucket first).
pub fn live_nodes(config: &NatsConfig) -> Result<Vec<LiveNode>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the client's runtime")?;
    runtime.block_on(async {
        let cluster = Cluster::connect(config).await?;
        match Registry::list_once(&cluster).await {
            Ok(nodes) => Ok(nodes),
            Err(tasklet_cluster::Error::BucketMissing { .. }) => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    })
}

/// Where a placing command reads the registry: the view a recent command kept, while it is
/// young (see `tasklet_cluster::ViewCache`), else NATS, keeping what it read for the next.
#[derive(Debug, Clone)]
pub struct RegistrySource {
    nats: NatsConfig,
    cache: Option<ViewCache>,
}

impl RegistrySource {
    /// `nats`, with the cache unless `--no-registry-cache`, `TASKLET_REGISTRY_CACHE=off`, or
    /// no cache directory (`$XDG_CACHE_HOME`, else `$HOME/.cache`).
    pub fn new(nats: NatsConfig, cache: &RegistryCacheArgs) -> Result<RegistrySource> {
        let max_age = match std::env::var(CACHE_ENV) {
            Ok(value) => cache_setting(&value)?,
            Err(_) => Some(DEFAULT_VIEW_MAX_AGE),
        };
        let cache = match (cache.no_registry_cache, max_age, cache_dir()) {
            (false, Some(max_age), Some(dir)) => {
                Some(ViewCache::new(&dir, &nats).with_max_age(max_age))
            }
            _ => None,
        };
        Ok(RegistrySource { nats, cache })
    }

    pub fn nats(&self) -> &NatsConfig {
        &self.nats
    }

    /// The cached view, if there is a young one.
    pub fn cached(&self) -> Option<Vec<LiveNode>> {
        self.cache.as_ref()?.load().map(|view| view.nodes)
    }

    /// The registry read now; kept for the next commands (a view that cannot be kept is only
    /// logged: the command goes on).
    pub fn live(&self) -> Result<Vec<LiveNode>> {
        let nodes = live_nodes(&self.nats)?;
        if let Some(cache) = &self.cache {
            if nodes.is_empty() {
                cache.invalidate();
            } else if let Err(e) = cache.store(&nodes) {
                tracing::debug!(path = %cache.path().display(), "registry view not cached: {e}");
            }
        }
        Ok(nodes)
    }

    /// Drops the cached view: a node it named did not take the work, so the next command
    /// reads the registry.
    pub fn invalidate(&self) {
        if let Some(cache) = &self.cache {
            cache.invalidate();
        }
    }
}

/// `TASKLET_REGISTRY_CACHE`: `off` (or `0`), or how long a view is used (`500ms`, `2s`).
fn cache_setting(value: &str) -> Result<Option<Duration>> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("off") || value == "0" {
        return Ok(None);
    }
    let parsed = if let Some(ms) = value.strip_suffix("ms") {
        ms.parse::<u64>().ok().map(Duration::from_millis)
    } else if let Some(s) = value.strip_suffix('s') {
        s.parse::<u64>().ok().map(Duration::from_secs)
    } else {
        None
    };
    let stale_after = Heartbeat::default().stale_after;
    match parsed {
        Some(max_age) if max_age <= stale_after => Ok(Some(max_age)),
        _ => bail!(
            "{CACHE_ENV}={value:?}: give `off`, or how long a cached registry view is used, \
             such as 2s or 500ms (at most {}s)",
            stale_after.as_secs()
        ),
    }
}

/// This user's cache directory for registry views: `$XDG_CACHE_HOME/tasklet-registry`, else
/// `$HOME/.cache/tasklet-registry` (beside, not in, the compiled-component cache's folder).
fn cache_dir() -> Option<PathBuf> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let base = absolute("XDG_CACHE_HOME").or_else(|| absolute("HOME").map(|h| h.join(".cache")))?;
    Some(base.join("tasklet-registry"))
}

/// This machine's host name, as `tasklet node` names itself by default.
pub fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length, which is what gethostname is told.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let len = buf.iter().position(|&b| b == 0)?;
    String::from_utf8(buf[..len].to_vec())
        .ok()
        .filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_setting() {
        assert_eq!(cache_setting("off").unwrap(), None);
        assert_eq!(cache_setting("OFF").unwrap(), None);
        assert_eq!(cache_setting("0").unwrap(), None);
        assert_eq!(
            cache_setting("500ms").unwrap(),
            Some(Duration::from_millis(500))
        );
        assert_eq!(cache_setting(" 2s ").unwrap(), Some(Duration::from_secs(2)));
        for bad in ["", "2", "soon", "11s", "-1s", "1.5s"] {
            assert!(cache_setting(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_nats_url_is_checked_before_anything_connects() {
        for good in [
            "nats://127.0.0.1:4222",
            "tls://nats.example:4222",
            "127.0.0.1:4222",
            "nats://a:1,nats://b:2",
        ] {
            assert_eq!(nats_urls(good).as_deref(), Ok(good));
        }
        for bad in ["", " ", "http://127.0.0.1:4222", "nats://a:1,,nats://b:2"] {
            assert!(nats_urls(bad).is_err(), "{bad:?}");
        }
    }
}
