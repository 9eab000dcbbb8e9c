//! Reaching a node: its address, the client's TLS and transport settings, the handshake.

use crate::error::ClientError;
use quinn::Side;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tasklet_tls::{explain, Tenant};
use tasklet_wire::DEFAULT_PORT;

/// How long a client waits for a node to answer its handshake unless told otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection may hear nothing from its node before it counts as lost, unless told
/// otherwise. Keep-alives go out at a third of it, so a live node is never taken for a dead one.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and as whom to connect.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// `HOST`, `HOST:PORT`, `IP`, `IP:PORT` or `[IPv6]:PORT`; the port defaults to 5701.
    pub addr: String,
    /// The certificate folder: `ca.pem` and the tenant's `tenants/NAME.pem`, `tenants/NAME.key`.
    pub certs: PathBuf,
    pub tenant: Tenant,
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    /// What the client calls itself in HELLO, for the node's logs.
    pub agent: String,
    /// The SHA-256 the node's certificate must have (64 hex digits), besides being signed by
    /// the folder's CA: what the node's cluster record says, so that a record pointing
    /// elsewhere is not believed.
    pub node_sha256: Option<String>,
}

impl ConnectOptions {
    pub fn new(
        addr: impl Into<String>,
        certs: impl Into<PathBuf>,
        tenant: Tenant,
    ) -> ConnectOptions {
        ConnectOptions {
            addr: addr.into(),
            certs: certs.into(),
            tenant,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            agent: format!("tasklet-remote {}", env!("CARGO_PKG_VERSION")),
            node_sha256: None,
        }
    }
}

/// A node's address and the name its certificate is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub addr: SocketAddr,
    pub server_name: String,
}

/// Reads `HOST[:PORT]` (brackets around an IPv6 address with a port) and resolves it.
pub(crate) fn target(text: &str) -> Result<Target, ClientError> {
    let bad = |reason: &str| ClientError::Address {
        addr: text.to_owned(),
        reason: reason.to_owned(),
    };
    if text.trim().is_empty() {
        return Err(ClientError::Address {
            addr: "(empty)".to_owned(),
            reason: "no address was given: expected HOST, HOST:PORT or [IPv6]:PORT".to_owned(),
        });
    }
    if let Some((scheme, _)) = text.split_once("://") {
        return Err(bad(&format!(
            "a node's address is HOST[:PORT], with no {scheme}:// before it (the fabric speaks QUIC, not \
             a URL's protocol)"
        )));
    }
    let (host, port) =
        split_host_port(text).ok_or_else(|| bad("expected HOST, HOST:PORT or [IPv6]:PORT"))?;
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => {
                return Err(bad(&format!(
                    "the port is not a number from 1 to 65535 (a node listens on {DEFAULT_PORT} unless told otherwise)"
                )))
            }
            Ok(port) => port,
        },
    };
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|err| bad(&format!("cannot resolve {host}: {err}")))?
        .next()
        .ok_or_else(|| bad(&format!("{host} resolves to no address")))?;
    Ok(Target {
        addr,
        server_name: host.to_owned(),
    })
}

fn split_host_port(text: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?))),
        };
    }
    match text.matches(':').count() {
        0 => Some((text, None)).filter(|(h, _)| !h.is_empty()),
        1 => text
            .split_once(':')
            .map(|(h, p)| (h, Some(p)))
            .filter(|(h, _)| !h.is_empty()),
        // A bare IPv6 address: no port.
        _ => Some((text, None)),
    }
}

/// `[HOST]:PORT` where `text` is an IPv6 address without brackets whose last group could be
/// meant as a port (`::1:5701`): it reads as one address, and nothing may answer there.
fn port_in_bare_ipv6(text: &str) -> Option<String> {
    if text.starts_with('[') || text.parse::<std::net::Ipv6Addr>().is_err() {
        return None;
    }
    let (host, port) = text.rsplit_once(':')?;
    let port_like = !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p > 0);
    (port_like && host.parse::<std::net::Ipv6Addr>().is_ok()).then(|| format!("[{host}]:{port}"))
}

/// The client's QUIC configuration: the folder's TLS, the transport settings shared with the
/// node (`tasklet_tls::transport`: datagram sizes, windows for bulk transfers), keep-alives
/// within the idle timeout.
pub(crate) fn client_config(options: &ConnectOptions) -> Result<quinn::ClientConfig, ClientError> {
    let mut config = tasklet_tls::client_config(&options.certs, &options.tenant)?;
    let mut transport = tasklet_tls::transport::transport_config();
    let idle = quinn::IdleTimeout::try_from(options.idle_timeout)
        .unwrap_or_else(|_| quinn::VarInt::MAX.into());
    transport
        .max_idle_timeout(Some(idle))
        .keep_alive_interval(Some(options.idle_timeout / 3))
        .max_concurrent_uni_streams(0u32.into());
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// A client endpoint on an ephemeral port of `local`'s family, accepting the datagram sizes the
/// node may discover.
fn client_endpoint(local: SocketAddr) -> std::io::Result<quinn::Endpoint> {
    let socket = tasklet_tls::transport::socket(local)?;
    let runtime = quinn::default_runtime()
        .ok_or_else(|| std::io::Error::other("no async runtime found for the endpoint"))?;
    quinn::Endpoint::new(
        tasklet_tls::transport::endpoint_config(),
        None,
        socket,
        runtime,
    )
}

/// Connects to the node, within the connect timeout.
pub(crate) async fn handshake(
    options: &ConnectOptions,
) -> Result<(quinn::Endpoint, quinn::Connection), ClientError> {
    let target = target(&options.addr)?;
    let config = client_config(options)?;
    let mut endpoint = client_endpoint(any_port_for(target.addr))
        .map_err(|err| ClientError::Setup(format!("cannot open a UDP socket: {err}")))?;
    endpoint.set_default_client_config(config);
    let connecting = endpoint
        .connect(target.addr, &target.server_name)
        .map_err(|err| ClientError::Address {
            addr: options.addr.clone(),
            reason: err.to_string(),
        })?;
    // What was tried, the port included when the address given left it to the default.
    let tried = if let Some(meant) = port_in_bare_ipv6(&options.addr) {
        format!(
            "[{}]:{} (read as one IPv6 address, the port left to the default; for a port, write {meant})",
            options.addr,
            target.addr.port()
        )
    } else if options.addr.ends_with(&format!(":{}", target.addr.port())) {
        options.addr.clone()
    } else {
        format!("{} (port {})", options.addr, target.addr.port())
    };
    let unreachable = || ClientError::Unreachable {
        addr: tried.clone(),
        seconds: options.connect_timeout.as_secs(),
    };
    let answered = tokio::select! {
        answered = tokio::time::timeout(options.connect_timeout, connecting) => answered,
        () = port_closed(target.addr) => {
            return Err(ClientError::PortClosed { addr: tried.clone() })
        }
    };
    match answered {
        Ok(Ok(connection)) => {
            check_fingerprint(options, &connection)?;
            Ok((endpoint, connection))
        }
        // A handshake that heard nothing for the idle timeout: nothing answers there.
        Ok(Err(quinn::ConnectionError::TimedOut)) => Err(unreachable()),
        Ok(Err(err)) => Err(refusal_or_loss(&err)),
        Err(_) => Err(unreachable()),
    }
}

/// A local address of `addr`'s family, any port.
fn any_port_for(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    }
}

/// Completes when the machine at `addr` refuses UDP to its port (an ICMP "port unreachable",
/// which the kernel reports only to a socket connected to that address, and quinn's is not):
/// nothing listens there, and the handshake would wait its whole timeout for nothing. It sends
/// one byte, which no QUIC endpoint takes for a packet (a node drops it unanswered); where the
/// machine or a firewall says nothing, this never completes and the handshake's timeout speaks.
async fn port_closed(addr: SocketAddr) {
    if let Ok(socket) = tokio::net::UdpSocket::bind(any_port_for(addr)).await {
        if socket.connect(addr).await.is_ok() && socket.send(&[0]).await.is_ok() {
            let mut answer = [0u8; 64];
            if let Err(err) = socket.recv(&mut answer).await {
                if err.kind() == std::io::ErrorKind::ConnectionRefused {
                    return;
                }
            }
        }
    }
    std::future::pending().await
}

/// The node's certificate is the one [`ConnectOptions::node_sha256`] names, when it names one.
fn check_fingerprint(
    options: &ConnectOptions,
    connection: &quinn::Connection,
) -> Result<(), ClientError> {
    let Some(expected) = &options.node_sha256 else {
        return Ok(());
    };
    let presented = connection
        .peer_identity()
        .and_then(|identity| {
            identity
                .downcast::<Vec<rustls_pki_types::CertificateDer<'static>>>()
                .ok()
        })
        .and_then(|chain| chain.first().map(tasklet_tls::fingerprint));
    match presented {
        Some(presented) if presented.eq_ignore_ascii_case(expected) => Ok(()),
        presented => {
            connection.close(0u32.into(), b"unexpected node certificate");
            Err(ClientError::Refused(format!(
                "the node at {} presented a certificate with SHA-256 {}, not the {expected} its \
                 cluster record names: not using it",
                options.addr,
                presented.as_deref().unwrap_or("(none)")
            )))
        }
    }
}

/// What a client is told when the node turned its connection away at the door: it serves its
/// most connections, or it is stopping (its endpoint refuses new connections while it closes).
const NODE_FULL: &str = "the node refused the connection: it serves as many connections as it \
    may (its max-connections, summed over every tenant), or it is stopping: try again later or \
    another node";

/// A connection error as the client reports it: a refused handshake explained in one line, or
/// the loss of the connection.
pub(crate) fn refusal_or_loss(err: &quinn::ConnectionError) -> ClientError {
    if tasklet_tls::Refusal::from_connection_error(err, Side::Client).is_some() {
        return ClientError::Refused(explain(err, Side::Client));
    }
    // A node that serves as many connections as it may, or one that is stopping, turns new
    // ones away before their handshake (QUIC's CONNECTION_REFUSED); nothing of this client's
    // was there.
    if let quinn::ConnectionError::ConnectionClosed(close) = err {
        if close.error_code == quinn::TransportErrorCode::CONNECTION_REFUSED {
            return ClientError::Refused(NODE_FULL.into());
        }
    }
    // A tenant the node's policy (or its authorizer) turns away after the handshake, or one
    // that already holds its most connections.
    if let quinn::ConnectionError::ApplicationClosed(close) = err {
        let code = close.error_code.into_inner();
        if code == tasklet_wire::ErrorCode::Unauthorized as u64
            || code == tasklet_wire::ErrorCode::CapacityExceeded as u64
        {
            let reason = String::from_utf8_lossy(&close.reason);
            return ClientError::Refused(format!("the node refused this client: {reason}"));
        }
    }
    ClientError::Disconnected(lost(err))
}

/// Why a connection ended, for people.
pub(crate) fn lost(err: &quinn::ConnectionError) -> String {
    match err {
        quinn::ConnectionError::ApplicationClosed(close) => {
            let reason = String::from_utf8_lossy(&close.reason);
            if reason.is_empty() {
                format!("the node closed the connection (code {})", close.error_code)
            } else {
                format!("the node closed the connection: {reason}")
            }
        }
        quinn::ConnectionError::TimedOut => {
            "the node stopped answering (nothing heard within the idle timeout)".into()
        }
        quinn::ConnectionError::Reset => "the node reset the connection (did it restart?)".into(),
        quinn::ConnectionError::LocallyClosed => "this client closed the connection".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_with_and_without_ports() {
        let t = target("127.0.0.1").unwrap();
        assert_eq!(t.addr, "127.0.0.1:5701".parse().unwrap());
        assert_eq!(t.server_name, "127.0.0.1");
        let t = target("127.0.0.1:9").unwrap();
        assert_eq!(t.addr.port(), 9);
        let t = target("[::1]:7000").unwrap();
        assert_eq!(t.addr, "[::1]:7000".parse().unwrap());
        assert_eq!(t.server_name, "::1");
        let t = target("::1").unwrap();
        assert_eq!(t.addr.port(), 5701);
        let t = target("localhost:6000").unwrap();
        assert_eq!((t.addr.port(), t.server_name.as_str()), (6000, "localhost"));
    }

    #[test]
    fn a_port_written_into_a_bare_ipv6_address_is_pointed_out() {
        assert_eq!(port_in_bare_ipv6("::1:5701").as_deref(), Some("[::1]:5701"));
        assert_eq!(
            port_in_bare_ipv6("fd00::7:7000").as_deref(),
            Some("[fd00::7]:7000")
        );
        for plain in [
            "::1",
            "[::1]:5701",
            "127.0.0.1:5701",
            "localhost",
            "2001:db8::1",
        ] {
            assert_eq!(port_in_bare_ipv6(plain), None, "{plain}");
        }
    }

    #[test]
    fn malformed_addresses_say_what_is_expected() {
        let err = target("").unwrap_err().to_string();
        assert!(
            err.starts_with("cannot reach node (empty): no address was given"),
            "{err}"
        );
        for bad in [
            ":5701",
            "[::1",
            "[::1]x",
            "host:port",
            "127.0.0.1:70000",
            "127.0.0.1:0",
            "http://localhost:5701",
        ] {
            let err = target(bad).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("cannot reach node {bad}: ")),
                "{err}"
            );
        }
        let err = target("localhost:0").unwrap_err().to_string();
        assert!(err.contains("from 1 to 65535"), "{err}");
        let err = target("quic://localhost").unwrap_err().to_string();
        assert!(err.contains("no quic://"), "{err}");
    }
}
