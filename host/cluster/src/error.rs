//! What can go wrong talking to the cluster, each said in one line with its cause and its fix.
//!
//! URLs in messages are the redacted spelling ([`crate::NatsConfig::display_url`]): a password
//! given in a URL never reaches a log.

use std::path::PathBuf;

/// An error from the cluster's NATS side.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No NATS server answered at the URL.
    #[error(
        "NATS at {url} is unreachable ({cause}): start a server with JetStream \
         (`nats-server -js`, or scripts/install-nats.sh for a local one) or pass the right URL"
    )]
    Unreachable { url: String, cause: String },

    /// Something accepts connections at the URL but did not speak NATS in time: another
    /// service's port, a NATS server's monitoring or cluster port, or an overloaded server.
    #[error(
        "something at {url} accepts connections but did not answer as a NATS server in time \
         ({cause}): give the server's client port (4222 unless its config says otherwise), not \
         its monitoring (8222) or cluster (6222) port or another service's; if it is that port, \
         the server is overloaded, or down behind a proxy that answers for it"
    )]
    NotNats { url: String, cause: String },

    /// The URL is not one NATS can use.
    #[error("invalid NATS URL {url:?} ({cause}): write it as nats://HOST:PORT or tls://HOST:PORT")]
    InvalidUrl { url: String, cause: String },

    /// The server turned the client's credentials away.
    #[error(
        "NATS at {url} refused the credentials ({cause}): check the credentials file or the \
         user in the URL"
    )]
    Unauthorized { url: String, cause: String },

    /// TLS to the server failed (a certificate not trusted, TLS required on one side only).
    #[error("TLS to NATS at {url} failed ({cause}): {}", tls_fix(cause))]
    Tls { url: String, cause: String },

    /// The server asks for a client certificate and was given none it accepts.
    #[error(
        "NATS at {url} wants a client certificate it trusts ({cause}): give one signed by the CA \
         the server verifies clients with (`--nats-cert FILE --nats-key FILE`)"
    )]
    ClientCertificate { url: String, cause: String },

    /// A credentials, CA or client-certificate file could not be read.
    #[error("cannot read NATS {what} {path}: {cause}")]
    File {
        what: &'static str,
        path: PathBuf,
        cause: String,
    },

    /// The server (or this account on it) has no JetStream.
    #[error(
        "JetStream is not enabled for this account on the NATS server at {url} ({cause}): start \
         nats-server with -js (or a `jetstream {{}}` block in its config) and give the account \
         JetStream"
    )]
    JetStreamDisabled { url: String, cause: String },

    /// The server predates per-message TTLs, which the registry's expiry needs.
    #[error(
        "NATS at {url} is version {version}; the registry needs nats-server >= 2.11 (per-key \
         expiry): upgrade the server"
    )]
    ServerTooOld { url: String, version: String },

    /// A bucket the reader needs has not been created.
    #[error(
        "bucket {bucket} does not exist on NATS at {url}: no tasklet node has registered with \
         this server (or this account) yet; start one with `tasklet node --nats URL`"
    )]
    BucketMissing { bucket: String, url: String },

    /// A bucket exists with a configuration the registry cannot work with.
    #[error(
        "bucket {bucket} on NATS at {url} {problem}: delete it (`nats kv del {bucket}`) and the \
         next node to register creates it again"
    )]
    BucketMisconfigured {
        bucket: String,
        url: String,
        problem: &'static str,
    },

    /// Another live node's record holds this node's name (its key in the registry).
    #[error(
        "another live node has the name {name} in the registry at {url} (it is at {address}): \
         give this node its own name (`tasklet node --name`), or stop that node first (a stopped \
         node's record goes at once, a killed one's within its TTL)"
    )]
    NameTaken {
        name: String,
        address: String,
        url: String,
    },

    /// A NATS or JetStream request failed or timed out after the connection was made.
    #[error("NATS at {url}: {operation} failed ({cause}); the server may be down or overloaded")]
    Request {
        url: String,
        operation: &'static str,
        cause: String,
    },

    /// A registrar's source produced a record that cannot be published.
    #[error("node record cannot be published: {0}")]
    Record(#[from] crate::record::RecordError),

    /// Heartbeat timings that cannot work together.
    #[error("invalid heartbeat timings: {0}")]
    Timings(String),

    /// A blob is larger than the configured limit.
    #[error(
        "blob {digest} is {size} bytes, over the limit of {max}: raise the blob limit if the \
         tasklet really is that large"
    )]
    BlobTooLarge { digest: String, size: u64, max: u64 },

    /// The bytes stored under a digest are other bytes.
    #[error(
        "blob {expected} in the object store hashes to {actual}: it is damaged or was written \
         by something else; push it again (`tasklet deploy push`)"
    )]
    DigestMismatch { expected: String, actual: String },

    /// A deployment's record or parts in the object store are not what a deployment is.
    #[error(
        "deployment {digest} in the cluster cannot be used: {cause}; push it again \
         (`tasklet deploy push --nats`)"
    )]
    BadDeployment { digest: String, cause: String },

    /// A tenant name that cannot be a key of the owners bucket.
    #[error("tenant {tenant:?} cannot own deployments in the cluster: {reason}")]
    InvalidTenant {
        tenant: String,
        reason: &'static str,
    },

    /// Bytes offered for publication do not hash to the digest they were offered under.
    #[error("bytes offered as blob {expected} hash to {actual}: not published")]
    WrongBytes { expected: String, actual: String },
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn request(url: &str, operation: &'static str, cause: impl ToString) -> Error {
        Error::Request {
            url: url.to_string(),
            operation,
            cause: one_line(&cause.to_string()),
        }
    }
}

/// Errors from the client library can span lines (a server's error text, a source chain):
/// messages here are one line.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What to do about a failed TLS handshake with NATS, by what failed.
fn tls_fix(cause: &str) -> &'static str {
    if cause.contains("InvalidContentType") || cause.contains("corrupt message") {
        // What answered is not TLS: a server without it, at a tls:// URL or with TLS flags.
        "the server does not speak TLS: use nats:// and leave out --nats-ca, --nats-cert and --nats-key"
    } else if cause.contains("UnknownIssuer") || cause.contains("BadSignature") {
        "give the CA that signed the server's certificate (--nats-ca FILE)"
    } else if cause.contains("NotValidForName") {
        "connect by a name the server's certificate holds"
    } else {
        "check the server's certificate and the CA given with --nats-ca"
    }
}
