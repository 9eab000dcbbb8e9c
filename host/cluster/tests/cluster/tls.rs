//! NATS over TLS: the CA the operator names is the one trusted; without it the failure says
//! what to give.

use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tasklet_cluster::{Cluster, Error, Heartbeat, NatsConfig, Registrar, Registry};

use crate::support::{nats_or_skip, record};

/// Writes ca.pem, server.pem and server.key (for 127.0.0.1) into `dir`.
fn write_certificates(dir: &Path) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), server.pem()).unwrap();
    std::fs::write(dir.join("server.key"), server_key.serialize_pem()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_the_operators_ca() {
    let certs = tempfile::tempdir().unwrap();
    write_certificates(certs.path());
    let (cert, key) = (
        certs.path().join("server.pem"),
        certs.path().join("server.key"),
    );
    let server = nats_or_skip!(
        jetstream: true,
        args: ["--tls", "--tlscert", cert.to_str().unwrap(), "--tlskey", key.to_str().unwrap()]
    );
    let url = format!("tls://127.0.0.1:{}", server.port());

    let untrusted = Cluster::connect(&NatsConfig::new(&url)).await.unwrap_err();
    assert!(matches!(untrusted, Error::Tls { .. }), "{untrusted:?}");
    assert!(untrusted.to_string().contains("give the CA"), "{untrusted}");

    let mut config = NatsConfig::new(&url);
    config.ca = Some(certs.path().join("ca.pem"));
    let cluster = Cluster::connect(&config).await.expect("TLS with the CA");
    let registrar = Registrar::start(&cluster, Heartbeat::default(), || record("secure", 1))
        .await
        .expect("register over TLS");
    let nodes = Registry::open(&cluster)
        .await
        .unwrap()
        .list()
        .await
        .unwrap();
    assert_eq!(nodes.len(), 1);
    registrar.stop().await.expect("stop");
}

/// `tls://` at a server without TLS: the failure says to use nats://, not to give a CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_at_a_server_without_it_says_to_use_nats() {
    let server = nats_or_skip!(jetstream: true);
    let url = format!("tls://127.0.0.1:{}", server.port());
    let err = Cluster::connect(&NatsConfig::new(&url)).await.unwrap_err();
    assert!(matches!(err, Error::Tls { .. }), "{err:?}");
    assert!(
        err.to_string().contains("does not speak TLS: use nats://"),
        "{err}"
    );
}
