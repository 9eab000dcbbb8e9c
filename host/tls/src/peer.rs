//! What a connection's certificates say about the peer: its tenant, its fingerprint.

use std::path::Path;

use rustls_pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;

use crate::digest::sha256_hex;
use crate::layout::hint;
use crate::{files, CertDir, Error, InvalidTenant, Tenant};

/// Why no tenant could be read from a peer's certificates.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PeerTenantError {
    /// The peer presented no certificate (or the connection is not a TLS one).
    #[error("the peer presented no certificate")]
    NoCertificate,
    /// The peer's certificate is not valid X.509.
    #[error("the peer's certificate cannot be parsed: {0}")]
    Unparsable(String),
    /// The certificate names no tenant.
    #[error("the peer's certificate names no tenant (no tasklet://tenant/ URI)")]
    NoTenant,
    /// The certificate names more than one tenant.
    #[error("the peer's certificate names several tenants")]
    SeveralTenants,
    /// The certificate names a tenant by an invalid name.
    #[error("the peer's certificate names an invalid tenant: {0}")]
    InvalidTenant(#[from] InvalidTenant),
}

/// The tenant named by a client's certificate chain (leaf first, as TLS presents it).
///
/// A node whose server configuration comes from [`server_config`](crate::server_config) only
/// completes handshakes with clients whose certificate passes this check, so on such a
/// connection it fails only if the connection is not one of those.
pub fn tenant_of(certs: &[CertificateDer<'_>]) -> Result<Tenant, PeerTenantError> {
    let leaf = certs.first().ok_or(PeerTenantError::NoCertificate)?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|err| PeerTenantError::Unparsable(err.to_string()))?;
    let names = cert
        .subject_alternative_name()
        .map_err(|err| PeerTenantError::Unparsable(err.to_string()))?;
    let mut tenants = names
        .iter()
        .flat_map(|ext| ext.value.general_names.iter())
        .filter_map(|name| match name {
            GeneralName::URI(uri) => Tenant::from_uri(uri),
            _ => None,
        });
    let tenant = tenants.next().ok_or(PeerTenantError::NoTenant)??;
    if tenants.next().is_some() {
        return Err(PeerTenantError::SeveralTenants);
    }
    Ok(tenant)
}

/// The tenant of a connection's client, on the node's side: [`tenant_of`] its certificates.
pub fn peer_tenant(connection: &quinn::Connection) -> Result<Tenant, PeerTenantError> {
    let identity = connection
        .peer_identity()
        .ok_or(PeerTenantError::NoCertificate)?;
    let certs = identity
        .downcast_ref::<Vec<CertificateDer<'static>>>()
        .ok_or(PeerTenantError::NoCertificate)?;
    tenant_of(certs)
}

/// A certificate's SHA-256 fingerprint: 64 lowercase hex digits of the digest of its DER.
pub fn fingerprint(cert: &CertificateDer<'_>) -> String {
    sha256_hex(cert)
}

/// The names the node certificate in `dir` is valid for (its DNS names and IP addresses, as
/// written: `localhost`, `127.0.0.1`, `::1`, `gpu1.example`): what clients may connect to it by.
pub fn node_names(dir: impl AsRef<Path>) -> Result<Vec<String>, Error> {
    let path = CertDir::new(dir.as_ref()).node_cert();
    let cert = files::read_cert(&path, hint::NODE)?;
    let malformed = |reason: String| Error::Malformed {
        path: path.clone(),
        reason,
    };
    let (_, parsed) = x509_parser::parse_x509_certificate(&cert)
        .map_err(|err| malformed(format!("not a certificate: {err}")))?;
    let names = parsed
        .subject_alternative_name()
        .map_err(|err| malformed(format!("its names cannot be read: {err}")))?;
    Ok(names
        .iter()
        .flat_map(|ext| ext.value.general_names.iter())
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some((*dns).to_owned()),
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => <[u8; 4]>::try_from(*bytes)
                    .ok()
                    .map(|b| std::net::Ipv4Addr::from(b).to_string()),
                16 => <[u8; 16]>::try_from(*bytes)
                    .ok()
                    .map(|b| std::net::Ipv6Addr::from(b).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect())
}

/// The [`fingerprint`] of the node certificate in `dir`, as the cluster registry publishes it.
pub fn node_fingerprint(dir: impl AsRef<Path>) -> Result<String, Error> {
    let cert = files::read_cert(&CertDir::new(dir.as_ref()).node_cert(), hint::NODE)?;
    Ok(fingerprint(&cert))
}
