//! `tasklet run --nats` with its node killed (SIGKILL) mid-run, two runs on it: one running
//! one-shots (the SDK's `GpuCall`) back to back, one holding a session. The one-shots go on on
//! the other node and none fails; the session fails `disconnected` and is not moved.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::harness::{exactly, listed, until_listed, Nats, Node, START};
use super::nats_binary;
use crate::support::{repo, tasklet};

/// How long a placed client takes to give up on a node that stopped answering (its idle
/// timeout, 5 s), with room.
const NOTICED_WITHIN: Duration = Duration::from_secs(12);
/// One-shots on the node before it is killed, so that they are surely under way.
const BEFORE_THE_KILL: usize = 20;

/// `tasklet run --nats URL --requires gpu --certs CERTS probe`, `input` on its stdin.
fn run_probe(url: &str, certs: &str, input: &[u8]) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tasklet"))
        .args(["run", "--nats", url, "--requires", "gpu", "--certs", certs])
        .arg("tasklets/testing/probe")
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child
}

/// Waits (bounded) for `child` to end; its status, stdout and stderr.
fn ended(mut child: Child, within: Duration, what: &str) -> (bool, String, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.success(), out, err)
}

/// The one-shots a node's log shows ended (each one-shot is a lease acquired and released).
fn leases_released(node: &Node) -> usize {
    node.log().matches("lease released").count()
}

#[test]
fn one_shots_move_off_a_killed_node_and_its_session_fails() {
    let Some(binary) = nats_binary() else {
        crate::support::say_skipped("nats-server not found (run scripts/install-nats.sh)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let nats = Nats::start(binary, dir.path(), &[]);
    let url = nats.url();
    let certs = dir.path().join("certs");
    let c = certs.to_str().unwrap().to_owned();
    assert!(tasklet(&["certs", "init", &c], b"").status.success());
    let on = ["--nats", url.as_str()];
    // The placement's order is most free VRAM first: `big`, then `spare`.
    let mut big = Node::start("big", "1GiB", dir.path(), &certs, &on);
    let spare = Node::start("spare", "512MiB", dir.path(), &certs, &on);
    until_listed(&on, START, "both nodes", exactly(&["big", "spare"]));

    // A session on big, holding a lease until an op fails.
    let session = run_probe(&url, &c, b"hold 40");
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

    // One-shots on big, back to back for 20 s; big killed once some have run there.
    let one_shots = run_probe(&url, &c, b"one-shots 20");
    let start = Instant::now();
    while leases_released(&big) < BEFORE_THE_KILL {
        assert!(
            start.elapsed() < START,
            "the one-shots never ran on big: {}",
            big.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let on_big = leases_released(&big);
    big.kill();
    let killed = Instant::now();

    // The session fails disconnected, and is not moved.
    let (ok, out, err) = ended(session, NOTICED_WITHIN, "the session");
    let said = format!("{out}{err}");
    println!(
        "the session ended {:?} after the kill: {said}",
        killed.elapsed()
    );
    assert!(said.contains("disconnected"), "{said}");
    assert!(!said.contains("ok held"), "{said}");
    assert!(!said.contains("go on on node spare"), "{said}");
    let _ = ok;

    // The one-shots go on on spare; none fails.
    let (ok, out, err) = ended(one_shots, Duration::from_secs(60), "the one-shots");
    println!("the one-shots: {out}{err}");
    assert!(ok, "{out}{err}");
    let count: usize = out
        .trim()
        .strip_prefix("ok one-shots ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}{err}"));
    assert!(
        err.contains("was lost before it answered") && err.contains("go on on node spare"),
        "{err}"
    );
    let on_spare = leases_released(&spare);
    println!(
        "{count} one-shots, none failed: {on_big} on big before its kill, {on_spare} on spare after it"
    );
    assert!(
        count > on_big && on_spare >= 1,
        "{count} {on_big} {on_spare}"
    );
}
