//! Options every command that talks to a node shares, and connecting with them.

use crate::cluster::NatsArgs;
use anyhow::{anyhow, Result};
use std::path::{Path, PathBuf};
use tasklet_cluster::Requirement;
use tasklet_remote::{ConnectOptions, NodeClient};
use tasklet_tls::Tenant;

/// Where the node is and who this client is to it.
#[derive(clap::Args, Debug)]
pub struct RemoteArgs {
    /// The node at ADDR (HOST[:PORT], port 5701 by default): `run` sends its GPU work there,
    /// `inventory` asks it, `deploy` pushes to it and runs there.
    #[arg(long, value_name = "ADDR")]
    pub node: Option<String>,
    /// The certificate folder holding ca.pem and the tenant's certificate
    /// (tenants/NAME.pem, tenants/NAME.key), as `tasklet certs` made it.
    #[arg(long, value_name = "DIR", default_value = "certs")]
    pub certs: PathBuf,
    /// The tenant to act for: the one its certificate names.
    #[arg(long, value_name = "NAME", default_value = tasklet_tls::DEFAULT_TENANT)]
    pub tenant: String,
}

/// [`RemoteArgs`] with a cluster to place the work on instead of one node.
#[derive(clap::Args, Debug)]
pub struct PlacedArgs {
    #[command(flatten)]
    pub remote: RemoteArgs,
    #[command(flatten)]
    pub nats: NatsArgs,
    /// What the node must offer: gpu[:vram=SIZE][,cc>=MAJOR.MINOR][,backend=NAME], quoted
    /// for the shell (--requires 'gpu:vram=8GiB,cc>=9.0'). With --nats it chooses the node;
    /// with --node it is checked against that node's devices.
    #[arg(long, value_name = "REQUIREMENT")]
    pub requires: Option<String>,
    /// With --nats: the most nodes tried (1 or more), in the placement's order, when one
    /// refuses (capacity, a drain, its policy for the tenant) or cannot be reached before the
    /// run starts.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 3,
        value_parser = at_least_one,
        requires = "nats",
        conflicts_with = "node"
    )]
    pub tries: usize,
}

impl RemoteArgs {
    /// Connects to the node; every failure is one line saying why (a refused certificate, no
    /// node at the address, …).
    pub fn connect(&self, addr: &str) -> Result<NodeClient> {
        connect(addr, &self.certs, &self.tenant)
    }
}

/// Connects to the node at `addr`; the connection is closed, telling the node, if the command
/// is interrupted (see `interrupt`).
pub fn connect(addr: &str, certs: &Path, tenant: &str) -> Result<NodeClient> {
    let tenant = Tenant::new(tenant)?;
    let client = NodeClient::connect_with(&ConnectOptions::new(addr, certs, tenant))?;
    crate::interrupt::close_on_interrupt(&client);
    Ok(client)
}

/// `--requires` against the one node given: its inventory must have a device that meets it.
pub fn check_node_meets(
    client: &mut NodeClient,
    addr: &str,
    requirement: &Requirement,
) -> Result<()> {
    let devices: Vec<tasklet_cluster::DeviceRecord> = client
        .inventory()?
        .iter()
        .map(tasklet_cluster::DeviceRecord::from)
        .collect();
    if !devices.iter().any(|d| requirement.fits(d)) {
        return Err(anyhow!(
            "node {addr} has no device meeting --requires {requirement}; it offers: {}",
            crate::placement::devices_offered(&devices)
        ));
    }
    Ok(())
}

/// A count of 1 or more (`--tries`).
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("give 1 or more: the node placed first is always tried".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{text:?} is not a count: {e}")),
    }
}
