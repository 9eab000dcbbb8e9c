//! The cluster as a user meets it, against a real nats-server on loopback: `tasklet node
//! --nats` registers, `tasklet nodes` lists, `deploy run --nats --requires` and `run --nats`
//! place the work, fall back past a node that refuses for capacity, and say what the nodes
//! offer when none fits. Without nats-server the test prints `skipped: nats-server not found`.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use tasklet_cluster::{
    start_nats_server, Cluster, Heartbeat, LocalServer, NatsConfig, NodeName, NodeRecord, Registrar,
};

use crate::support::{free_tcp_port, free_udp_port, repo, tasklet, text};

mod anywhere;
mod cache;
mod failover;
mod harness;
mod oneshots;
mod secure;

const WAIT: Duration = Duration::from_secs(60);

/// The nats-server to start (see `tasklet_cluster::find_nats_server`).
fn nats_binary() -> Option<PathBuf> {
    tasklet_cluster::find_nats_server(&repo())
}

/// Children killed when the test ends, however it ends.
struct Processes(Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn nodes_json(url: &str) -> Vec<serde_json::Value> {
    let out = tasklet(&["nodes", "--nats", url, "--json"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .unwrap()
        .as_array()
        .cloned()
        .unwrap()
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
fn nodes_register_list_and_take_placed_work() {
    let Some(nats_server) = nats_binary() else {
        crate::support::say_skipped("nats-server not found (run scripts/install-nats.sh)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut server = LocalServer::new(free_tcp_port(), dir.path().join("js"));
    server.start_timeout = WAIT;
    server.log = Some(dir.path().join("nats.log"));
    let url = server.url();
    let mut processes = Processes(Vec::new());
    processes
        .0
        .push(start_nats_server(&nats_server, &server).expect("nats-server starts"));

    // Before any node: said so, not an error.
    let out = tasklet(&["nodes", "--nats", &url], b"");
    assert!(
        out.status.success(),
        "{}(nats-server {:?}; its log ends:\n{})",
        text(&out.stderr),
        processes.0[0].try_wait(),
        server.log_tail(20)
    );
    assert!(
        text(&out.stdout).starts_with("no nodes registered"),
        "{}",
        text(&out.stdout)
    );

    let certs = dir.path().join("certs");
    let certs = certs.to_str().unwrap();
    assert!(tasklet(&["certs", "init", certs], b"").status.success());
    // Two nodes with different emulated memory: 128 MiB is less than iota's max-vram (256 MiB).
    let mut addrs = Vec::new();
    for (name, memory) in [("small", "128MiB"), ("big", "1GiB")] {
        let policy = dir.path().join(format!("{name}.toml"));
        std::fs::write(&policy, format!("[workers]\nemu-memory = \"{memory}\"\n")).unwrap();
        let addr = format!("127.0.0.1:{}", free_udp_port());
        processes.0.push(
            Command::new(env!("CARGO_BIN_EXE_tasklet"))
                .args([
                    "node",
                    "--listen",
                    &addr,
                    "--certs",
                    certs,
                    "--backend",
                    "emu",
                ])
                .args(["--nats", &url, "--name", name, "--policy"])
                .arg(&policy)
                .arg("--store")
                .arg(dir.path().join(name))
                .current_dir(repo())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("the node starts"),
        );
        addrs.push(addr);
    }
    let start = Instant::now();
    let nodes = loop {
        let nodes = nodes_json(&url);
        if nodes.len() == 2 || start.elapsed() > WAIT {
            break nodes;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    for (node, (name, total, addr)) in nodes.iter().zip([
        ("big", 1u64 << 30, &addrs[1]),
        ("small", 128 << 20, &addrs[0]),
    ]) {
        assert_eq!(node["name"], name, "{node}");
        assert_eq!(node["address"], addr.as_str(), "{node}");
        assert_eq!(node["draining"], false, "{node}");
        assert!(node["age_ms"].as_u64().unwrap() < 10_000, "{node}");
        let device = &node["devices"][0];
        assert_eq!(device["backend"], "emu", "{node}");
        assert_eq!(device["total_vram"], total, "{node}");
        assert_eq!(device["free_vram"], total, "{node}");
    }
    let table = text(&tasklet(&["nodes", "--nats", &url], b"").stdout);
    assert!(
        table.starts_with("NAME") && table.contains("big") && table.contains("128 MiB of 128 MiB"),
        "{table}"
    );

    // Placed by requirement: only big has 512 MiB free; the output is a local run's.
    let local = tasklet(&["run", "tasklets/iota"], b"5");
    assert!(local.status.success(), "{}", text(&local.stderr));
    let placed = json(&tasklet(
        &[
            "deploy",
            "run",
            "tasklets/iota",
            "--nats",
            &url,
            "--requires",
            "gpu:vram=512MiB",
            "--certs",
            certs,
            "--json",
        ],
        b"5",
    ));
    assert_eq!(placed["node"], "big", "{placed}");
    assert_eq!(placed["addr"], addrs[1].as_str(), "{placed}");
    assert_eq!(placed["status"], "ok", "{placed}");
    use base64::Engine as _;
    let output = base64::engine::general_purpose::STANDARD
        .decode(placed["output"].as_str().unwrap())
        .unwrap();
    assert_eq!(output, local.stdout);
    // `run --nats`: the tasklet here, its GPU work on the node chosen.
    let out = tasklet(
        &[
            "run",
            "--nats",
            &url,
            "--requires",
            "gpu:vram=512MiB",
            "--certs",
            certs,
            "tasklets/iota",
        ],
        b"5",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(out.stdout, local.stdout);
    assert!(
        text(&out.stderr).contains("GPU work on big"),
        "{}",
        text(&out.stderr)
    );

    // A record that claims room its node does not have (small's address and certificate, 64 GiB
    // free) is chosen first; small refuses iota for capacity before it runs, and the next
    // candidate, big, runs it. The registrars heartbeat on a runtime thread of their own, so
    // the records stay fresh however long the commands below take.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let fingerprint = tasklet_tls::node_fingerprint(certs).unwrap();
    let small = nodes.iter().find(|n| n["name"] == "small").unwrap().clone();
    let mut liar: NodeRecord = serde_json::from_value(small).unwrap();
    liar.name = NodeName::new("liar").unwrap();
    liar.devices[0].free_vram = 64 << 30;
    liar.devices[0].total_vram = 64 << 30;
    assert_eq!(liar.cert_sha256, fingerprint);
    // And one at big's address naming another certificate: the client does not use it.
    let mut impostor = liar.clone();
    impostor.name = NodeName::new("impostor").unwrap();
    impostor.address = addrs[1].clone();
    impostor.cert_sha256 = "0".repeat(64);
    impostor.devices[0].free_vram = 32 << 30;
    let registrars = runtime.block_on(async {
        let cluster = Cluster::connect(&NatsConfig::new(&url)).await.unwrap();
        let fast = Heartbeat {
            interval: Duration::from_millis(500),
            ttl: Duration::from_secs(5),
            stale_after: Duration::from_secs(10),
        };
        [
            Registrar::start(&cluster, fast, move || liar.clone())
                .await
                .unwrap(),
            Registrar::start(&cluster, fast, move || impostor.clone())
                .await
                .unwrap(),
        ]
    });
    let out = tasklet(
        &[
            "deploy",
            "run",
            "tasklets/iota",
            "--nats",
            &url,
            "--requires",
            "gpu:vram=64MiB",
            "--certs",
            certs,
            // The records were written just now: not in the view cached a moment ago.
            "--no-registry-cache",
            "--json",
        ],
        b"5",
    );
    let fell_back = json(&out);
    assert_eq!(fell_back["node"], "big", "{fell_back}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("node liar")
            && stderr.contains("CAPACITY_EXCEEDED")
            && stderr.contains("has 128 MiB of device memory free")
            && stderr.contains("may ask for 256 MiB"),
        "{stderr}"
    );
    assert!(
        stderr.contains("node impostor") && stderr.contains("not the 0000"),
        "{stderr}"
    );
    println!("{stderr}");
    // With two tries, the refusals are the answer.
    let out = tasklet(
        &[
            "deploy",
            "run",
            "tasklets/iota",
            "--nats",
            &url,
            "--requires",
            "gpu:vram=64MiB",
            "--certs",
            certs,
            // The records were written just now: not in the view cached a moment ago.
            "--no-registry-cache",
            "--tries",
            "2",
        ],
        b"5",
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no node took it"),
        "{}",
        text(&out.stderr)
    );
    println!("{}", text(&out.stderr));
    for registrar in registrars {
        runtime.block_on(registrar.stop()).unwrap();
    }

    // Nobody meets it: one line saying what the nodes offer. Big's record is rewritten every
    // 2 s: one written while a run above held its lease (1 MiB) can outlive the run by that
    // long, so wait until its record shows all of its memory free again.
    let start = Instant::now();
    while !nodes_json(&url)
        .iter()
        .any(|n| n["name"] == "big" && n["devices"][0]["free_vram"] == 1u64 << 30)
    {
        assert!(
            start.elapsed() < WAIT,
            "big's record never showed 1 GiB free"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = tasklet(
        &[
            "deploy",
            "run",
            "tasklets/iota",
            "--nats",
            &url,
            "--requires",
            "gpu:vram=100GiB",
            "--certs",
            certs,
            "--no-registry-cache",
        ],
        b"5",
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("no live node meets gpu:vram=100GiB")
            && stderr.contains("big (emu 1 GiB free")
            && stderr.contains("small (emu 128 MiB free"),
        "{stderr}"
    );
}
