//! Options every command that talks to the cluster's NATS shares, and what they make.

use anyhow::{Context, Result};
use std::path::PathBuf;
use tasklet_cluster::{Cluster, LiveNode, NatsConfig, Registry};

/// Where the cluster's NATS is and how to reach it.
#[derive(clap::Args, Debug, Clone)]
pub struct NatsArgs {
    /// The cluster's NATS (nats://HOST:PORT or tls://HOST:PORT; several separated by commas).
    #[arg(long, value_name = "URL")]
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

/// The live nodes; none when no node ever registered with this NATS.
pub fn live_nodes(config: &NatsConfig) -> Result<Vec<LiveNode>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the client's runtime")?;
    runtime.block_on(async {
        let cluster = Cluster::connect(config).await?;
        match Registry::open(&cluster).await {
            Ok(registry) => Ok(registry.list().await?),
            Err(tasklet_cluster::Error::BucketMissing { .. }) => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    })
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
