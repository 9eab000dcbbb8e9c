//! Certificate folders: what `init` and `issue` write, what they refuse, and typed errors for
//! missing, unreadable and malformed files.

use std::fs;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::{init_folder, tenant};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use tasklet_tls::{
    client_config, fingerprint, issue, node_fingerprint, node_names, node_valid_for, server_config,
    tenant_of, CertDir, Error, PeerTenantError, Validity,
};
use x509_parser::extensions::GeneralName;

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn cert(path: &Path) -> CertificateDer<'static> {
    CertificateDer::from_pem_file(path).unwrap()
}

/// The names a certificate's subject alternative names list, as text.
fn alt_names(cert: &CertificateDer<'_>) -> Vec<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).unwrap();
    let names = parsed.subject_alternative_name().unwrap().unwrap();
    names
        .value
        .general_names
        .iter()
        .map(|name| match name {
            GeneralName::DNSName(dns) => dns.to_string(),
            GeneralName::URI(uri) => uri.to_string(),
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => IpAddr::from(<[u8; 4]>::try_from(*bytes).unwrap()).to_string(),
                _ => IpAddr::from(<[u8; 16]>::try_from(*bytes).unwrap()).to_string(),
            },
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn init_writes_the_documented_layout_with_private_keys_0600() {
    let (_temp, dir) = init_folder(&[]);
    let dev = tenant("dev");
    for public in [dir.ca_cert(), dir.node_cert(), dir.tenant_cert(&dev)] {
        assert_eq!(mode(&public), 0o644, "{}", public.display());
    }
    for private in [dir.ca_key(), dir.node_key(), dir.tenant_key(&dev)] {
        assert_eq!(mode(&private), 0o600, "{}", private.display());
    }
    let root = dir.root();
    assert_eq!(dir.ca_cert(), root.join("ca.pem"));
    assert_eq!(dir.ca_key(), root.join("ca.key"));
    assert_eq!(dir.node_cert(), root.join("node.pem"));
    assert_eq!(dir.node_key(), root.join("node.key"));
    assert_eq!(dir.tenant_cert(&dev), root.join("tenants/dev.pem"));
    assert_eq!(dir.tenant_key(&dev), root.join("tenants/dev.key"));
}

#[test]
fn a_tenant_certificate_under_another_tenants_name_is_refused_saying_whose_it_is() {
    let (_temp, dir) = init_folder(&[]);
    let (dev, team) = (tenant("dev"), tenant("team-7"));
    issue(dir.root(), &team, Validity::days(1).unwrap()).unwrap();
    fs::copy(dir.tenant_cert(&team), dir.tenant_cert(&dev)).unwrap();
    fs::copy(dir.tenant_key(&team), dir.tenant_key(&dev)).unwrap();
    let Err(err) = client_config(dir.root(), &dev) else {
        panic!("team-7's certificate was taken as dev's");
    };
    let text = err.to_string();
    assert!(
        text.contains("tenant `team-7`'s certificate, not `dev`'s")
            && text.contains("--tenant team-7"),
        "{text}"
    );
    // Its own name still works.
    client_config(dir.root(), &team).expect("team-7's own files");
}

#[test]
fn init_refuses_to_replace_a_ca() {
    let (_temp, dir) = init_folder(&[]);
    let ca_before = fs::read(dir.ca_cert()).unwrap();
    let key_before = fs::read(dir.ca_key()).unwrap();
    let err = tasklet_tls::init(dir.root(), &[]).unwrap_err();
    let Error::CaExists { dir: at, .. } = &err else {
        panic!("expected CaExists, got {err:?}");
    };
    assert_eq!(at, dir.root());
    let message = err.to_string();
    assert!(message.contains("already holds a CA"), "{message}");
    assert!(
        message.contains("tasklet certs issue DIR --tenant NAME"),
        "{message}"
    );
    assert_eq!(fs::read(dir.ca_cert()).unwrap(), ca_before);
    assert_eq!(fs::read(dir.ca_key()).unwrap(), key_before);

    // A CA key alone is a CA too.
    fs::remove_file(dir.ca_cert()).unwrap();
    assert!(matches!(
        tasklet_tls::init(dir.root(), &[]),
        Err(Error::CaExists { existing, .. }) if existing == dir.ca_key()
    ));
}

#[test]
fn node_certificate_lists_loopback_and_extra_names() {
    let extra = [
        "node-a.example".to_owned(),
        "10.1.2.3".to_owned(),
        "localhost".to_owned(),
    ];
    let (_temp, dir) = init_folder(&extra);
    assert_eq!(
        alt_names(&cert(&dir.node_cert())),
        [
            "localhost",
            "127.0.0.1",
            "::1",
            "node-a.example",
            "10.1.2.3"
        ]
    );
}

#[test]
fn init_with_a_bad_node_name_writes_nothing() {
    let temp = tempfile::tempdir().unwrap();
    for bad in ["not a name", "", "exa_mple..com"] {
        let err = tasklet_tls::init(temp.path(), &[bad.to_owned()]).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidNodeName { name } if name == bad),
            "{err:?}"
        );
    }
    assert_eq!(fs::read_dir(temp.path()).unwrap().count(), 0);
}

#[test]
fn tenant_lives_in_a_uri_of_its_client_certificate() {
    let (_temp, dir) = init_folder(&[]);
    let dev_cert = cert(&dir.tenant_cert(&tenant("dev")));
    assert_eq!(alt_names(&dev_cert), ["tasklet://tenant/dev"]);
    assert_eq!(tenant_of(&[dev_cert]).unwrap(), tenant("dev"));
    assert_eq!(
        tenant_of(&[cert(&dir.node_cert())]),
        Err(PeerTenantError::NoTenant)
    );
    assert_eq!(tenant_of(&[]), Err(PeerTenantError::NoCertificate));
    assert!(matches!(
        tenant_of(&[CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])]),
        Err(PeerTenantError::Unparsable(_))
    ));
}

#[test]
fn issue_adds_a_tenant_and_refuses_to_replace_one() {
    let (_temp, dir) = init_folder(&[]);
    let team = tenant("team-7");
    let path = issue(dir.root(), &team, Validity::days(30).unwrap()).unwrap();
    assert_eq!(path, dir.tenant_cert(&team));
    assert_eq!(mode(&dir.tenant_key(&team)), 0o600);
    assert_eq!(tenant_of(&[cert(&path)]).unwrap(), team);

    let before = fs::read(dir.tenant_key(&team)).unwrap();
    let err = issue(dir.root(), &team, Validity::days(30).unwrap()).unwrap_err();
    assert!(
        matches!(&err, Error::TenantExists { tenant, .. } if *tenant == team),
        "{err:?}"
    );
    assert_eq!(fs::read(dir.tenant_key(&team)).unwrap(), before);
}

#[test]
fn bad_tenant_names_are_typed_errors() {
    let err: Error = tasklet_tls::Tenant::new("../etc").unwrap_err().into();
    assert!(matches!(err, Error::InvalidTenant(ref invalid) if invalid.name == "../etc"));
    assert!(
        err.to_string()
            .starts_with("invalid tenant name \"../etc\""),
        "{err}"
    );
}

#[test]
fn issue_needs_the_ca_key_and_names_it() {
    let (_temp, dir) = init_folder(&[]);
    fs::remove_file(dir.ca_key()).unwrap();
    let err = issue(dir.root(), &tenant("x"), Validity::days(1).unwrap()).unwrap_err();
    assert!(
        matches!(&err, Error::Missing { path, .. } if *path == dir.ca_key()),
        "{err:?}"
    );
    assert!(err.to_string().contains("ca.key does not exist"), "{err}");

    let empty = tempfile::tempdir().unwrap();
    let err = issue(empty.path(), &tenant("x"), Validity::days(1).unwrap()).unwrap_err();
    let ca_cert = CertDir::new(empty.path()).ca_cert();
    assert!(
        matches!(&err, Error::Missing { path, .. } if *path == ca_cert),
        "{err:?}"
    );
    assert!(err.to_string().contains("tasklet certs init DIR"), "{err}");
}

#[test]
fn issue_refuses_a_ca_key_that_does_not_match() {
    let (_temp, dir) = init_folder(&[]);
    fs::copy(dir.node_key(), dir.ca_key()).unwrap();
    let err = issue(dir.root(), &tenant("x"), Validity::days(1).unwrap()).unwrap_err();
    assert!(
        matches!(&err, Error::KeyMismatch { cert, key } if *cert == dir.ca_cert() && *key == dir.ca_key()),
        "{err:?}"
    );
}

#[test]
fn fingerprint_is_the_sha256_of_the_node_certificate() {
    let (_temp, dir) = init_folder(&[]);
    let published = node_fingerprint(dir.root()).unwrap();
    assert_eq!(published.len(), 64);
    assert!(published
        .chars()
        .all(|c| matches!(c, '0'..='9' | 'a'..='f')));
    assert_eq!(published, fingerprint(&cert(&dir.node_cert())));
    let (_other_temp, other) = init_folder(&[]);
    assert_ne!(published, node_fingerprint(other.root()).unwrap());
}

/// Asserts `err` is `Malformed` about `path`.
fn assert_malformed(err: Error, path: &Path, reason_part: &str) {
    match err {
        Error::Malformed { path: at, reason } => {
            assert_eq!(at, path);
            assert!(reason.contains(reason_part), "{reason}");
        }
        other => panic!("expected Malformed for {}, got {other:?}", path.display()),
    }
}

#[test]
fn malformed_files_are_typed_errors_naming_the_file() {
    let (_temp, dir) = init_folder(&[]);
    let dev = tenant("dev");
    let good_ca = fs::read(dir.ca_cert()).unwrap();

    fs::write(dir.ca_cert(), "not a certificate\n").unwrap();
    let err = server_config(dir.root()).unwrap_err();
    assert_malformed(err, &dir.ca_cert(), "no PEM-encoded certificate");

    let mut truncated = good_ca.clone();
    truncated.truncate(good_ca.len() / 2);
    fs::write(dir.ca_cert(), &truncated).unwrap();
    let err = client_config(dir.root(), &dev).unwrap_err();
    // The missing end line in words, not as the list of its bytes.
    assert_malformed(
        err,
        &dir.ca_cert(),
        "not a valid PEM file (no `-----END CERTIFICATE-----` line: cut short?)",
    );

    fs::write(
        dir.ca_cert(),
        "-----BEGIN CERTIFICATE-----\nAAECAwQF\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let err = server_config(dir.root()).unwrap_err();
    assert_malformed(err, &dir.ca_cert(), "not valid X.509");
    fs::write(dir.ca_cert(), &good_ca).unwrap();

    let good_node_key = fs::read(dir.node_key()).unwrap();
    fs::write(dir.node_key(), "").unwrap();
    let err = server_config(dir.root()).unwrap_err();
    assert_malformed(err, &dir.node_key(), "no PEM-encoded private key");
    fs::write(dir.node_key(), &good_node_key).unwrap();

    // A certificate where the key should be: the reason, then where a good key comes from.
    fs::copy(dir.node_cert(), dir.tenant_key(&dev)).unwrap();
    let err = client_config(dir.root(), &dev).unwrap_err();
    assert_malformed(err, &dir.tenant_key(&dev), "no PEM-encoded private key");
    let err = client_config(dir.root(), &dev).unwrap_err().to_string();
    assert!(
        err.contains("replace it with the one `tasklet certs` made"),
        "{err}"
    );
    assert!(err.contains("tasklet certs issue"), "{err}");

    // The CA's certificate before the node's own in node.pem: the order is the fault, not the
    // key; and the CA's alone in it (with the CA's key) is not a node's either, nor a tenant's.
    let good_node = fs::read(dir.node_cert()).unwrap();
    fs::write(
        dir.node_cert(),
        [good_ca.clone(), good_node.clone()].concat(),
    )
    .unwrap();
    let err = server_config(dir.root()).unwrap_err();
    assert_malformed(err, &dir.node_cert(), "its first certificate is a CA's");
    fs::write(dir.node_cert(), &good_ca).unwrap();
    fs::copy(dir.root().join("ca.key"), dir.node_key()).unwrap();
    let err = server_config(dir.root()).unwrap_err();
    assert_malformed(err, &dir.node_cert(), "its first certificate is a CA's");
    // And a tenant's alike.
    let dev_cert = fs::read(dir.tenant_cert(&dev)).unwrap();
    fs::write(dir.tenant_cert(&dev), &good_ca).unwrap();
    let err = client_config(dir.root(), &dev).unwrap_err();
    assert_malformed(
        err,
        &dir.tenant_cert(&dev),
        "its first certificate is a CA's",
    );
    fs::write(dir.tenant_cert(&dev), &dev_cert).unwrap();
    fs::write(dir.node_cert(), &good_node).unwrap();
    fs::write(dir.node_key(), &good_node_key).unwrap();
    server_config(dir.root()).expect("mended");
}

#[test]
fn missing_and_unreadable_files_are_typed_errors_naming_the_file() {
    let (_temp, dir) = init_folder(&[]);
    fs::remove_file(dir.node_cert()).unwrap();
    let err = server_config(dir.root()).unwrap_err();
    assert!(
        matches!(&err, Error::Missing { path, .. } if *path == dir.node_cert()),
        "{err:?}"
    );
    assert!(err.to_string().contains("tasklet certs node"), "{err}");
    assert!(node_fingerprint(dir.root()).is_err());

    let stranger = tenant("stranger");
    let err = client_config(dir.root(), &stranger).unwrap_err();
    assert!(
        matches!(&err, Error::Missing { path, .. } if *path == dir.tenant_cert(&stranger)),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("tasklet certs issue DIR --tenant NAME"),
        "{err}"
    );

    // A folder where a file should be cannot be read.
    fs::remove_file(dir.ca_cert()).unwrap();
    fs::create_dir(dir.ca_cert()).unwrap();
    let err = client_config(dir.root(), &tenant("dev")).unwrap_err();
    assert!(
        matches!(&err, Error::Read { path, .. } if *path == dir.ca_cert()),
        "{err:?}"
    );
}

#[test]
fn a_key_that_is_not_the_certificates_is_a_typed_error() {
    let (_temp, dir) = init_folder(&[]);
    fs::copy(dir.tenant_key(&tenant("dev")), dir.node_key()).unwrap();
    let err = server_config(dir.root()).unwrap_err();
    assert!(
        matches!(&err, Error::KeyMismatch { cert, key } if *cert == dir.node_cert() && *key == dir.node_key()),
        "{err:?}"
    );
}

/// A node certificate its clients would refuse is refused when the node's configuration is
/// made, naming the file and the fix, rather than by every client later: one of another CA, a
/// tenant's certificate in the node's place.
#[test]
fn a_node_certificate_clients_would_refuse_is_refused_at_start() {
    let (_temp, dir) = init_folder(&[]);
    let (_other_temp, other) = init_folder(&[]);
    fs::copy(other.node_cert(), dir.node_cert()).unwrap();
    fs::copy(other.node_key(), dir.node_key()).unwrap();
    let err = server_config(dir.root()).unwrap_err();
    assert_malformed(err, &dir.node_cert(), "not signed by the CA beside it");

    let (_temp, dir) = init_folder(&[]);
    let dev = tenant("dev");
    fs::copy(dir.tenant_cert(&dev), dir.node_cert()).unwrap();
    fs::copy(dir.tenant_key(&dev), dir.node_key()).unwrap();
    let err = server_config(dir.root()).unwrap_err();
    assert_malformed(err, &dir.node_cert(), "not a node certificate");

    // The folder `init` wrote, and one with more names, start.
    let (_temp, dir) = init_folder(&["gpu-7.example".to_owned()]);
    server_config(dir.root()).expect("the node's own certificate");
}

/// A certificate that would still be valid after its CA expires (useless from that day) is
/// refused, saying how many days are left to give; one within the CA's life is issued.
#[test]
fn a_certificate_that_would_outlive_its_ca_is_refused_saying_the_days_left() {
    let (_temp, dir) = init_folder(&[]);
    let too_long = Validity::days(tasklet_tls::CA_DAYS + 1).unwrap();
    for err in [
        issue(dir.root(), &tenant("eve"), too_long).unwrap_err(),
        tasklet_tls::issue_node(dir.root(), &[], too_long).unwrap_err(),
    ] {
        assert!(matches!(err, Error::OutlivesCa { .. }), "{err}");
        let text = err.to_string();
        let left = tasklet_tls::CA_DAYS - 1;
        assert!(
            text.contains("would outlive its CA") && text.contains(&format!("--days {left}")),
            "{text}"
        );
    }
    assert!(!CertDir::new(dir.root())
        .tenant_cert(&tenant("eve"))
        .exists());
    issue(dir.root(), &tenant("eve"), Validity::days(30).unwrap()).unwrap();
    // With less than a day of the CA left, no `--days` would do: a new CA is the advice.
    let last_day = Error::OutlivesCa {
        ca: "certs/ca.pem".into(),
        ca_ends: "Dec  1 00:00:00 2036 +00:00".into(),
        days_left: 0,
    }
    .to_string();
    assert!(
        last_day.contains("less than a day of the CA is left") && !last_day.contains("--days"),
        "{last_day}"
    );
}

/// The names a node certificate is valid for, as a client judges them and as they are listed
/// for a person: `init`'s three, plus those given (a DNS name, an IP address), and no other.
#[test]
fn a_node_certificate_is_valid_for_its_names_alone() {
    let (_temp, dir) = init_folder(&["gpu1.example".to_owned(), "10.0.0.7".to_owned()]);
    for host in [
        "localhost",
        "LocalHost",
        "127.0.0.1",
        "::1",
        "gpu1.example",
        "10.0.0.7",
    ] {
        assert!(node_valid_for(dir.root(), host).unwrap(), "{host}");
    }
    for host in [
        "127.0.0.2",
        "gpu2.example",
        "a.gpu1.example",
        "10.0.0.8",
        "not a name",
        "",
    ] {
        assert!(!node_valid_for(dir.root(), host).unwrap(), "{host}");
    }
    assert_eq!(
        node_names(dir.root()).unwrap(),
        ["localhost", "127.0.0.1", "::1", "gpu1.example", "10.0.0.7"]
    );
}
