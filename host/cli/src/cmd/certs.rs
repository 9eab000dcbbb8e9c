//! `tasklet certs`: the certificate folder a node and its clients prove themselves with.

use anyhow::Result;
use std::path::PathBuf;
use std::process::ExitCode;
use tasklet_tls::{CertDir, Tenant, Validity, LEAF_DAYS};

/// Make and extend the certificate folder (a CA, the node's certificate, tenants' certificates)
/// that a node and its clients use for mutual TLS.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tasklet certs init certs                      CA, node certificate (localhost, 127.0.0.1, ::1), tenant dev\n  \
    tasklet certs init certs --name gpu1.example  the node is also reached as gpu1.example\n  \
    tasklet certs issue certs --tenant team-7     a client certificate for tenant team-7\n  \
    tasklet certs node certs --name gpu1.example  a new node certificate that also names gpu1.example\n\n\
    A node needs ca.pem, node.pem and node.key; a client needs ca.pem and its tenant's two files under \
    tenants/. Keep ca.key where certificates are issued.")]
pub struct CertsArgs {
    #[command(subcommand)]
    pub command: CertsCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum CertsCommand {
    /// Make a new folder: a CA, a node certificate and a client certificate for tenant `dev`.
    Init {
        /// The folder to write (created if missing; an existing CA in it is never replaced).
        dir: PathBuf,
        /// Another DNS name or IP address the node is reached by (repeatable).
        #[arg(long = "name", value_name = "NAME")]
        names: Vec<String>,
    },
    /// Issue a client certificate for another tenant from the folder's CA.
    Issue {
        /// The folder `tasklet certs init` made.
        dir: PathBuf,
        /// The tenant's name: 1 to 63 of a-z, 0-9, '-', '_', '.'.
        #[arg(long, value_name = "NAME")]
        tenant: String,
        /// Days the certificate is valid, from 1.
        #[arg(long, value_name = "N", default_value_t = LEAF_DAYS,
              value_parser = clap::value_parser!(u32).range(1..))]
        days: u32,
    },
    /// Issue the node a new certificate (and key) from the folder's CA: to add a name the node
    /// is reached by, or to renew it. Clients keep working (they trust the CA); restart the node.
    Node {
        /// The folder `tasklet certs init` made.
        dir: PathBuf,
        /// A DNS name or IP address the node is reached by besides localhost, 127.0.0.1 and ::1
        /// (repeatable; the old certificate's names are not kept: give them all).
        #[arg(long = "name", value_name = "NAME")]
        names: Vec<String>,
        /// Days the certificate is valid, from 1.
        #[arg(long, value_name = "N", default_value_t = LEAF_DAYS,
              value_parser = clap::value_parser!(u32).range(1..))]
        days: u32,
    },
}

pub fn run(args: CertsArgs) -> Result<ExitCode> {
    match args.command {
        CertsCommand::Init { dir, names } => {
            let dir = tasklet_tls::init(&dir, &names)?;
            let tenant = Tenant::new(tasklet_tls::DEFAULT_TENANT)?;
            outln!(
                "CA:     {} (keep {} private)",
                dir.ca_cert().display(),
                dir.ca_key().display()
            );
            outln!(
                "node:   {} {}",
                dir.node_cert().display(),
                dir.node_key().display()
            );
            outln!(
                "tenant: {} {}",
                dir.tenant_cert(&tenant).display(),
                dir.tenant_key(&tenant).display()
            );
            outln!(
                "start a node with `tasklet node --certs {0}`; clients use `--certs {0}`",
                dir.root().display()
            );
        }
        CertsCommand::Issue { dir, tenant, days } => {
            let tenant = Tenant::new(&tenant)?;
            let cert = tasklet_tls::issue(&dir, &tenant, Validity::days(days)?)?;
            let folder = CertDir::new(&dir);
            outln!(
                "tenant {tenant}: {} {}",
                cert.display(),
                folder.tenant_key(&tenant).display()
            );
            outln!(
                "give the client ca.pem and these two files (under tenants/), and run it with `--tenant {tenant}`"
            );
        }
        CertsCommand::Node { dir, names, days } => {
            tasklet_tls::issue_node(&dir, &names, Validity::days(days)?)?;
            let folder = CertDir::new(&dir);
            outln!(
                "node:   {} {}",
                folder.node_cert().display(),
                folder.node_key().display()
            );
            outln!("restart the node to serve it; its clients need nothing new");
        }
    }
    Ok(ExitCode::SUCCESS)
}
