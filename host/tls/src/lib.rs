//! Mutual TLS for the tasklet fabric, with tenants taken from client certificates.
//!
//! A `tasklet node` and its clients talk QUIC (quinn), and both ends prove who they are with a
//! certificate from one CA: the node, that it is the node the client meant to reach; the
//! client, which tenant it acts for. This crate holds everything about those certificates:
//!
//! - a certificate folder and its files ([`CertDir`]): [`init`] makes one (a CA, a node
//!   certificate, a client certificate for tenant [`DEFAULT_TENANT`]), [`issue`] adds a
//!   tenant, [`issue_node`] renews the node's certificate;
//! - the quinn configurations built from a folder: [`server_config`] for a node, which requires
//!   a client certificate from the CA that names a tenant, and [`client_config`] for a client,
//!   which trusts only that CA and presents its tenant's certificate; both speak [`ALPN`];
//! - what a peer's certificate says: [`peer_tenant`] / [`tenant_of`] (the tenant, carried as a
//!   `tasklet://tenant/<name>` URI: see [`Tenant`] for why there), [`fingerprint`] /
//!   [`node_fingerprint`] (what the cluster registry publishes);
//! - the QUIC transport settings both ends share ([`transport`]): datagram sizes and
//!   flow-control windows;
//! - refusals explained: [`Refusal`] / [`explain`] turn the error of a refused handshake, on
//!   either side, into one line of cause and fix.
//!
//! Every failure to read or use a folder is an [`Error`] naming the file; nothing here panics
//! on what it reads.
//!
//! # Using it
//!
//! A node serves with [`server_config`] and reads each connection's tenant; a client connects
//! with [`client_config`] to a name the node's certificate lists:
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use tasklet_tls::{client_config, explain, peer_tenant, server_config, Tenant};
//!
//! tasklet_tls::init("certs", &[])?; // once: CA, node, tenant "dev"
//!
//! // The node.
//! let node = quinn::Endpoint::server(server_config("certs")?, "127.0.0.1:4433".parse()?)?;
//! tokio::spawn(async move {
//!     while let Some(incoming) = node.accept().await {
//!         match incoming.await {
//!             Ok(connection) => {
//!                 let tenant = peer_tenant(&connection)?; // always there: checked in the handshake
//!                 // … serve `tenant` …
//!             }
//!             Err(err) => eprintln!("{}", explain(&err, quinn::Side::Server)),
//!         }
//!     }
//!     Ok::<_, tasklet_tls::PeerTenantError>(())
//! });
//!
//! // A client, acting for tenant "dev".
//! let mut client = quinn::Endpoint::client("127.0.0.1:0".parse()?)?;
//! client.set_default_client_config(client_config("certs", &Tenant::new("dev")?)?);
//! match client.connect("127.0.0.1:4433".parse()?, "localhost")?.await {
//!     Ok(connection) => { /* … talk … */ }
//!     // e.g. "this client refused the node's certificate: it is not signed by the CA the
//!     // client trusts (connect to the right node, or give the client the ca.pem of …)"
//!     Err(err) => eprintln!("{}", explain(&err, quinn::Side::Client)),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! In TLS 1.3 a client finishes its half of the handshake before the node has checked the
//! client's certificate, so a client whose certificate is refused may see `connect` succeed and
//! learn of the refusal from its first stream operation (or [`quinn::Connection::closed`]); the
//! error is the same either way, and [`explain`] reads it wherever it surfaces.
//!
//! A refused node certificate, on the other hand, always fails `connect` itself.

mod authority;
mod config;
mod digest;
mod error;
mod files;
mod layout;
mod peer;
mod profiles;
mod refusal;
mod tenant;
pub mod transport;
mod validity;
mod verifier;

pub use authority::{init, issue, issue_node, DEFAULT_TENANT};
pub use config::{
    check_node_unexpired, client_config, client_tls, node_valid_for, server_config, server_tls,
    ALPN,
};
pub use error::Error;
pub use layout::CertDir;
pub use peer::{
    fingerprint, node_fingerprint, node_names, peer_tenant, tenant_of, PeerTenantError,
};
pub use refusal::{explain, Cause, Refusal};
pub use tenant::{InvalidTenant, Tenant};
pub use validity::{Validity, CA_DAYS, LEAF_DAYS};
