//! Where each file of a certificate folder lives.

use std::path::{Path, PathBuf};

use crate::Tenant;

/// The paths of a certificate folder's files; it reads and writes nothing itself.
///
/// ```text
/// DIR/
///   ca.pem              the CA's certificate: every node and client trusts it
///   ca.key              the CA's private key (0600): needed only to issue certificates
///   node.pem            the node's certificate (server authentication)
///   node.key            its private key (0600)
///   tenants/NAME.pem    tenant NAME's client certificate (client authentication)
///   tenants/NAME.key    its private key (0600)
/// ```
///
/// A node needs `ca.pem`, `node.pem` and `node.key`; a client needs `ca.pem` and its tenant's
/// two files. `ca.key` can stay on the machine that issues certificates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertDir {
    root: PathBuf,
}

impl CertDir {
    /// The folder at `root` (which need not exist yet).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The folder itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `ca.pem`: the CA's certificate.
    pub fn ca_cert(&self) -> PathBuf {
        self.root.join("ca.pem")
    }

    /// `ca.key`: the CA's private key.
    pub fn ca_key(&self) -> PathBuf {
        self.root.join("ca.key")
    }

    /// `node.pem`: the node's certificate.
    pub fn node_cert(&self) -> PathBuf {
        self.root.join("node.pem")
    }

    /// `node.key`: the node's private key.
    pub fn node_key(&self) -> PathBuf {
        self.root.join("node.key")
    }

    /// `tenants/`: the tenants' client certificates and keys.
    pub fn tenants(&self) -> PathBuf {
        self.root.join("tenants")
    }

    /// `tenants/<tenant>.pem`: a tenant's client certificate.
    pub fn tenant_cert(&self, tenant: &Tenant) -> PathBuf {
        self.tenants().join(format!("{tenant}.pem"))
    }

    /// `tenants/<tenant>.key`: a tenant's private key.
    pub fn tenant_key(&self, tenant: &Tenant) -> PathBuf {
        self.tenants().join(format!("{tenant}.key"))
    }
}

/// Where each file comes from, for errors about a missing one.
pub(crate) mod hint {
    /// `ca.pem` of a node's folder.
    pub(crate) const NODE_FOLDER: &str =
        "a node's folder (`--certs DIR`, ./certs unless given) holds ca.pem, node.pem and node.key: name the folder it is in, or make one with `tasklet certs init DIR`";
    /// `ca.pem` of a client's folder.
    pub(crate) const CLIENT_FOLDER: &str =
        "a client's folder (`--certs DIR`, ./certs unless given) holds a copy of its node's ca.pem and its tenant's certificate (tenants/NAME.pem, .key): name the folder they are in, or, for a node of your own, make one with `tasklet certs init DIR` (tenant dev)";
    /// `ca.pem` of the folder a certificate is issued from.
    pub(crate) const CA_FOLDER: &str =
        "issuing needs the CA: run this on the folder `tasklet certs init DIR` made";
    /// `node.pem`, `node.key`.
    pub(crate) const NODE: &str =
        "the node's certificate: `tasklet certs init DIR` makes it, or `tasklet certs node DIR` anew in the folder that holds the CA's key";
    /// `ca.key`.
    pub(crate) const CA_KEY: &str =
        "issuing needs the CA's private key: run this on the folder `tasklet certs init` made";
    /// `tenants/NAME.pem`, `tenants/NAME.key`.
    pub(crate) const TENANT: &str = "issue it with `tasklet certs issue DIR --tenant NAME` in the folder that holds the CA's key, and copy it here beside ca.pem";
}
