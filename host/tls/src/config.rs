//! The TLS configurations of a node and of its clients, built from a certificate folder.
//!
//! Both sides speak TLS 1.3 only (QUIC requires it), through the ring provider, and trust only
//! the folder's CA: never the system's roots, so a certificate from a public CA gets nobody in.

use std::path::Path;
use std::sync::Arc;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::client::danger::ServerCertVerifier as _;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, InconsistentKeys, RootCertStore};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use crate::files;
use crate::layout::hint;
use crate::verifier::TenantVerifier;
use crate::{CertDir, Error, Tenant};

/// The application protocol both sides name in the handshake (ALPN). A peer that speaks no
/// version of it in common is refused at the handshake, before either side parses a byte.
pub const ALPN: &[u8] = b"tasklet/1";

/// The node's QUIC configuration from the folder at `dir` (`ca.pem`, `node.pem`, `node.key`):
/// it presents the node's certificate and requires every client to present a certificate
/// signed by the CA that names a tenant ([`tenant_of`](crate::tenant_of)). Transport settings
/// are quinn's defaults; change them with [`quinn::ServerConfig::transport_config`].
pub fn server_config(dir: impl AsRef<Path>) -> Result<quinn::ServerConfig, Error> {
    let tls = QuicServerConfig::try_from(server_tls(dir)?)?;
    Ok(quinn::ServerConfig::with_crypto(Arc::new(tls)))
}

/// A client's QUIC configuration from the folder at `dir` (`ca.pem`, `tenants/<tenant>.pem`,
/// `tenants/<tenant>.key`): it trusts only nodes whose certificate the CA signed, and presents
/// the tenant's certificate. Connect with a name the node's certificate lists (`localhost`,
/// `127.0.0.1`, `::1`, or one given when it was issued).
pub fn client_config(dir: impl AsRef<Path>, tenant: &Tenant) -> Result<quinn::ClientConfig, Error> {
    let tls = QuicClientConfig::try_from(client_tls(dir, tenant)?)?;
    Ok(quinn::ClientConfig::new(Arc::new(tls)))
}

/// Whether the node's certificate in `dir` is still valid by this machine's clock: a node whose
/// certificate has expired would refuse every client at its handshake, so a node starting
/// checks it first and says how to renew it. (One not valid *yet* is left to the clients'
/// clocks: a certificate issued on a machine whose clock runs ahead.)
pub fn check_node_unexpired(dir: impl AsRef<Path>) -> Result<(), Error> {
    let path = CertDir::new(dir.as_ref()).node_cert();
    // The node's own certificate comes first; a chain may follow it.
    let chain = files::read_certs(&path, hint::NODE)?;
    let Some(der) = chain.first() else {
        return Ok(()); // Starting reports a file without a certificate, in its own words.
    };
    let malformed = |reason: String| Error::Malformed {
        path: path.clone(),
        reason,
    };
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|err| malformed(format!("not valid X.509 ({err})")))?;
    let not_after = cert.validity().not_after;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    if not_after.timestamp() >= now {
        return Ok(());
    }
    let date = not_after.to_datetime().date().to_string();
    Err(malformed(format!(
        "it expired on {date} (UTC), so every client would refuse the node: renew it from this folder's CA \
         with `tasklet certs node DIR --name NAME` (clients keep working: they trust the CA)"
    )))
}

/// The rustls configuration under [`server_config`], for callers that wrap it themselves.
pub fn server_tls(dir: impl AsRef<Path>) -> Result<rustls::ServerConfig, Error> {
    let dir = CertDir::new(dir.as_ref());
    let provider = provider();
    let roots = Arc::new(roots(&dir, hint::NODE_FOLDER)?);
    let chain = WebPkiClientVerifier::builder_with_provider(Arc::clone(&roots), provider.clone())
        .build()?;
    let (certs, key) = identity(&provider, &dir.node_cert(), &dir.node_key(), hint::NODE)?;
    check_node_certificate(&provider, &roots, &certs, &dir.node_cert())?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(Arc::new(TenantVerifier::new(chain)))
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// The rustls configuration under [`client_config`], for callers that wrap it themselves.
pub fn client_tls(dir: impl AsRef<Path>, tenant: &Tenant) -> Result<rustls::ClientConfig, Error> {
    let dir = CertDir::new(dir.as_ref());
    let provider = provider();
    let roots = roots(&dir, hint::CLIENT_FOLDER)?;
    let (cert_path, key_path) = (dir.tenant_cert(tenant), dir.tenant_key(tenant));
    let (certs, key) = identity(&provider, &cert_path, &key_path, hint::TENANT)?;
    // A file copied to the wrong name would act as another tenant, with its rights: say so
    // rather than connect as someone the caller did not ask to be. (One naming no tenant is
    // left for the node to refuse, in its own words.)
    if let Ok(named) = crate::tenant_of(&certs) {
        if named != *tenant {
            return Err(Error::Malformed {
                path: cert_path,
                reason: format!(
                    "it is tenant `{named}`'s certificate, not `{tenant}`'s: run with `--tenant {named}`, or put \
                     `{tenant}`'s certificate and key here"
                ),
            });
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// Whether a client connecting to the node by `host` (a DNS name or an IP address, as a
/// cluster record or `--node` gives it) would accept the node certificate in `dir` for that
/// name, checked as a client checks it. `Ok(false)` for a host it is not valid for, or one no
/// client could name; other faults of the certificate are [`server_tls`]'s to report.
pub fn node_valid_for(dir: impl AsRef<Path>, host: &str) -> Result<bool, Error> {
    let dir = CertDir::new(dir.as_ref());
    let provider = provider();
    let roots = roots(&dir, hint::NODE_FOLDER)?;
    let (certs, _) = identity(&provider, &dir.node_cert(), &dir.node_key(), hint::NODE)?;
    let Some((end_entity, intermediates)) = certs.split_first() else {
        return Ok(false);
    };
    let Ok(name) = ServerName::try_from(host.to_owned()) else {
        return Ok(false);
    };
    let verifier =
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build()?;
    match verifier.verify_server_cert(end_entity, intermediates, &name, &[], UnixTime::now()) {
        Err(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => Ok(false),
        _ => Ok(true),
    }
}

/// Whether the node's certificate is one its clients can accept, as a client checks it (signed
/// by the folder's CA, for server authentication), so that a node with the wrong file fails to
/// start, saying why, rather than refusing every client later.
fn check_node_certificate(
    provider: &Arc<CryptoProvider>,
    roots: &Arc<RootCertStore>,
    certs: &[CertificateDer<'static>],
    path: &Path,
) -> Result<(), Error> {
    let Some((end_entity, intermediates)) = certs.split_first() else {
        return Ok(()); // `identity` found none already.
    };
    let verifier =
        WebPkiServerVerifier::builder_with_provider(Arc::clone(roots), Arc::clone(provider))
            .build()?;
    let name = ServerName::try_from("localhost").expect("a valid DNS name");
    let verified =
        verifier.verify_server_cert(end_entity, intermediates, &name, &[], UnixTime::now());
    let reason = match verified {
        Ok(_) => return Ok(()),
        Err(rustls::Error::InvalidCertificate(e)) => match e {
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                return Ok(())
            }
            CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                "it is not signed by the CA beside it (ca.pem), so every client would refuse the node: issue it \
                 from this folder's CA with `tasklet certs node DIR --name NAME`, or put the CA that signed it in \
                 ca.pem"
                    .to_owned()
            }
            CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
                "it is not a node certificate (it is not for server authentication; a tenant's?): issue one with \
                 `tasklet certs node DIR --name NAME`"
                    .to_owned()
            }
            // Its names and its time are the clients' to judge (their clocks, the address they
            // dialled), and each says so in one line at its handshake.
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. } => return Ok(()),
            other => format!("clients would refuse it: {other}"),
        },
        Err(other) => format!("clients would refuse it: {other}"),
    };
    Err(Error::Malformed {
        path: path.to_owned(),
        reason,
    })
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The folder's CA as the only trust anchor.
/// The CA in `dir`; `hint` says, should it be missing, what the folder should hold for its user.
fn roots(dir: &CertDir, hint: &'static str) -> Result<RootCertStore, Error> {
    let path = dir.ca_cert();
    let ca = files::read_cert(&path, hint)?;
    let mut roots = RootCertStore::empty();
    roots.add(ca).map_err(|err| Error::Malformed {
        path,
        reason: format!("not usable as a CA certificate ({err})"),
    })?;
    Ok(roots)
}

/// Whether `cert` says it is a CA's (one that parses; one that does not is judged elsewhere).
fn is_ca(cert: &CertificateDer<'_>) -> bool {
    x509_parser::parse_x509_certificate(cert).is_ok_and(|(_, parsed)| parsed.is_ca())
}

/// A certificate chain and its private key, checked against each other here so that a bad key
/// is reported with its file's name rather than as a bare rustls error.
fn identity(
    provider: &CryptoProvider,
    cert_path: &Path,
    key_path: &Path,
    hint: &'static str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), Error> {
    let certs = files::read_certs(cert_path, hint)?;
    // The first certificate is the holder's own; a CA's there (ca.pem copied over the file, a
    // chain written the wrong way round) would be refused by every peer at the handshake.
    if certs.first().is_some_and(|c| is_ca(c)) {
        return Err(Error::Malformed {
            path: cert_path.to_owned(),
            reason: format!(
                "its first certificate is a CA's, where the holder's own must come first (a CA's may follow): \
                 {hint}"
            ),
        });
    }
    let key = files::read_key(key_path, hint)?;
    let signing_key = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|err| Error::Malformed {
            path: key_path.to_owned(),
            reason: format!("not a usable private key ({err})"),
        })?;
    match CertifiedKey::new(certs.clone(), signing_key).keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            return Err(Error::KeyMismatch {
                cert: cert_path.to_owned(),
                key: key_path.to_owned(),
            })
        }
        Err(other) => return Err(other.into()),
    }
    Ok((certs, key))
}
