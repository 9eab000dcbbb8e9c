//! Making a certificate folder and issuing certificates from its CA.

use std::io;
use std::path::{Path, PathBuf};

use rcgen::{Issuer, KeyPair, PublicKeyData};

use crate::files::{self, PRIVATE, PUBLIC};
use crate::layout::hint;
use crate::{profiles, CertDir, Error, Tenant, Validity};

/// The tenant `init` issues a client certificate for, so a node and a client on one machine
/// work at once.
pub const DEFAULT_TENANT: &str = "dev";

/// Makes a certificate folder at `dir`: a new CA, a node certificate valid for `localhost`,
/// `127.0.0.1`, `::1` and `extra_names` (DNS names or IP addresses), and a client certificate
/// for tenant [`DEFAULT_TENANT`]. See [`CertDir`] for the files.
///
/// Refuses ([`Error::CaExists`]) if `dir` already holds a CA: every certificate the old CA
/// issued would stop working. Everything is generated and checked before the first file is
/// written, so a bad name leaves nothing behind.
pub fn init(dir: impl AsRef<Path>, extra_names: &[String]) -> Result<CertDir, Error> {
    let dir = CertDir::new(dir.as_ref());
    let tenant = Tenant::new(DEFAULT_TENANT)?;
    let node_params = profiles::node(extra_names, &Validity::days(crate::LEAF_DAYS)?)?;
    let tenant_params = profiles::tenant(&tenant, &Validity::days(crate::LEAF_DAYS)?)?;

    for existing in [dir.ca_key(), dir.ca_cert()] {
        if existing.exists() {
            return Err(ca_exists(&dir, existing));
        }
    }

    let ca_key = KeyPair::generate()?;
    let ca_cert = profiles::ca(&ca_key, &Validity::days(crate::CA_DAYS)?)?.self_signed(&ca_key)?;
    let ca_pem = ca_cert.pem();
    let issuer = Issuer::from_ca_cert_der(ca_cert.der(), ca_key)?;
    let node_key = KeyPair::generate()?;
    let node_cert = node_params.signed_by(&node_key, &issuer)?;
    let tenant_key = KeyPair::generate()?;
    let tenant_cert = tenant_params.signed_by(&tenant_key, &issuer)?;

    files::create_dir(&dir.tenants())?;
    for (path, contents, mode) in [
        (dir.ca_key(), issuer.key().serialize_pem(), PRIVATE),
        (dir.ca_cert(), ca_pem, PUBLIC),
    ] {
        files::create_new(&path, contents.as_bytes(), mode).map_err(|source| {
            match source.kind() {
                io::ErrorKind::AlreadyExists => ca_exists(&dir, path.clone()),
                _ => Error::Write { path, source },
            }
        })?;
    }
    // A node or tenant certificate already here was issued by some earlier CA, now gone, and
    // is useless: replace it.
    files::replace(
        &dir.node_key(),
        node_key.serialize_pem().as_bytes(),
        PRIVATE,
    )?;
    files::replace(&dir.node_cert(), node_cert.pem().as_bytes(), PUBLIC)?;
    files::replace(
        &dir.tenant_key(&tenant),
        tenant_key.serialize_pem().as_bytes(),
        PRIVATE,
    )?;
    files::replace(
        &dir.tenant_cert(&tenant),
        tenant_cert.pem().as_bytes(),
        PUBLIC,
    )?;
    Ok(dir)
}

/// Issues a client certificate for `tenant`, signed by the CA in `dir`, valid for `validity`:
/// writes `tenants/<tenant>.pem` and `tenants/<tenant>.key` and returns the certificate's path.
///
/// Refuses ([`Error::TenantExists`]) if the tenant already has either file: its key may be in
/// use somewhere, and a new one is a deliberate step.
pub fn issue(dir: impl AsRef<Path>, tenant: &Tenant, validity: Validity) -> Result<PathBuf, Error> {
    let dir = CertDir::new(dir.as_ref());
    let issuer = load_issuer(&dir, &validity)?;
    let (cert_path, key_path) = (dir.tenant_cert(tenant), dir.tenant_key(tenant));
    for existing in [&key_path, &cert_path] {
        if existing.exists() {
            return Err(tenant_exists(tenant, existing.clone()));
        }
    }

    let key = KeyPair::generate()?;
    let cert = profiles::tenant(tenant, &validity)?.signed_by(&key, &issuer)?;

    files::create_dir(&dir.tenants())?;
    for (path, contents, mode) in [
        (&key_path, key.serialize_pem(), PRIVATE),
        (&cert_path, cert.pem(), PUBLIC),
    ] {
        files::create_new(path, contents.as_bytes(), mode).map_err(|source| {
            match source.kind() {
                io::ErrorKind::AlreadyExists => tenant_exists(tenant, path.clone()),
                _ => Error::Write {
                    path: path.clone(),
                    source,
                },
            }
        })?;
    }
    Ok(cert_path)
}

/// Gives the node in `dir` a new key and certificate, signed by the folder's CA, valid for
/// `localhost`, `127.0.0.1`, `::1` and `extra_names`, for `validity`: to renew an expiring
/// certificate, or to add a name the node is reached by. Clients keep working (they trust the
/// CA, not the certificate), but the node's fingerprint changes.
pub fn issue_node(
    dir: impl AsRef<Path>,
    extra_names: &[String],
    validity: Validity,
) -> Result<(), Error> {
    let dir = CertDir::new(dir.as_ref());
    let params = profiles::node(extra_names, &validity)?;
    let issuer = load_issuer(&dir, &validity)?;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    files::replace(&dir.node_key(), key.serialize_pem().as_bytes(), PRIVATE)?;
    files::replace(&dir.node_cert(), cert.pem().as_bytes(), PUBLIC)
}

/// The folder's CA, ready to sign a certificate valid for `validity`: its certificate, and its
/// key checked against it; refused if that certificate would outlive the CA (every peer would
/// refuse it from the day the CA expires).
fn load_issuer(dir: &CertDir, validity: &Validity) -> Result<Issuer<'static, KeyPair>, Error> {
    let (cert_path, key_path) = (dir.ca_cert(), dir.ca_key());
    let cert = files::read_cert(&cert_path, hint::CA_FOLDER)?;
    let key_der = files::read_key(&key_path, hint::CA_KEY)?;
    let key = KeyPair::try_from(&key_der).map_err(|err| Error::Malformed {
        path: key_path.clone(),
        reason: format!("not a usable private key ({err})"),
    })?;
    let not_a_ca = |reason: String| Error::Malformed {
        path: cert_path.clone(),
        reason,
    };
    let (_, parsed) = x509_parser::parse_x509_certificate(&cert)
        .map_err(|err| not_a_ca(format!("not valid X.509 ({err})")))?;
    if !parsed.is_ca() {
        return Err(not_a_ca(
            "not a CA certificate (a node's or a tenant's copied over it?): issue from the folder \
             `tasklet certs init DIR` made, whose ca.pem and ca.key are the CA's"
                .to_owned(),
        ));
    }
    if parsed.public_key().raw != key.subject_public_key_info().as_slice() {
        return Err(Error::KeyMismatch {
            cert: cert_path,
            key: key_path,
        });
    }
    let ca_ends = parsed.validity().not_after.timestamp();
    let (_, ends) = validity.x509_times()?;
    if ends.unix_timestamp() > ca_ends {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        return Err(Error::OutlivesCa {
            ca: cert_path,
            ca_ends: parsed.validity().not_after.to_string(),
            // Whole days that still fit, an hour's margin for the time it takes to ask again.
            days_left: (ca_ends - now - 3600).max(0) / 86_400,
        });
    }
    Issuer::from_ca_cert_der(&cert, key).map_err(|err| not_a_ca(err.to_string()))
}

fn ca_exists(dir: &CertDir, existing: PathBuf) -> Error {
    Error::CaExists {
        dir: dir.root().to_owned(),
        existing,
    }
}

fn tenant_exists(tenant: &Tenant, existing: PathBuf) -> Error {
    Error::TenantExists {
        tenant: tenant.clone(),
        existing,
    }
}
