//! Deploy once, run anywhere: `deploy push --nats` puts a tasklet into the cluster's object
//! store; every node runs it by digest, fetching it on its first run; only the tenant that
//! pushed it may run it, on every node.

use std::path::Path;

use super::harness::{exactly, until_listed, Nats, Node, START};
use super::nats_binary;
use crate::support::{tasklet, text};

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn output_of(run: &serde_json::Value) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(run["output"].as_str().unwrap())
        .unwrap()
}

#[test]
fn a_deployment_pushed_once_runs_on_every_node_for_its_tenant_only() {
    let Some(binary) = nats_binary() else {
        crate::support::say_skipped("nats-server not found (run scripts/install-nats.sh)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let nats = Nats::start(binary, dir.path(), &[]);
    let url = nats.url();
    let certs = dir.path().join("certs");
    let c = certs.to_str().unwrap();
    assert!(tasklet(&["certs", "init", c], b"").status.success());
    assert!(tasklet(&["certs", "issue", c, "--tenant", "other"], b"")
        .status
        .success());
    let nodes = [
        Node::start("a", "512MiB", dir.path(), &certs, &["--nats", &url]),
        Node::start("b", "512MiB", dir.path(), &certs, &["--nats", &url]),
    ];
    until_listed(&["--nats", &url], START, "a and b", exactly(&["a", "b"]));

    // Pushed once, to the cluster, by tenant dev.
    let push = ["deploy", "push", "tasklets/iota", "--nats", &url, "--json"];
    let pushed = json(&tasklet(&push, b""));
    assert_eq!(pushed["node"], serde_json::Value::Null, "{pushed}");
    assert_eq!(pushed["uploaded"], true, "{pushed}");
    assert_eq!(pushed["already_present"], false, "{pushed}");
    let digest = pushed["digest"].as_str().unwrap().to_owned();
    assert_eq!(digest.len(), 64, "{pushed}");
    let again = json(&tasklet(&push, b""));
    assert_eq!(again["digest"], digest.as_str());
    assert_eq!(again["already_present"], true, "{again}");
    assert_eq!(again["uploaded"], false, "{again}");

    // Run by digest on each node, which fetches it, keeps it in its store, and runs it.
    let local = tasklet(&["run", "tasklets/iota"], b"5");
    assert!(local.status.success(), "{}", text(&local.stderr));
    for node in &nodes {
        let run = [
            "deploy", "run", &digest, "--node", &node.addr, "--certs", c, "--json",
        ];
        for _ in 0..2 {
            let ran = json(&tasklet(&run, b"5"));
            assert_eq!(ran["status"], "ok", "{ran}");
            assert_eq!(ran["node"], node.name.as_str(), "{ran}");
            assert_eq!(output_of(&ran), local.stdout);
        }
        let stored = dir
            .path()
            .join(format!("{}-store/deployments/sha256/{digest}", node.name));
        assert!(Path::new(&stored).is_file(), "{} lacks {digest}", node.name);
        assert_eq!(
            node.log()
                .matches("deployment fetched from the cluster")
                .count(),
            1,
            "{} fetched it once:\n{}",
            node.name,
            node.log()
        );
    }
    let placed = json(&tasklet(
        &[
            "deploy",
            "run",
            &digest,
            "--nats",
            &url,
            "--requires",
            "gpu",
            "--certs",
            c,
            "--json",
        ],
        b"5",
    ));
    assert_eq!(placed["status"], "ok", "{placed}");

    // Another tenant knows the digest, not the deployment: NOT_FOUND, on a node that holds it
    // and through the cluster alike.
    for target in [["--node", nodes[0].addr.as_str()], ["--nats", url.as_str()]] {
        let out = tasklet(
            &[
                "deploy", "run", &digest, target[0], target[1], "--certs", c, "--tenant", "other",
            ],
            b"5",
        );
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        let said = text(&out.stderr);
        assert!(said.contains("NOT_FOUND"), "{said}");
        // Each node says where a push would let it find the deployment: a node of a cluster
        // names the cluster's push.
        assert!(said.contains("deploy push TASKLET --nats URL"), "{said}");
        // Through the cluster, the line names the node whose answer it is.
        if target[0] == "--nats" {
            assert!(
                said.contains("error: node a (") || said.contains("error: node b ("),
                "{said}"
            );
        }
    }
    // Once it pushed the same tasklet itself (nothing to upload), it runs it.
    let theirs = json(&tasklet(
        &[
            "deploy",
            "push",
            "tasklets/iota",
            "--nats",
            &url,
            "--tenant",
            "other",
            "--json",
        ],
        b"",
    ));
    assert_eq!(theirs["digest"], digest.as_str());
    assert_eq!(theirs["uploaded"], false, "{theirs}");
    assert_eq!(theirs["already_present"], false, "{theirs}");
    let ran = json(&tasklet(
        &[
            "deploy",
            "run",
            &digest,
            "--node",
            &nodes[1].addr,
            "--certs",
            c,
            "--tenant",
            "other",
            "--json",
        ],
        b"5",
    ));
    assert_eq!(output_of(&ran), local.stdout);

    // A digest nobody pushed anywhere.
    let out = tasklet(
        &[
            "deploy",
            "run",
            &"0".repeat(64),
            "--node",
            &nodes[0].addr,
            "--certs",
            c,
        ],
        b"5",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("NOT_FOUND"),
        "{}",
        text(&out.stderr)
    );
}
