//! How to reach NATS: the URL and, when the operator configures them, TLS and credentials.

use std::path::PathBuf;
use std::time::Duration;

/// Where the cluster's NATS is and how to authenticate to it.
///
/// - **URL**: `nats://HOST:PORT`, several separated by commas for a NATS cluster. A user and
///   password may be written in it (`nats://USER:PASSWORD@HOST:4222`); messages show only the
///   user.
/// - **TLS**: a `tls://` URL or [`NatsConfig::require_tls`] demands it; [`NatsConfig::ca`]
///   names the PEM file of the CA that signed the server's certificate (the system's roots
///   otherwise); [`NatsConfig::client_certificate`] adds a client certificate for servers that
///   verify clients.
/// - **Credentials**: [`NatsConfig::credentials`] names a `.creds` file (a user JWT and its
///   NKey seed, as `nsc` writes them), for servers in operator mode.
#[derive(Debug, Clone)]
pub struct NatsConfig {
    pub url: String,
    pub credentials: Option<PathBuf>,
    pub ca: Option<PathBuf>,
    /// A client certificate and its key, both PEM.
    pub client_certificate: Option<(PathBuf, PathBuf)>,
    pub require_tls: bool,
    /// The connection's name in the server's monitoring (`connz`).
    pub client_name: Option<String>,
    /// How long to wait for the first connection.
    pub connect_timeout: Duration,
    /// How long to wait for an answer to each JetStream request.
    pub request_timeout: Duration,
    /// Copies of each bucket this process creates, on a NATS cluster (1 on a single server;
    /// 3 to survive losing a server of a cluster of three). Buckets that exist are not changed.
    pub bucket_replicas: usize,
}

/// The first connection: a server that does not answer in this time is reported unreachable.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// JetStream requests: a write to a file-backed stream on a healthy server answers in far less.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

impl NatsConfig {
    /// A plain connection to `url`, without TLS or credentials.
    pub fn new(url: impl Into<String>) -> NatsConfig {
        NatsConfig {
            url: url.into(),
            credentials: None,
            ca: None,
            client_certificate: None,
            require_tls: false,
            client_name: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            bucket_replicas: 1,
        }
    }

    /// The URL with any password replaced by `***`: the spelling every message uses.
    pub fn display_url(&self) -> String {
        redact(&self.url)
    }
}

/// Each comma-separated URL with its password hidden.
pub(crate) fn redact(urls: &str) -> String {
    urls.split(',')
        .map(|url| {
            let url = url.trim();
            let authority_start = url.find("://").map_or(0, |i| i + 3);
            let authority_end = url[authority_start..]
                .find('/')
                .map_or(url.len(), |i| authority_start + i);
            match url[authority_start..authority_end].rfind('@') {
                Some(at) => {
                    let userinfo = &url[authority_start..authority_start + at];
                    let user = userinfo.split(':').next().unwrap_or("");
                    let shown = if userinfo.contains(':') {
                        format!("{user}:***")
                    } else {
                        // A lone userinfo is a token: hide all of it.
                        "***".to_string()
                    };
                    format!(
                        "{}{shown}{}",
                        &url[..authority_start],
                        &url[authority_start + at..]
                    )
                }
                None => url.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_and_tokens_are_hidden() {
        assert_eq!(redact("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(
            redact("nats://alice:s3cret@host:4222"),
            "nats://alice:***@host:4222"
        );
        assert_eq!(redact("nats://tok3n@host:4222"), "nats://***@host:4222");
        assert_eq!(
            redact("nats://a:b@h1:4222, tls://h2:4222"),
            "nats://a:***@h1:4222,tls://h2:4222"
        );
        assert_eq!(redact("u:p@host:4222"), "u:***@host:4222");
    }
}
