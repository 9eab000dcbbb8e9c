//! Reading and writing a certificate folder's PEM files, with errors that name the file.
//!
//! Everything read is checked before it is used: a certificate file must hold at least one
//! certificate that parses as X.509, a key file exactly one private key. Private keys are
//! created with mode 0600 from their first byte, so no other user can ever read one.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::Error;

/// Mode of private keys: the owner alone reads them.
pub(crate) const PRIVATE: u32 = 0o600;
/// Mode of certificates: public by nature.
pub(crate) const PUBLIC: u32 = 0o644;

/// Reads a file, telling a missing file (with `hint` on where it comes from) from one that could
/// not be read.
fn read(path: &Path, hint: &'static str) -> Result<Vec<u8>, Error> {
    fs::read(path).map_err(|source| match source.kind() {
        // A file given where the folder goes is a folder without the file.
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => Error::Missing {
            path: path.to_owned(),
            hint,
        },
        _ => Error::Read {
            path: path.to_owned(),
            source,
        },
    })
}

fn malformed(path: &Path, reason: impl Into<String>) -> Error {
    Error::Malformed {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// A reason a file is unusable, and where a good one comes from (the file's `hint`): the fix.
fn with_fix(reason: String, hint: &str) -> String {
    format!("{reason}; replace it with the one `tasklet certs` made ({hint})")
}

/// Why a PEM file yielded nothing usable, in words.
fn pem_reason(what: &str, err: &pem::Error) -> String {
    match err {
        pem::Error::NoItemsFound => format!("no PEM-encoded {what} found"),
        // Its own words show the markers as lists of byte values.
        pem::Error::MissingSectionEnd { end_marker } => format!(
            "not a valid PEM file (no `-----END {}-----` line: cut short?)",
            String::from_utf8_lossy(end_marker)
        ),
        pem::Error::IllegalSectionStart { line } => format!(
            "not a valid PEM file (a section begins with a malformed line, `{}`)",
            String::from_utf8_lossy(line).escape_debug()
        ),
        other => format!("not a valid PEM file ({other})"),
    }
}

/// Reads the certificates of a PEM file, leaf first; at least one, each valid X.509.
pub(crate) fn read_certs(
    path: &Path,
    hint: &'static str,
) -> Result<Vec<CertificateDer<'static>>, Error> {
    let bytes = read(path, hint)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| malformed(path, with_fix(pem_reason("certificate", &err), hint)))?;
    if certs.is_empty() {
        return Err(malformed(
            path,
            with_fix("no PEM-encoded certificate found".into(), hint),
        ));
    }
    for (index, cert) in certs.iter().enumerate() {
        if let Err(err) = x509_parser::parse_x509_certificate(cert) {
            return Err(malformed(
                path,
                with_fix(
                    format!("certificate {} is not valid X.509 ({err})", index + 1),
                    hint,
                ),
            ));
        }
    }
    Ok(certs)
}

/// Reads the one certificate of a PEM file.
pub(crate) fn read_cert(path: &Path, hint: &'static str) -> Result<CertificateDer<'static>, Error> {
    let mut certs = read_certs(path, hint)?;
    if certs.len() > 1 {
        return Err(malformed(
            path,
            format!("expected one certificate, found {}", certs.len()),
        ));
    }
    Ok(certs.remove(0))
}

/// Reads the one private key of a PEM file.
pub(crate) fn read_key(path: &Path, hint: &'static str) -> Result<PrivateKeyDer<'static>, Error> {
    let bytes = read(path, hint)?;
    let mut keys = PrivateKeyDer::pem_slice_iter(&bytes);
    let key = match keys.next() {
        Some(Ok(key)) => key,
        Some(Err(err)) => {
            return Err(malformed(
                path,
                with_fix(pem_reason("private key", &err), hint),
            ))
        }
        None => {
            return Err(malformed(
                path,
                with_fix("no PEM-encoded private key found".into(), hint),
            ))
        }
    };
    if keys.next().is_some() {
        return Err(malformed(path, "expected one private key, found several"));
    }
    Ok(key)
}

/// Creates `path` with `mode` and writes `contents`; fails with `AlreadyExists` rather than
/// replace a file, so two processes issuing at once cannot overwrite each other's keys.
pub(crate) fn create_new(path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

/// Replaces `path` with `contents` at once: written beside it, then renamed over it, so a
/// reader sees the old file or the new one, never a mix (a key that does not match its
/// certificate).
pub(crate) fn replace(path: &Path, contents: &[u8], mode: u32) -> Result<(), Error> {
    let staging = staging_path(path);
    let written = fs::remove_file(&staging)
        .or_else(|err| match err.kind() {
            io::ErrorKind::NotFound => Ok(()),
            _ => Err(err),
        })
        .and_then(|()| create_new(&staging, contents, mode))
        .and_then(|()| fs::rename(&staging, path));
    written.map_err(|source| {
        let _ = fs::remove_file(&staging);
        Error::Write {
            path: path.to_owned(),
            source,
        }
    })
}

fn staging_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".new");
    path.with_file_name(name)
}

/// Creates a folder and its parents.
pub(crate) fn create_dir(path: &Path) -> Result<(), Error> {
    fs::create_dir_all(path).map_err(|source| Error::Write {
        path: path.to_owned(),
        source,
    })
}
