//! A cluster on a nats-server that demands TLS (its certificate and the clients' from the
//! fabric's own CA, `tasklet certs`) and a user and password: a node registers and `tasklet
//! nodes` lists it with the right settings; wrong or missing credentials, a missing client
//! certificate or an untrusted server are each refused in one line that says what to give.

use super::harness::{exactly, until_listed, Nats, Node, START};
use super::nats_binary;
use crate::support::{tasklet, text};

#[test]
fn nats_with_tls_and_a_password_lets_only_the_right_credentials_in() {
    let Some(binary) = nats_binary() else {
        crate::support::say_skipped("nats-server not found (run scripts/install-nats.sh)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let c = certs.to_str().unwrap();
    assert!(tasklet(&["certs", "init", c], b"").status.success());
    let file = |name: &str| certs.join(name).to_str().unwrap().to_owned();
    let (node_pem, node_key, ca) = (file("node.pem"), file("node.key"), file("ca.pem"));
    let (client_pem, client_key) = (file("tenants/dev.pem"), file("tenants/dev.key"));
    let nats = Nats::start(
        binary,
        dir.path(),
        &[
            "--tls",
            "--tlscert",
            &node_pem,
            "--tlskey",
            &node_key,
            "--tlsverify",
            "--tlscacert",
            &ca,
            "--user",
            "tasklet",
            "--pass",
            "s3cret",
        ],
    );
    let port = nats.port;
    let url = format!("tls://tasklet:s3cret@127.0.0.1:{port}");
    let tls = [
        "--nats-ca",
        ca.as_str(),
        "--nats-cert",
        client_pem.as_str(),
        "--nats-key",
        client_key.as_str(),
    ];
    let with = |url: &str, tls: &[&str]| {
        let mut args = vec!["--nats".to_owned(), url.to_owned()];
        args.extend(tls.iter().map(|a| a.to_string()));
        args
    };
    let good = with(&url, &tls);
    let good: Vec<&str> = good.iter().map(String::as_str).collect();
    let node = Node::start("secure", "512MiB", dir.path(), &certs, &good);
    until_listed(&good, START, "the node over TLS", exactly(&["secure"]));

    // Deploy once, run anywhere works the same over it.
    let mut push = vec!["deploy", "push", "tasklets/iota"];
    push.extend(&good);
    let pushed = tasklet(&push, b"");
    assert!(pushed.status.success(), "{}", text(&pushed.stderr));
    let digest = text(&pushed.stdout).trim().to_owned();
    let mut run = vec!["deploy", "run", digest.as_str(), "--certs", c];
    run.extend(&good);
    let ran = tasklet(&run, b"3");
    assert!(ran.status.success(), "{}", text(&ran.stderr));
    assert_eq!(text(&ran.stdout), "1\n2\n3\n");

    // Each wrong setting: refused, in one line that names what to give, the password hidden.
    let cases: [(String, Vec<&str>, &str); 5] = [
        (
            format!("tls://tasklet:wrong@127.0.0.1:{port}"),
            tls.to_vec(),
            "refused the credentials",
        ),
        (
            format!("tls://127.0.0.1:{port}"),
            tls.to_vec(),
            "refused the credentials",
        ),
        (url.clone(), tls[..2].to_vec(), "wants a client certificate"),
        (url.clone(), tls[2..].to_vec(), "give the CA"),
        (
            format!("nats://tasklet:s3cret@127.0.0.1:{port}"),
            Vec::new(),
            "give the CA",
        ),
    ];
    for (url, tls, expected) in cases {
        let mut args = vec!["nodes"];
        let settings = with(&url, &tls);
        args.extend(settings.iter().map(String::as_str));
        let out = tasklet(&args, b"");
        let stderr = text(&out.stderr);
        println!("{stderr}");
        assert_eq!(out.status.code(), Some(2), "{url} {tls:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{url} {tls:?}: nothing listed");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(expected), "{url} {tls:?}: {stderr}");
        assert!(!stderr.contains("s3cret"), "{stderr}");
    }
    drop(node);
}
