//! A node and a client over real QUIC on 127.0.0.1, each reporting how its side of one
//! connection ended.

use std::error::Error as StdError;
use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::QuicClientConfig;
use quinn::{Endpoint, Side};
use tasklet_tls::{CertDir, Refusal, Tenant};

pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Bound on every wait: a handshake on loopback takes far less, a hang fails the test.
pub const WAIT: Duration = Duration::from_secs(10);

/// How both sides of one connection ended: the node with the tenant it read (or its error),
/// the client with the tenant name the node sent back (or its error).
pub struct Outcome {
    pub node: Result<Tenant, BoxError>,
    pub client: Result<String, BoxError>,
}

impl Outcome {
    /// Asserts both sides failed with `cause`, and returns their one-line explanations
    /// (node's, client's).
    pub fn assert_refused(&self, cause: tasklet_tls::Cause) -> (String, String) {
        let node_err = self
            .node
            .as_ref()
            .expect_err("the node accepted the connection");
        let client_err = self.client.as_ref().expect_err("the client got an answer");
        let node = Refusal::find(&**node_err, Side::Server)
            .unwrap_or_else(|| panic!("node error is no refusal: {node_err}"));
        let client = Refusal::find(&**client_err, Side::Client)
            .unwrap_or_else(|| panic!("client error is no refusal: {client_err}"));
        assert_eq!(node.cause, cause, "node side: {node_err}");
        assert_eq!(client.cause, cause, "client side: {client_err}");
        (node.to_string(), client.to_string())
    }
}

/// Serves one connection with `node` (a node's quinn configuration), connects to it once with
/// `client` by `server_name`, and reports how both sides ended.
pub async fn connect_once(
    node: quinn::ServerConfig,
    client: quinn::ClientConfig,
    server_name: &str,
) -> Outcome {
    let localhost: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let server = Endpoint::server(node, localhost).expect("node endpoint");
    let addr = server.local_addr().expect("node address");
    let node_side = tokio::spawn(serve_one(server.clone()));

    let mut endpoint = Endpoint::client(localhost).expect("client endpoint");
    endpoint.set_default_client_config(client);
    let client = tokio::time::timeout(WAIT, ask_tenant(&endpoint, addr, server_name))
        .await
        .expect("client side hung");
    let node = tokio::time::timeout(WAIT, node_side)
        .await
        .expect("node side hung")
        .expect("node task panicked");
    server.close(0u32.into(), b"test over");
    endpoint.close(0u32.into(), b"test over");
    Outcome { node, client }
}

/// The node's side: accept one connection, read its tenant, send the name back, and wait for
/// the client to hang up.
async fn serve_one(endpoint: Endpoint) -> Result<Tenant, BoxError> {
    let incoming = endpoint.accept().await.ok_or("node endpoint closed")?;
    let connection = incoming.await?;
    let tenant = tasklet_tls::peer_tenant(&connection)?;
    let mut send = connection.open_uni().await?;
    send.write_all(tenant.as_str().as_bytes()).await?;
    send.finish()?;
    connection.closed().await;
    Ok(tenant)
}

/// The client's side: connect, read the tenant name the node sends, hang up.
async fn ask_tenant(
    endpoint: &Endpoint,
    addr: SocketAddr,
    server_name: &str,
) -> Result<String, BoxError> {
    let connection = endpoint.connect(addr, server_name)?.await?;
    let mut recv = connection.accept_uni().await?;
    let name = recv.read_to_end(64).await?;
    connection.close(0u32.into(), b"done");
    Ok(String::from_utf8(name)?)
}

/// A fresh certificate folder, removed when the returned guard drops.
pub fn init_folder(extra_names: &[String]) -> (tempfile::TempDir, CertDir) {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = tasklet_tls::init(temp.path(), extra_names).expect("init");
    (temp, dir)
}

pub fn tenant(name: &str) -> Tenant {
    Tenant::new(name).expect("valid tenant name")
}

/// A client folder: `ca`'s CA certificate, and `cert` / `key` as tenant `name`'s files.
pub fn client_folder(ca: &CertDir, name: &str, cert: &Path, key: &Path) -> tempfile::TempDir {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = CertDir::new(temp.path());
    fs::create_dir_all(dir.tenants()).unwrap();
    fs::copy(ca.ca_cert(), dir.ca_cert()).unwrap();
    fs::copy(cert, dir.tenant_cert(&tenant(name))).unwrap();
    fs::copy(key, dir.tenant_key(&tenant(name))).unwrap();
    temp
}

/// A quinn client configuration from rustls's, as `client_config` wraps it.
pub fn quic_client(tls: rustls::ClientConfig) -> quinn::ClientConfig {
    quinn::ClientConfig::new(Arc::new(
        QuicClientConfig::try_from(tls).expect("QUIC-capable"),
    ))
}
