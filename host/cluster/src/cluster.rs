//! One connection to the cluster's NATS, checked for what the cluster needs: JetStream, and a
//! server new enough for per-key expiry.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::context::GetStreamErrorKind;
use async_nats::jetstream::ErrorCode;
use async_nats::{ConnectErrorKind, ConnectOptions, ServerAddr};

use crate::config::NatsConfig;
use crate::error::{one_line, Error, Result};

/// The oldest server with per-message TTLs and delete markers (what the registry's expiry is).
const MIN_SERVER: (u32, u32) = (2, 11);

/// The longest wait between two reconnection attempts. After NATS comes back, a registrar
/// is registered again within about this plus one heartbeat; an attempt is one TCP connect.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// How often the client pings the server: a server that stopped answering without closing
/// the connection is noticed after two unanswered pings.
const PING_INTERVAL: Duration = Duration::from_secs(5);

/// A connection to NATS with JetStream, shared by registrars, registries and blob stores
/// (clones share it).
///
/// The client reconnects by itself for as long as the process lives (with waits growing to
/// one second), so what was built on a `Cluster` keeps working after NATS comes back.
#[derive(Clone)]
pub struct Cluster {
    pub(crate) jetstream: jetstream::Context,
    client: async_nats::Client,
    url: Arc<str>,
    pub(crate) bucket_replicas: usize,
    pub(crate) request_timeout: Duration,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("url", &self.url).finish()
    }
}

impl Cluster {
    /// Connects, and checks that the server announces JetStream and is at least nats-server
    /// 2.11 (from what it says on connecting: no request is made).
    pub async fn connect(config: &NatsConfig) -> Result<Cluster> {
        let url = config.display_url();
        let servers: Vec<&str> = config.url.split(',').map(str::trim).collect();
        let options = options(config, &servers).await?;
        let client = match options.connect(servers.as_slice()).await {
            Ok(client) => client,
            Err(e) => {
                let error = connect_error(&url, e);
                return Err(match error {
                    Error::Unreachable { url, cause }
                        if cause.contains("timed out") && accepts_connections(&servers).await =>
                    {
                        Error::NotNats { url, cause }
                    }
                    error => error,
                });
            }
        };

        let info = client.server_info();
        if !server_at_least(&info.version, MIN_SERVER) {
            return Err(Error::ServerTooOld {
                url,
                version: info.version,
            });
        }
        if !info.jetstream {
            return Err(Error::JetStreamDisabled {
                url,
                cause: "the server announces no JetStream".into(),
            });
        }
        let mut jetstream = jetstream::new(client.clone());
        jetstream.set_timeout(config.request_timeout);
        // No request here: a command that connects, reads the registry and leaves pays for
        // every round trip. An account without JetStream on a server that has it is told
        // apart when its first JetStream request is refused (`stream`).
        Ok(Cluster {
            jetstream,
            client,
            url: url.into(),
            bucket_replicas: config.bucket_replicas.max(1),
            request_timeout: config.request_timeout,
        })
    }

    /// The server's URL as messages show it (no password).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The version of the server this connection is on now.
    pub fn server_version(&self) -> String {
        self.client.server_info().version
    }

    /// The stream named `name`, or `None` when it does not exist;
    /// [`Error::JetStreamDisabled`] when this account has no JetStream.
    pub(crate) async fn stream(
        &self,
        name: &str,
        operation: &'static str,
    ) -> Result<Option<jetstream::stream::Stream>> {
        match self.jetstream.get_stream(name).await {
            Ok(stream) => Ok(Some(stream)),
            Err(e) => match e.kind() {
                GetStreamErrorKind::JetStream(js)
                    if js.error_code() == ErrorCode::STREAM_NOT_FOUND =>
                {
                    Ok(None)
                }
                GetStreamErrorKind::JetStream(js)
                    if js.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT
                        || js.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED =>
                {
                    Err(Error::JetStreamDisabled {
                        url: self.url().into(),
                        cause: one_line(&e.to_string()),
                    })
                }
                _ => Err(Error::request(self.url(), operation, e)),
            },
        }
    }

    /// Whether the connection is up now (it reconnects by itself when not).
    pub fn is_connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }
}

async fn options(config: &NatsConfig, servers: &[&str]) -> Result<ConnectOptions> {
    let mut options = ConnectOptions::new()
        .connection_timeout(config.connect_timeout)
        .request_timeout(Some(config.request_timeout))
        .ping_interval(PING_INTERVAL)
        .reconnect_delay_callback(reconnect_delay)
        .require_tls(config.require_tls);
    if let Some(name) = &config.client_name {
        options = options.name(name);
    }
    // The client library parses a user and password in a URL but does not send them.
    let in_url = servers
        .iter()
        .filter_map(|url| url.parse::<ServerAddr>().ok())
        .find_map(|addr| {
            let user = percent_decoded(addr.username()?);
            Some(match addr.password() {
                Some(password) => (Some(user), percent_decoded(password)),
                None => (None, user),
            })
        });
    match in_url {
        Some((Some(user), password)) => options = options.user_and_password(user, password),
        Some((None, token)) => options = options.token(token),
        None => {}
    }
    if let Some(path) = &config.credentials {
        options = options
            .credentials_file(path)
            .await
            .map_err(|e| file_error("credentials file", path, e))?;
    }
    if let Some(path) = &config.ca {
        readable("CA certificate", path)?;
        options = options.add_root_certificates(path.clone());
    }
    if let Some((cert, key)) = &config.client_certificate {
        readable("client certificate", cert)?;
        readable("client key", key)?;
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    Ok(options)
}

/// Whether something accepts TCP connections at one of `servers` (each tried for at most a
/// second): what tells a port that answers with something other than NATS from one where
/// nothing listens, when the client library only timed out.
async fn accepts_connections(servers: &[&str]) -> bool {
    for server in servers {
        let Ok(addr) = server.parse::<ServerAddr>() else {
            continue;
        };
        let host = addr.host().trim_start_matches('[').trim_end_matches(']');
        let connect = tokio::net::TcpStream::connect((host, addr.port()));
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(1), connect).await {
            return true;
        }
    }
    false
}

/// The wait before connection attempt `attempts` (1 for the first). The client library waits
/// this long before every attempt, the first connection's included: none then, so that a
/// command that connects once pays no idle time, then 200 ms doubling up to
/// [`MAX_RECONNECT_DELAY`].
fn reconnect_delay(attempts: usize) -> Duration {
    if attempts <= 1 {
        return Duration::ZERO;
    }
    let exponent = u32::try_from(attempts.min(8)).unwrap_or(8);
    (Duration::from_millis(50) * 2u32.pow(exponent)).min(MAX_RECONNECT_DELAY)
}

/// `%XX` escapes in a URL's user or password replaced by their bytes (invalid escapes are
/// kept as written).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A file the client library reads only while connecting, checked first so that a typo is
/// reported as a file error and not as a TLS failure.
fn readable(what: &'static str, path: &std::path::Path) -> Result<()> {
    std::fs::File::open(path)
        .map(drop)
        .map_err(|e| file_error(what, path, e))
}

fn file_error(what: &'static str, path: &std::path::Path, e: std::io::Error) -> Error {
    Error::File {
        what,
        path: path.to_path_buf(),
        cause: one_line(&e.to_string()),
    }
}

fn connect_error(url: &str, e: async_nats::ConnectError) -> Error {
    let url = url.to_string();
    let cause = one_line(&e.to_string());
    match e.kind() {
        ConnectErrorKind::ServerParse => Error::InvalidUrl { url, cause },
        ConnectErrorKind::Authentication | ConnectErrorKind::AuthorizationViolation => {
            Error::Unauthorized { url, cause }
        }
        // The server's alert is the one word that tells a missing client certificate from an
        // untrusted server certificate.
        ConnectErrorKind::Tls | ConnectErrorKind::Io
            if cause.contains("CertificateRequired") || cause.contains("BadCertificate") =>
        {
            Error::ClientCertificate { url, cause }
        }
        ConnectErrorKind::Tls => Error::Tls { url, cause },
        ConnectErrorKind::Io if failed_handshake(&e) => Error::Tls { url, cause },
        ConnectErrorKind::Dns
        | ConnectErrorKind::TimedOut
        | ConnectErrorKind::Io
        | ConnectErrorKind::MaxReconnects => Error::Unreachable { url, cause },
    }
}

/// Whether an I/O failure is the TLS handshake's: the TLS layer reports a certificate it does
/// not trust (or any other protocol failure) as invalid data, where a refused or reset
/// connection has its own kind.
fn failed_handshake(e: &async_nats::ConnectError) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::InvalidData {
                return true;
            }
        }
        source = error.source();
    }
    false
}

/// Whether `version` (`2.12.8`, `2.11.0-RC.1`) is at least `(major, minor)`. An unreadable
/// version passes: a server that lacks a feature still says so when it is used.
fn server_at_least(version: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = version
        .trim_start_matches('v')
        .split(['.', '-'])
        .map(|part| part.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(have_major), Some(have_minor)) => (have_major, have_minor) >= (major, minor),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_attempt_does_not_wait_and_retries_back_off_to_the_cap() {
        assert_eq!(reconnect_delay(0), Duration::ZERO);
        assert_eq!(reconnect_delay(1), Duration::ZERO);
        assert_eq!(reconnect_delay(2), Duration::from_millis(200));
        assert_eq!(reconnect_delay(3), Duration::from_millis(400));
        assert_eq!(reconnect_delay(5), MAX_RECONNECT_DELAY);
        assert_eq!(reconnect_delay(usize::MAX), MAX_RECONNECT_DELAY);
    }

    #[test]
    fn percent_escapes() {
        assert_eq!(percent_decoded("p%40ss%3Aword"), "p@ss:word");
        assert_eq!(percent_decoded("plain"), "plain");
        assert_eq!(percent_decoded("100%"), "100%");
        assert_eq!(percent_decoded("%zz%4"), "%zz%4");
    }

    #[test]
    fn server_versions() {
        assert!(server_at_least("2.11.0", (2, 11)));
        assert!(server_at_least("2.12.8", (2, 11)));
        assert!(server_at_least("3.0.0", (2, 11)));
        assert!(server_at_least("v2.11.0-RC.1", (2, 11)));
        assert!(!server_at_least("2.10.26", (2, 11)));
        assert!(!server_at_least("1.99.0", (2, 11)));
        assert!(server_at_least("dev", (2, 11)));
    }
}
