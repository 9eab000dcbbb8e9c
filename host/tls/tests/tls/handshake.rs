//! Real QUIC connections on 127.0.0.1: who gets in, who is refused at the handshake, and what
//! each side is told.

use std::fs;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::common::{client_folder, connect_once, init_folder, quic_client, tenant};
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use tasklet_tls::{client_config, client_tls, server_config, Cause, Validity};

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// A validity period that ended yesterday.
fn expired() -> Validity {
    let now = SystemTime::now();
    Validity::between(now - 2 * DAY, now - DAY).unwrap()
}

#[tokio::test]
async fn dev_client_connects_and_the_node_reads_its_tenant() {
    let (_temp, dir) = init_folder(&[]);
    for name in ["localhost", "127.0.0.1"] {
        let outcome = connect_once(
            server_config(dir.root()).unwrap(),
            client_config(dir.root(), &tenant("dev")).unwrap(),
            name,
        )
        .await;
        assert_eq!(outcome.node.unwrap(), tenant("dev"));
        assert_eq!(outcome.client.unwrap(), "dev");
    }
}

#[tokio::test]
async fn issued_tenant_connects_as_itself() {
    let (_temp, dir) = init_folder(&[]);
    let team = tenant("team-7.gpu_jobs");
    tasklet_tls::issue(dir.root(), &team, Validity::days(1).unwrap()).unwrap();
    let outcome = connect_once(
        server_config(dir.root()).unwrap(),
        client_config(dir.root(), &team).unwrap(),
        "localhost",
    )
    .await;
    assert_eq!(outcome.node.unwrap(), team);
    assert_eq!(outcome.client.unwrap(), "team-7.gpu_jobs");
}

#[tokio::test]
async fn client_with_no_certificate_is_refused() {
    let (_temp, dir) = init_folder(&[]);
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(dir.ca_cert()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![tasklet_tls::ALPN.to_vec()];

    let outcome = connect_once(
        server_config(dir.root()).unwrap(),
        quic_client(tls),
        "localhost",
    )
    .await;
    let (node, client) = outcome.assert_refused(Cause::ClientCertMissing);
    assert_eq!(
        client,
        "the node refused this client: it presented no certificate, and the node requires one \
         (run the client with `--certs DIR` holding ca.pem and a tenant's certificate)"
    );
    assert!(node.starts_with("this node refused a client: "), "{node}");
}

#[tokio::test]
async fn client_certificate_from_another_ca_is_refused() {
    let (_node_temp, node_dir) = init_folder(&[]);
    let (_other_temp, other_dir) = init_folder(&[]);
    // Trusts the node's CA, presents a certificate from the other one.
    let dev = tenant("dev");
    let client = client_folder(
        &node_dir,
        "dev",
        &other_dir.tenant_cert(&dev),
        &other_dir.tenant_key(&dev),
    );

    let outcome = connect_once(
        server_config(node_dir.root()).unwrap(),
        client_config(client.path(), &dev).unwrap(),
        "localhost",
    )
    .await;
    let (node, client) = outcome.assert_refused(Cause::ClientCertUnknownCa);
    assert_eq!(
        client,
        "the node refused this client's certificate: it is not signed by the node's CA \
         (issue one with `tasklet certs issue DIR --tenant NAME` from the node's certificate folder)"
    );
    assert!(
        node.starts_with(
            "this node refused a client's certificate: it is not signed by the node's CA"
        ),
        "{node}"
    );
}

#[tokio::test]
async fn expired_client_certificate_is_refused() {
    let (_temp, dir) = init_folder(&[]);
    let old = tenant("old");
    tasklet_tls::issue(dir.root(), &old, expired()).unwrap();
    let outcome = connect_once(
        server_config(dir.root()).unwrap(),
        client_config(dir.root(), &old).unwrap(),
        "localhost",
    )
    .await;
    let (_, client) = outcome.assert_refused(Cause::ClientCertExpired);
    assert!(client.contains("has expired"), "{client}");
}

#[tokio::test]
async fn client_certificate_naming_no_tenant_is_refused() {
    let (_temp, dir) = init_folder(&[]);
    // Signed by the right CA, for client authentication, but with no tenant URI.
    let ca_key = KeyPair::from_pem(&fs::read_to_string(dir.ca_key()).unwrap()).unwrap();
    let issuer =
        Issuer::from_ca_cert_pem(&fs::read_to_string(dir.ca_cert()).unwrap(), ca_key).unwrap();
    let mut params = CertificateParams::new(vec!["dev.example".to_owned()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, "dev");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let files = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (files.path().join("c.pem"), files.path().join("c.key"));
    fs::write(&cert_path, cert.pem()).unwrap();
    fs::write(&key_path, key.serialize_pem()).unwrap();
    let client = client_folder(&dir, "anon", &cert_path, &key_path);

    let outcome = connect_once(
        server_config(dir.root()).unwrap(),
        client_config(client.path(), &tenant("anon")).unwrap(),
        "localhost",
    )
    .await;
    let (_, client) = outcome.assert_refused(Cause::ClientCertNoTenant);
    assert!(client.contains("it names no tenant"), "{client}");
}

#[tokio::test]
async fn node_certificate_presented_by_a_client_is_refused() {
    let (_temp, dir) = init_folder(&[]);
    let client = client_folder(&dir, "node", &dir.node_cert(), &dir.node_key());
    let outcome = connect_once(
        server_config(dir.root()).unwrap(),
        client_config(client.path(), &tenant("node")).unwrap(),
        "localhost",
    )
    .await;
    outcome.assert_refused(Cause::ClientCertWrongPurpose);
}

#[tokio::test]
async fn node_from_another_ca_is_refused_by_the_client() {
    let (_node_temp, node_dir) = init_folder(&[]);
    let (_other_temp, other_dir) = init_folder(&[]);
    let outcome = connect_once(
        server_config(node_dir.root()).unwrap(),
        client_config(other_dir.root(), &tenant("dev")).unwrap(),
        "localhost",
    )
    .await;
    let (node, client) = outcome.assert_refused(Cause::NodeCertUnknownCa);
    assert!(
        client.starts_with("this client refused the node's certificate: it is not signed by the CA the client trusts"),
        "{client}"
    );
    assert!(
        node.starts_with("a client refused this node's certificate"),
        "{node}"
    );
}

#[tokio::test]
async fn node_certificate_for_another_name_is_refused_by_the_client() {
    let (_temp, dir) = init_folder(&["node-a.example".to_owned()]);
    let config = || {
        (
            server_config(dir.root()).unwrap(),
            client_config(dir.root(), &tenant("dev")).unwrap(),
        )
    };
    // A name given at init is accepted…
    let (node, client) = config();
    let outcome = connect_once(node, client, "node-a.example").await;
    assert_eq!(outcome.client.unwrap(), "dev");
    // …one the certificate does not list is not.
    let (node, client) = config();
    let outcome = connect_once(node, client, "node-b.example").await;
    let (_, client) = outcome.assert_refused(Cause::NodeCertNameMismatch);
    assert!(
        client.contains("not valid for the name the client connected to"),
        "{client}"
    );
    let detail =
        tasklet_tls::Refusal::find(&**outcome.client.as_ref().unwrap_err(), quinn::Side::Client)
            .unwrap()
            .detail
            .unwrap();
    assert!(detail.contains("node-b.example"), "{detail}");
}

#[tokio::test]
async fn expired_node_certificate_is_refused_by_the_client() {
    let (_temp, dir) = init_folder(&[]);
    tasklet_tls::issue_node(dir.root(), &[], expired()).unwrap();
    let outcome = connect_once(
        server_config(dir.root()).unwrap(),
        client_config(dir.root(), &tenant("dev")).unwrap(),
        "localhost",
    )
    .await;
    let (_, client) = outcome.assert_refused(Cause::NodeCertExpired);
    assert!(
        client.starts_with("this client refused the node's certificate: it has expired"),
        "{client}"
    );
}

#[tokio::test]
async fn renewed_node_certificate_is_accepted() {
    let (_temp, dir) = init_folder(&[]);
    let before = tasklet_tls::node_fingerprint(dir.root()).unwrap();
    tasklet_tls::issue_node(dir.root(), &[], Validity::days(1).unwrap()).unwrap();
    assert_ne!(tasklet_tls::node_fingerprint(dir.root()).unwrap(), before);
    let outcome = connect_once(
        server_config(dir.root()).unwrap(),
        client_config(dir.root(), &tenant("dev")).unwrap(),
        "localhost",
    )
    .await;
    assert_eq!(outcome.node.unwrap(), tenant("dev"));
}

#[tokio::test]
async fn client_speaking_another_protocol_version_is_refused() {
    let (_temp, dir) = init_folder(&[]);
    let mut tls = client_tls(dir.root(), &tenant("dev")).unwrap();
    tls.alpn_protocols = vec![b"tasklet/0".to_vec()];
    let outcome = connect_once(
        server_config(dir.root()).unwrap(),
        quic_client(tls),
        "localhost",
    )
    .await;
    let (_, client) = outcome.assert_refused(Cause::NoCommonProtocol);
    assert!(
        client.starts_with(
            "the handshake failed: the client and the node have no protocol version in common"
        ),
        "{client}"
    );
}
