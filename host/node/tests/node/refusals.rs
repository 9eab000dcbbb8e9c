//! Each way a client is turned away reaches it as one line saying why and what to do.

use crate::support::*;
use rustls_pki_types::pem::PemObject;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tasklet_node::Denied;
use tasklet_remote::{ClientError, ConnectOptions, NodeClient};
use tasklet_runtime::Policy;
use tasklet_tls::{CertDir, Validity};

fn one_line(err: &ClientError) -> TestResult {
    let text = err.to_string();
    check(!text.is_empty() && !text.contains('\n'), || {
        format!("not one line: {text:?}")
    })
}

/// A client folder: the node's CA, and `cert`/`key` as tenant `name`'s files.
fn client_folder(
    node_ca: &std::path::Path,
    name: &str,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> tempfile::TempDir {
    let temp = tempfile::tempdir().unwrap();
    let dir = CertDir::new(temp.path());
    std::fs::create_dir_all(dir.tenants()).unwrap();
    std::fs::copy(node_ca, dir.ca_cert()).unwrap();
    std::fs::copy(cert, dir.tenant_cert(&tenant(name))).unwrap();
    std::fs::copy(key, dir.tenant_key(&tenant(name))).unwrap();
    temp
}

fn connect(
    node: &TestNode,
    certs: &std::path::Path,
    name: &str,
) -> Result<NodeClient, ClientError> {
    let mut options = ConnectOptions::new(node.addr_text(), certs, tenant(name));
    options.connect_timeout = Duration::from_secs(5);
    NodeClient::connect_with(&options)
}

pub fn a_client_without_a_certificate_is_refused() -> TestResult {
    let node = TestNode::start();
    // Our client will not even try without one, and names the file it lacks.
    let err = connect(&node, node.certs_path(), "nobody")
        .err()
        .ok_or("connected with no certificate")?;
    one_line(&err)?;
    check(
        err.to_string().contains("nobody.pem does not exist"),
        || err.to_string(),
    )?;

    // Another client, presenting nothing, is refused by the node at the handshake.
    let ca =
        rustls_pki_types::CertificateDer::from_pem_file(CertDir::new(node.certs_path()).ca_cert())
            .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![tasklet_tls::ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let config = quinn::ClientConfig::new(Arc::new(quic));
    let addr = node.addr;
    let outcome = node.runtime().block_on(async move {
        let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        endpoint.set_default_client_config(config);
        let connection = endpoint.connect(addr, "localhost").unwrap().await?;
        // TLS 1.3: the refusal comes with the first use of the connection.
        let (mut send, mut recv) = connection.open_bi().await?;
        send.write_all(b"x").await.map_err(|e| match e {
            quinn::WriteError::ConnectionLost(e) => e,
            other => panic!("{other}"),
        })?;
        let _ = tokio::time::timeout(WAIT, recv.read_chunk(16, true)).await;
        Err::<(), _>(
            connection
                .close_reason()
                .unwrap_or(quinn::ConnectionError::TimedOut),
        )
    });
    let err = outcome
        .err()
        .ok_or("the node served a client with no certificate")?;
    let line = tasklet_tls::explain(&err, quinn::Side::Client);
    check(
        line.starts_with("the node refused this client: it presented no certificate"),
        || line.clone(),
    )?;
    // The node counts the refusal when its side of the handshake ends, which may be a moment
    // after the client has seen it.
    let start = std::time::Instant::now();
    while node.node().control().metrics().handshakes_refused == 0 {
        check(start.elapsed() < WAIT, || "no refusal counted".into())?;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Ok(())
}

pub fn a_certificate_from_another_ca_is_refused() -> TestResult {
    let node = TestNode::start();
    let other = certs();
    let other_dir = CertDir::new(other.path());
    let dev = tenant("dev");
    let folder = client_folder(
        &CertDir::new(node.certs_path()).ca_cert(),
        "dev",
        &other_dir.tenant_cert(&dev),
        &other_dir.tenant_key(&dev),
    );
    let err = connect(&node, folder.path(), "dev")
        .err()
        .ok_or("connected with a foreign certificate")?;
    one_line(&err)?;
    check(
        err.to_string().starts_with(
            "the node refused this client's certificate: it is not signed by the node's CA",
        ),
        || err.to_string(),
    )?;
    Ok(())
}

pub fn an_expired_certificate_is_refused() -> TestResult {
    let node = TestNode::start();
    let now = SystemTime::now();
    let day = Duration::from_secs(86_400);
    let expired = Validity::between(now - 2 * day, now - day).unwrap();
    tasklet_tls::issue(node.certs_path(), &tenant("old"), expired).unwrap();
    let err = connect(&node, node.certs_path(), "old")
        .err()
        .ok_or("connected with an expired certificate")?;
    one_line(&err)?;
    check(err.to_string().contains("has expired"), || err.to_string())?;
    Ok(())
}

/// A node whose own certificate has expired would refuse every client at the handshake: it does
/// not start, and says which file and how to renew it; renewed, it starts.
pub fn a_node_with_an_expired_certificate_does_not_start() -> TestResult {
    let certs = certs();
    let now = SystemTime::now();
    let day = Duration::from_secs(86_400);
    let expired = Validity::between(now - 2 * day, now - day).unwrap();
    tasklet_tls::issue_node(certs.path(), &[], expired).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let build = || {
        runtime.block_on(async {
            tasklet_node::NodeBuilder::new()
                .listen("127.0.0.1:0".parse().unwrap())
                .certs(certs.path())
                .policy(policy())
                .backend(backend_for(&policy()))
                .worker(worker())
                .build()
                .map(|node| node.start())
        })
    };
    let err = build()
        .err()
        .ok_or("a node with an expired certificate started")?;
    let text = err.to_string();
    check(
        !text.contains('\n')
            && text.contains("node.pem")
            && text.contains("expired on")
            && text.contains("tasklet certs node DIR --name NAME"),
        || text.clone(),
    )?;
    // The check a daemon makes before it starts its host says the same.
    let checked = tasklet_node::check_certs(certs.path()).map_err(|e| e.to_string());
    check(checked.as_ref().err() == Some(&text), || {
        format!("{checked:?}")
    })?;
    tasklet_tls::issue_node(certs.path(), &[], Validity::days(1).unwrap()).unwrap();
    tasklet_node::check_certs(certs.path()).map_err(|e| format!("renewed: {e}"))?;
    let node = build().map_err(|e| format!("renewed: {e}"))?;
    drop(node);
    Ok(())
}

pub fn a_tenant_the_policy_does_not_list_is_refused() -> TestResult {
    let mut policy = policy();
    policy.tenants = Policy::parse("[tenants.dev]\nmax-leases = 1\n")
        .unwrap()
        .tenants;
    let node = TestNode::with(Setup {
        policy,
        ..Setup::default()
    });
    let err = connect(&node, node.certs_path(), "team")
        .err()
        .ok_or("an unlisted tenant got in")?;
    one_line(&err)?;
    let text = err.to_string();
    // It is told what is missing, not who else the node serves.
    check(
        text.contains("unauthorized") && text.contains("[tenants.team]") && !text.contains("dev"),
        || text.clone(),
    )?;
    // The listed one gets in, with its section's caps.
    let mut dev = connect(&node, node.certs_path(), "dev").map_err(|e| e.to_string())?;
    let lease = dev
        .lease_alloc(1 << 20, 10, None)
        .map_err(|e| e.to_string())?;
    let second = dev
        .lease_alloc(1 << 20, 10, None)
        .err()
        .ok_or("a second lease past max-leases = 1")?;
    check(
        second.code() == Some(tasklet_wire::ErrorCode::QuotaExceeded),
        || second.to_string(),
    )?;
    dev.mem_free(lease.lease).map_err(|e| e.to_string())?;
    Ok(())
}

/// A tenant holds at most its share of the node's connections: its next is closed at once,
/// saying so, while another tenant still gets in; a closed one makes room again.
pub fn a_tenant_past_its_connections_is_refused_and_others_get_in() -> TestResult {
    let node = TestNode::with(Setup {
        authorizer: Some(Box::new(|b| b.max_tenant_connections(2))),
        ..Setup::default()
    });
    let first = connect(&node, node.certs_path(), "dev").map_err(|e| e.to_string())?;
    let _second = connect(&node, node.certs_path(), "dev").map_err(|e| e.to_string())?;
    let err = connect(&node, node.certs_path(), "dev")
        .err()
        .ok_or("a third connection of dev past its 2")?;
    one_line(&err)?;
    let text = err.to_string();
    check(
        text.contains("the node refused this client: capacity-exceeded")
            && text.contains("already holds 2 connections"),
        || text.clone(),
    )?;
    let mut team = connect(&node, node.certs_path(), "team").map_err(|e| e.to_string())?;
    team.inventory().map_err(|e| e.to_string())?;
    drop(first);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match connect(&node, node.certs_path(), "dev") {
            Ok(_) => return Ok(()),
            Err(e) if std::time::Instant::now() >= deadline => {
                return Err(format!("dev was not let in again after closing one: {e}").into())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// A node that serves as many connections as it may turns the next away at the door, and the
/// client says so in one line (the node is full, not this tenant refused); a closed one makes
/// room again.
pub fn a_full_node_refuses_a_connection_and_the_client_says_why() -> TestResult {
    let node = TestNode::with(Setup {
        authorizer: Some(Box::new(|b| b.max_connections(2))),
        ..Setup::default()
    });
    let first = connect(&node, node.certs_path(), "dev").map_err(|e| e.to_string())?;
    let _second = connect(&node, node.certs_path(), "team").map_err(|e| e.to_string())?;
    let err = connect(&node, node.certs_path(), "team")
        .err()
        .ok_or("a third connection past the node's 2")?;
    one_line(&err)?;
    let text = err.to_string();
    check(
        text.contains("the node refused the connection")
            && text.contains("serves as many connections as it may")
            && text.contains("try again later or another node"),
        || text.clone(),
    )?;
    drop(first);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match connect(&node, node.certs_path(), "team") {
            Ok(_) => return Ok(()),
            Err(e) if std::time::Instant::now() >= deadline => {
                return Err(format!("no room again after closing one: {e}").into())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

pub fn an_authorizer_narrows_and_refuses() -> TestResult {
    let node = TestNode::with(Setup {
        authorizer: Some(Box::new(|builder: tasklet_node::NodeBuilder| {
            builder.authorizer(
                |t: &tasklet_tls::Tenant, mut ceiling: tasklet_runtime::config::Grant| {
                    if t.as_str() == "team" {
                        return Err(Denied::new("team's access was withdrawn"));
                    }
                    ceiling.gpu.max_vram = 1 << 20;
                    Ok(ceiling)
                },
            )
        })),
        ..Setup::default()
    });
    let err = connect(&node, node.certs_path(), "team")
        .err()
        .ok_or("a denied tenant got in")?;
    one_line(&err)?;
    check(
        err.to_string().contains("team's access was withdrawn"),
        || err.to_string(),
    )?;
    let mut dev = node.client("dev");
    let big = dev
        .lease_alloc(2 << 20, 10, None)
        .err()
        .ok_or("a lease past the authorizer's 1 MiB")?;
    check(
        big.code() == Some(tasklet_wire::ErrorCode::QuotaExceeded),
        || big.to_string(),
    )?;
    Ok(())
}

/// A client pointed at the wrong node (one its CA did not certify) refuses it, in one line.
pub fn a_node_of_another_ca_is_refused_by_the_client() -> TestResult {
    let node = TestNode::start();
    let elsewhere = certs();
    let err = connect(&node, elsewhere.path(), "dev")
        .err()
        .ok_or("connected to a node of another CA")?;
    one_line(&err)?;
    check(
        err.to_string().starts_with(
            "this client refused the node's certificate: it is not signed by the CA the client trusts",
        ),
        || err.to_string(),
    )?;
    Ok(())
}

/// A manifest's grant narrows the connection's: a right the tasklet did not ask for is refused
/// by the node, as it is locally.
pub fn the_manifests_grant_is_enforced_by_the_node() -> TestResult {
    let node = TestNode::start();
    let mut client = node.client("dev");
    let asked = tasklet_wire::Grant {
        memory: 1 << 20,
        max_vram: 1 << 20,
        max_leases: 1,
        max_lease_ms: 10_000,
        rights: tasklet_wire::rights::ALLOC | tasklet_wire::rights::READ,
    };
    let granted = client.grant(&asked).map_err(|e| e.to_string())?;
    check(granted == asked, || format!("{granted:?}"))?;
    let too_long = client
        .lease_alloc(1 << 20, 60, None)
        .err()
        .ok_or("a lease past max-lease")?;
    check(
        too_long.code() == Some(tasklet_wire::ErrorCode::QuotaExceeded),
        || too_long.to_string(),
    )?;
    let lease = client
        .lease_alloc(1 << 20, 5, None)
        .map_err(|e| e.to_string())?
        .lease;
    let session = session_on(&mut client, lease)?;
    let load = tasklet_wire::Request::ModuleLoad {
        session,
        ptx: b"".to_vec(),
    };
    let err = client
        .request(&load)
        .err()
        .ok_or("a load without the load right")?;
    check(
        err.code() == Some(tasklet_wire::ErrorCode::Unauthorized)
            && err.to_string().contains("`load`"),
        || err.to_string(),
    )?;
    // The grant is fixed once GPU work has begun.
    let again = client
        .grant(&asked)
        .err()
        .ok_or("a second GRANT after a lease")?;
    check(
        again.code() == Some(tasklet_wire::ErrorCode::InvalidArgument),
        || again.to_string(),
    )?;
    Ok(())
}

/// A client pointed at a port nothing listens on (on loopback, whose kernel answers with an
/// ICMP "port unreachable") is told so at once, in one line, not after the handshake's whole
/// timeout; and the byte it probes with costs a node at the right port nothing: the same
/// client connects there, and the node counts no refused handshake.
pub fn a_port_nothing_listens_on_is_named_at_once() -> TestResult {
    let node = TestNode::start();
    let closed = {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        socket.local_addr().map_err(|e| e.to_string())?
    };
    for addr in [closed.to_string(), format!("[::1]:{}", closed.port())] {
        let mut options = ConnectOptions::new(addr.clone(), node.certs_path(), tenant("dev"));
        options.connect_timeout = Duration::from_secs(20);
        let began = std::time::Instant::now();
        let err = match NodeClient::connect_with(&options) {
            Ok(_) => return Err(format!("connected to {addr}, where nothing listens").into()),
            Err(err) => err,
        };
        let took = began.elapsed();
        if addr.starts_with('[')
            && matches!(err, ClientError::Setup(_) | ClientError::Address { .. })
        {
            println!("skipped: no IPv6 loopback here ({err})");
            continue;
        }
        check(matches!(err, ClientError::PortClosed { .. }), || {
            format!("{addr}: {err:?}")
        })?;
        check(took < Duration::from_secs(5), || {
            format!("{addr}: told after {took:?}")
        })?;
        one_line(&err)?;
        check(err.to_string().contains(&addr), || format!("{err}"))?;
    }
    let mut options = ConnectOptions::new(node.addr_text(), node.certs_path(), tenant("dev"));
    options.connect_timeout = Duration::from_secs(5);
    let client = NodeClient::connect_with(&options).map_err(|e| e.to_string())?;
    drop(client);
    let refused = node.node().control().metrics().handshakes_refused;
    check(refused == 0, || {
        format!("the probe byte counted as a refused handshake: {refused}")
    })
}
