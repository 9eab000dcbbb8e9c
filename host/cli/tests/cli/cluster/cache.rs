//! Placement past nodes that cannot take the work, and the registry view cached between
//! commands: a node cut off from NATS refuses a deployment it would have to fetch as "not
//! now" (the client moves on), a node without room refuses before it fetches anything into its
//! store, a cached view naming a node that is gone costs one failed candidate and a fresh read
//! of the registry, and a young view is used as it is.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use super::harness::{until_listed, Nats, Node, START};
use super::nats_binary;
use crate::support::{free_tcp_port, free_udp_port, repo, text};
use std::io::Write as _;
use tasklet_cluster::{
    Cluster, Heartbeat, LiveNode, NatsConfig, NodeName, NodeRecord, Registrar, ViewCache,
};

/// `tasklet ARGS` with `env` set and `stdin` as its input.
fn tasklet_with(env: &[(&str, &str)], args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tasklet"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tasklet starts");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn placement_moves_past_nodes_that_cannot_take_it_and_the_cached_view_is_a_hint() {
    let Some(binary) = nats_binary() else {
        crate::support::say_skipped("nats-server not found (run scripts/install-nats.sh)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let nats = Nats::start(binary, dir.path(), &[]);
    let url = nats.url();
    let certs = dir.path().join("certs");
    let c = certs.to_str().unwrap().to_owned();
    let caches = dir.path().join("cache");
    let caches = caches.to_str().unwrap().to_owned();
    // Every command of this test keeps its registry views here, used for 10 s.
    let env = [
        ("XDG_CACHE_HOME", caches.as_str()),
        ("TASKLET_REGISTRY_CACHE", "10s"),
    ];
    let run = |args: &[&str], stdin: &[u8]| tasklet_with(&env, args, stdin);
    assert!(run(&["certs", "init", &c], b"").status.success());

    // big and small in the cluster; cutoff serves, but its NATS is a port nobody listens on.
    let big = Node::start("big", "1GiB", dir.path(), &certs, &["--nats", &url]);
    let small = Node::start("small", "128MiB", dir.path(), &certs, &["--nats", &url]);
    let nowhere = format!("nats://127.0.0.1:{}", free_tcp_port());
    let cutoff = Node::start("cutoff", "1GiB", dir.path(), &certs, &["--nats", &nowhere]);
    until_listed(&["--nats", &url], START, "big and small", |names| {
        names == ["big", "small"]
    });
    let pushed = run(&["deploy", "push", "tasklets/iota", "--nats", &url], b"");
    assert!(pushed.status.success(), "{}", text(&pushed.stderr));
    let digest = text(&pushed.stdout).trim().to_owned();
    let local = run(&["run", "tasklets/iota"], b"5");
    assert!(local.status.success(), "{}", text(&local.stderr));

    // 1. cutoff, put first by a record claiming 64 GiB free (its address, its certificate),
    // cannot fetch the deployment: it answers CAPACITY_EXCEEDED ("not now"), and the run goes
    // on to big.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let fingerprint = tasklet_tls::node_fingerprint(&c).unwrap();
    let listed = super::harness::listed(&["--nats", &url]);
    let mut record: NodeRecord =
        serde_json::from_value(listed.iter().find(|n| n["name"] == "big").unwrap().clone())
            .unwrap();
    record.name = NodeName::new("cutoff").unwrap();
    record.address = cutoff.addr.clone();
    record.devices[0].free_vram = 64 << 30;
    record.devices[0].total_vram = 64 << 30;
    assert_eq!(record.cert_sha256, fingerprint);
    let registrar = runtime.block_on(async {
        let cluster = Cluster::connect(&NatsConfig::new(&url)).await.unwrap();
        let fast = Heartbeat {
            interval: Duration::from_millis(500),
            ttl: Duration::from_secs(2),
            stale_after: Duration::from_secs(10),
        };
        Registrar::start(&cluster, fast, move || record.clone())
            .await
            .unwrap()
    });
    let out = run(
        &[
            "deploy",
            "run",
            &digest,
            "--nats",
            &url,
            "--requires",
            "gpu",
            "--certs",
            &c,
            "--json",
            // cutoff's record is seconds old: not in a cached view.
            "--no-registry-cache",
        ],
        b"5",
    );
    let ran = json(&out);
    let stderr = text(&out.stderr);
    println!("{stderr}");
    assert_eq!(ran["node"], "big", "{ran} {stderr}");
    assert!(
        stderr.contains("node cutoff")
            && stderr.contains("CAPACITY_EXCEEDED")
            && stderr.contains("cannot fetch deployment"),
        "{stderr}"
    );
    runtime.block_on(registrar.stop()).unwrap();
    drop(cutoff);

    // 2. small has 128 MiB, iota may ask for 256: refused before it fetches, so it holds
    // nothing of it afterwards (pushing it there uploads it).
    let out = run(
        &[
            "deploy",
            "run",
            &digest,
            "--node",
            &small.addr,
            "--certs",
            &c,
        ],
        b"5",
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("CAPACITY_EXCEEDED"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        !small.log().contains("deployment fetched from the cluster"),
        "{}",
        small.log()
    );
    let pushed = json(&run(
        &[
            "deploy",
            "push",
            "tasklets/iota",
            "--node",
            &small.addr,
            "--certs",
            &c,
            "--json",
        ],
        b"",
    ));
    assert_eq!(pushed["uploaded"], true, "{pushed}");

    // 3. A cached view naming only a node that is gone (nothing at its address): it fails,
    // the view is dropped, the registry is read again, and big runs it.
    let view = ViewCache::new(
        &std::path::Path::new(&caches).join("tasklet-registry"),
        &NatsConfig::new(&url),
    );
    let mut ghost: NodeRecord = serde_json::from_value(listed[0].clone()).unwrap();
    ghost.name = NodeName::new("ghost").unwrap();
    ghost.address = format!("127.0.0.1:{}", free_udp_port());
    ghost.devices[0].free_vram = 64 << 30;
    view.store(&[LiveNode {
        record: ghost,
        age: Duration::ZERO,
        revision: 1,
    }])
    .unwrap();
    let placed = [
        "deploy",
        "run",
        &digest,
        "--nats",
        &url,
        "--requires",
        "gpu",
        "--certs",
        &c,
        "--json",
    ];
    let out = run(&placed, b"5");
    let ran = json(&out);
    let stderr = text(&out.stderr);
    println!("{stderr}");
    assert_eq!(ran["node"], "big", "{ran} {stderr}");
    assert!(
        stderr.contains("node ghost") && stderr.contains("reading the registry again"),
        "{stderr}"
    );
    // What the fresh read found is kept.
    let mut names: Vec<String> = view
        .load()
        .expect("the fresh view is kept")
        .nodes
        .iter()
        .map(|n| n.record.name.to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["big", "small"]);

    // A young view is used as it is: the next command does not write it again.
    let written = |path: &std::path::Path| -> SystemTime {
        std::fs::metadata(path).unwrap().modified().unwrap()
    };
    let before = (written(view.path()), std::fs::read(view.path()).unwrap());
    std::thread::sleep(Duration::from_millis(20));
    let warm = run(&placed, b"5");
    let ran = json(&warm);
    assert_eq!(ran["node"], "big", "{ran}");
    use base64::Engine as _;
    let output = base64::engine::general_purpose::STANDARD
        .decode(ran["output"].as_str().unwrap())
        .unwrap();
    assert_eq!(output, local.stdout);
    assert_eq!(
        (written(view.path()), std::fs::read(view.path()).unwrap()),
        before,
        "a warm command rewrote the view: {}",
        text(&warm.stderr)
    );

    // Turned off, by the variable or by the flag: nothing kept.
    view.invalidate();
    let off = tasklet_with(
        &[
            ("XDG_CACHE_HOME", caches.as_str()),
            ("TASKLET_REGISTRY_CACHE", "off"),
        ],
        &placed,
        b"5",
    );
    assert_eq!(json(&off)["node"], "big");
    assert!(
        !view.path().exists(),
        "TASKLET_REGISTRY_CACHE=off kept a view"
    );
    let off = tasklet_with(
        &env,
        &[&placed[..], &["--no-registry-cache"]].concat(),
        b"5",
    );
    assert_eq!(json(&off)["node"], "big");
    assert!(!view.path().exists(), "--no-registry-cache kept a view");
    drop(big);
}
