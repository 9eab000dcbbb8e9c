//! Three nodes with different emulated memory on a real nats-server: placement by requirement,
//! then one node killed (SIGKILL) under a load of deployed runs and with a session open on it.
//! It leaves the registry within 10 s; no run of the load fails (a run lost with the node runs
//! again on the next); the session fails `disconnected`; the node started again is back; and
//! after nats-server restarts (empty) every node registers again by itself.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::harness::{exactly, listed, until_listed, Nats, Node, START};
use super::nats_binary;
use crate::support::{repo, tasklet, text};

/// The registry's promise for a node that stops refreshing.
const GONE_WITHIN: Duration = Duration::from_secs(10);
/// How long a placed client takes to give up on a node that stopped answering (its idle
/// timeout, 5 s), with room.
const NOTICED_WITHIN: Duration = Duration::from_secs(12);
/// What each run of the load does: hold a lease on its node this many seconds.
const LOAD_RUN: &[u8] = b"hold 6";
/// The most runs the load makes.
const MAX_RUNS: usize = 200;

/// One run of the load: which node answered, and whether it ran to `ok`.
#[derive(Debug, Clone)]
struct Ran {
    node: String,
    ok: bool,
    took: Duration,
    detail: String,
}

#[test]
fn a_killed_node_fails_its_session_and_no_stateless_call() {
    let Some(binary) = nats_binary() else {
        crate::support::say_skipped("nats-server not found (run scripts/install-nats.sh)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut nats = Nats::start(binary, dir.path(), &[]);
    let url = nats.url();
    let certs = dir.path().join("certs");
    let c = certs.to_str().unwrap().to_owned();
    assert!(tasklet(&["certs", "init", &c], b"").status.success());
    let on = ["--nats", url.as_str()];
    let (small, mid, mut big) = (
        Node::start("small", "128MiB", dir.path(), &certs, &on),
        Node::start("mid", "512MiB", dir.path(), &certs, &on),
        Node::start("big", "1GiB", dir.path(), &certs, &on),
    );
    let all = ["small", "mid", "big"];
    until_listed(&on, START, "three nodes", exactly(&all));
    for node in listed(&on) {
        let total = node["devices"][0]["total_vram"].as_u64().unwrap();
        let expected = match node["name"].as_str().unwrap() {
            "small" => 128 << 20,
            "mid" => 512 << 20,
            _ => 1 << 30,
        };
        assert_eq!(total, expected, "{node}");
    }

    // Placement by requirement.
    let pushed = tasklet(&["deploy", "push", "tasklets/iota", "--nats", &url], b"");
    assert!(pushed.status.success(), "{}", text(&pushed.stderr));
    let digest = text(&pushed.stdout).trim().to_owned();
    let run_on = |requires: &str| {
        let out = tasklet(
            &[
                "deploy",
                "run",
                &digest,
                "--nats",
                &url,
                "--requires",
                requires,
                "--certs",
                &c,
                "--json",
            ],
            b"5",
        );
        assert!(out.status.success(), "{requires}: {}", text(&out.stderr));
        let ran: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        ran["node"].as_str().unwrap().to_owned()
    };
    assert_eq!(run_on("gpu:vram=768MiB"), "big");
    assert_eq!(run_on("gpu:backend=emu"), "big");
    let out = tasklet(
        &[
            "deploy",
            "run",
            &digest,
            "--nats",
            &url,
            "--requires",
            "gpu:backend=cuda",
            "--certs",
            &c,
        ],
        b"5",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no live node meets gpu:backend=cuda"),
        "{}",
        text(&out.stderr)
    );
    // The load runs probe, each run holding a lease for 4 s, so that runs are in flight when
    // the node dies. mid and big hold it already, so that no run of the load compiles.
    let pushed = tasklet(
        &["deploy", "push", "tasklets/testing/probe", "--nats", &url],
        b"",
    );
    assert!(pushed.status.success(), "{}", text(&pushed.stderr));
    let probe = text(&pushed.stdout).trim().to_owned();
    for node in [&mid, &big] {
        let out = tasklet(
            &["deploy", "run", &probe, "--node", &node.addr, "--certs", &c],
            b"hold 0",
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "ok held\n");
    }

    // A session on big (the only node with 768 MiB free), holding a lease until an op fails.
    let mut session = Command::new(env!("CARGO_BIN_EXE_tasklet"))
        .args([
            "run",
            "--nats",
            &url,
            "--requires",
            "gpu:vram=768MiB",
            "--certs",
            &c,
        ])
        .arg("tasklets/testing/probe")
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    session.stdin.take().unwrap().write_all(b"hold 40").unwrap();
    let start = Instant::now();
    while !listed(&on)
        .iter()
        .any(|n| n["name"] == "big" && n["devices"][0]["leases"].as_u64().unwrap_or(0) >= 1)
    {
        assert!(
            start.elapsed() < START,
            "the session's lease never showed on big"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The load: two clients running the deployment through the cluster, one run after another.
    let stop = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(Mutex::new(Vec::<Ran>::new()));
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (stop, runs) = (Arc::clone(&stop), Arc::clone(&runs));
            let (probe, url, c) = (probe.clone(), url.clone(), c.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) && runs.lock().unwrap().len() < MAX_RUNS {
                    let began = Instant::now();
                    let out = tasklet(
                        &[
                            "deploy",
                            "run",
                            &probe,
                            "--nats",
                            &url,
                            "--requires",
                            "gpu:vram=256MiB",
                            "--certs",
                            &c,
                            "--json",
                        ],
                        LOAD_RUN,
                    );
                    let answer: serde_json::Value =
                        serde_json::from_slice(&out.stdout).unwrap_or_default();
                    runs.lock().unwrap().push(Ran {
                        node: answer["node"].as_str().unwrap_or("").to_owned(),
                        ok: out.status.success() && answer["status"] == "ok",
                        took: began.elapsed(),
                        detail: text(&out.stderr),
                    });
                }
            })
        })
        .collect();
    let count_on = |name: &str| {
        runs.lock()
            .unwrap()
            .iter()
            .filter(|r| r.node == name && r.ok)
            .count()
    };
    let start = Instant::now();
    while count_on("big") < 1 {
        assert!(start.elapsed() < START, "the load never ran on big");
        std::thread::sleep(Duration::from_millis(50));
    }

    // SIGKILL big mid-load: once a record written at least 1 s after a run ended (the clients
    // start their next runs at once, so these have had time to take their leases) shows a run's
    // lease beside the session's. A run holds its lease 6 s, long beside the record's age, so a
    // run is in flight on big when it dies. (A record from before that moment may still show the
    // runs that just ended.)
    let start = Instant::now();
    while !listed(&on).iter().any(|n| {
        let age = n["age_ms"].as_u64().unwrap_or(u64::MAX);
        let watched = start.elapsed().as_millis() as u64;
        n["name"] == "big"
            && age < 1500
            && age.saturating_add(1000) <= watched
            && n["devices"][0]["leases"].as_u64().unwrap_or(0) >= 2
    }) {
        assert!(start.elapsed() < START, "no run of the load showed on big");
        std::thread::sleep(Duration::from_millis(100));
    }
    big.kill();
    let killed = Instant::now();
    let before = runs.lock().unwrap().len();
    let gone = until_listed(
        &on,
        GONE_WITHIN,
        "big gone after its kill",
        exactly(&["small", "mid"]),
    );
    println!("big left the registry {gone:?} after its kill");

    // The session fails disconnected: it is not moved.
    let deadline = killed + NOTICED_WITHIN;
    let status = loop {
        if let Some(status) = session.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the session did not end after its node died"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = session.wait_with_output().unwrap();
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    println!(
        "the session ({status}) {:?} after the kill: {said}",
        killed.elapsed()
    );
    assert!(said.contains("disconnected"), "{said}");
    assert!(!said.contains("ok held"), "{said}");

    // The load goes on on mid, every run answered.
    let start = Instant::now();
    while count_on("mid") < 2 {
        assert!(
            // (A run lost with big runs again on mid, holding its lease again.)
            start.elapsed() < NOTICED_WITHIN + Duration::from_secs(6),
            "the load did not go on on mid: {:?}",
            runs.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    let runs = runs.lock().unwrap().clone();
    let failed: Vec<&Ran> = runs.iter().filter(|r| !r.ok).collect();
    assert!(failed.is_empty(), "failed runs: {failed:?}");
    let slowest = runs.iter().map(|r| r.took).max().unwrap_or_default();
    println!(
        "{} runs, none failed: {} on big, {} on mid, {} after the kill; the slowest took {slowest:?}",
        runs.len(),
        runs.iter().filter(|r| r.node == "big").count(),
        runs.iter().filter(|r| r.node == "mid").count(),
        runs.len() - before,
    );
    // Runs in flight on big when it died ran again on mid; runs sent to big after its death,
    // while its record lived, found nobody there and went to mid too.
    let lost = runs
        .iter()
        .filter(|r| r.detail.contains("was lost before it answered"))
        .count();
    let unreachable = runs
        .iter()
        .filter(|r| r.detail.contains("did not take it"))
        .count();
    println!("{lost} runs lost with big ran again on mid; {unreachable} found big gone");
    assert!(
        lost >= 1,
        "no run was in flight on big when it died: {runs:?}"
    );
    assert!(
        runs.iter().all(|r| r.node != "small"),
        "small cannot hold iota"
    );

    // big, started again, is back.
    big.launch();
    let back = until_listed(&on, START, "big back", exactly(&all));
    println!("big back in the registry {back:?} after its start");

    // nats-server restarted with nothing: every node registers again by itself.
    nats.restart_empty();
    let again = until_listed(
        &on,
        Duration::from_secs(15),
        "all registered again",
        exactly(&all),
    );
    println!("all three registered again {again:?} after nats-server restarted");
    drop(small);
}
