//! What each kind of certificate contains: the CA, a node, a tenant.
//!
//! Each kind can do only its own job, and verifiers enforce that: the CA signs certificates and
//! nothing else (path length 0: it signs no other CA); a node's certificate is for server
//! authentication and names hosts; a tenant's is for client authentication and names a tenant.
//! A node's certificate presented by a client is therefore refused, and so is a tenant's
//! presented by a node.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, PublicKeyData, SanType,
};
use rustls_pki_types::ServerName;

use crate::digest::sha256_hex;
use crate::{Error, Tenant, Validity};

/// The names every node certificate is valid for: a node and its clients on one machine.
pub(crate) const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The CA. Its name ends with a digest of its key: two folders' CAs then never share a name, so
/// a certificate from one is reported as from an unknown issuer by the other, rather than as
/// one whose signature does not verify.
pub(crate) fn ca(key: &KeyPair, validity: &Validity) -> Result<CertificateParams, Error> {
    let id = sha256_hex(&key.subject_public_key_info());
    let mut params = base(validity, &format!("tasklet CA {}", &id[..8]))?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

/// A node: valid for the loopback names and `extra_names` (DNS names or IP addresses).
pub(crate) fn node(
    extra_names: &[String],
    validity: &Validity,
) -> Result<CertificateParams, Error> {
    let mut params = leaf(
        validity,
        "tasklet node",
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let names = LOOPBACK_NAMES
        .iter()
        .copied()
        .chain(extra_names.iter().map(String::as_str));
    for name in names {
        let san = host_name(name)?;
        if !params.subject_alt_names.contains(&san) {
            params.subject_alt_names.push(san);
        }
    }
    Ok(params)
}

/// A tenant's client certificate, naming the tenant by its URI (see [`crate::tenant`]).
pub(crate) fn tenant(tenant: &Tenant, validity: &Validity) -> Result<CertificateParams, Error> {
    let mut params = leaf(
        validity,
        tenant.as_str(),
        ExtendedKeyUsagePurpose::ClientAuth,
    )?;
    let uri = tenant.uri().try_into()?;
    params.subject_alt_names = vec![SanType::URI(uri)];
    Ok(params)
}

fn base(validity: &Validity, common_name: &str) -> Result<CertificateParams, Error> {
    let (not_before, not_after) = validity.x509_times()?;
    let mut distinguished_name = DistinguishedName::new();
    distinguished_name.push(DnType::OrganizationName, "tasklet");
    distinguished_name.push(DnType::CommonName, common_name);
    let mut params = CertificateParams::default();
    params.not_before = not_before;
    params.not_after = not_after;
    params.distinguished_name = distinguished_name;
    Ok(params)
}

fn leaf(
    validity: &Validity,
    common_name: &str,
    purpose: ExtendedKeyUsagePurpose,
) -> Result<CertificateParams, Error> {
    let mut params = base(validity, common_name)?;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![purpose];
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}

/// A host name as a subject alternative name, checked the way clients will check it.
fn host_name(name: &str) -> Result<SanType, Error> {
    let invalid = || Error::InvalidNodeName {
        name: name.to_owned(),
    };
    match ServerName::try_from(name).map_err(|_| invalid())? {
        ServerName::IpAddress(ip) => Ok(SanType::IpAddress(IpAddr::from(ip))),
        ServerName::DnsName(dns) => Ok(SanType::DnsName(
            dns.as_ref().try_into().map_err(|_| invalid())?,
        )),
        _ => Err(invalid()),
    }
}
