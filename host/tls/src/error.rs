//! The errors of certificate folders and of the TLS configurations built from them.

use std::io;
use std::path::PathBuf;

use crate::{InvalidTenant, Tenant};

/// What went wrong creating, reading or using a certificate folder. Every error about a file
/// names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `init` found a CA already there. Replacing a CA would silently invalidate every
    /// certificate it issued, so it is never overwritten.
    #[error("{} already holds a CA ({}): it is kept, since replacing it would invalidate every certificate it issued; add tenants with `tasklet certs issue DIR --tenant NAME`, or init an empty folder", dir.display(), existing.display())]
    CaExists {
        /// The folder.
        dir: PathBuf,
        /// The CA file found there.
        existing: PathBuf,
    },
    /// `issue` found the tenant's certificate or key already there.
    #[error("tenant {tenant} already has a certificate ({}): remove tenants/{tenant}.pem and tenants/{tenant}.key to issue a new one", existing.display())]
    TenantExists {
        /// The tenant.
        tenant: Tenant,
        /// The file found there.
        existing: PathBuf,
    },
    /// A file the operation needs does not exist.
    #[error("{} does not exist ({hint})", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// Where such a file comes from.
        hint: &'static str,
    },
    /// A file exists but could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// A file or folder could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// A file was read but does not hold what it should.
    #[error("{}: {reason}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A private key is not the key of the certificate beside it.
    #[error("{} is not the private key of {}: copy the two files `tasklet certs` made together, or issue them anew", key.display(), cert.display())]
    KeyMismatch {
        /// The certificate.
        cert: PathBuf,
        /// The key.
        key: PathBuf,
    },
    /// A tenant name failed validation.
    #[error(transparent)]
    InvalidTenant(#[from] InvalidTenant),
    /// A name for the node's certificate is neither a DNS name nor an IP address.
    #[error("invalid node name {name:?}: expected a DNS name or an IP address")]
    InvalidNodeName {
        /// The name as given.
        name: String,
    },
    /// A validity period that ends before it starts, or lies outside what X.509 can express.
    #[error("invalid validity period (`--days`): {reason}")]
    InvalidValidity {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A certificate asked for would still be valid after its CA expires.
    #[error(
        "the certificate would outlive its CA ({} expires on {ca_ends}): {}",
        ca.display(),
        match days_left {
            0 => "less than a day of the CA is left: make a new CA with `tasklet certs init` in \
                  another folder and issue every certificate from it"
                .to_owned(),
            n => format!(
                "give `--days {n}` or fewer, or make a new CA with `tasklet certs init` in another folder"
            ),
        }
    )]
    OutlivesCa {
        ca: PathBuf,
        /// When the CA expires, as the certificate says.
        ca_ends: String,
        /// Whole days a certificate issued now may last within the CA's life (0: less than one).
        days_left: i64,
    },
    /// Making or signing a certificate failed.
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused to build a configuration from the folder's files.
    #[error("cannot build the TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// rustls refused to build a certificate verifier from the CA.
    #[error("cannot build a certificate verifier from the CA: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// quinn refused the TLS configuration.
    #[error("the TLS configuration cannot carry QUIC: {0}")]
    Quic(#[from] quinn::crypto::rustls::NoInitialCipherSuite),
}
