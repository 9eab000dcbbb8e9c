//! The fabric as a new user meets it: certificates, a node, a remote run and inventory, and the
//! node drained by a signal. Everything on 127.0.0.1; every wait bounded.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tasklet(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tasklet"))
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tasklet starts");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A UDP port free a moment ago on 127.0.0.1.
fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (bounded) for a child to exit.
fn wait_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn certs_node_remote_run_inventory_and_drain() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let certs = certs.to_str().unwrap();
    let out = tasklet(&["certs", "init", certs], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = tasklet(&["certs", "issue", certs, "--tenant", "team-7"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Initialising again would replace the CA: refused, saying so.
    let out = tasklet(&["certs", "init", certs], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("already holds a CA"),
        "{}",
        text(&out.stderr)
    );

    let addr = format!("127.0.0.1:{}", free_port());
    let mut node = Command::new(env!("CARGO_BIN_EXE_tasklet"))
        .args([
            "node",
            "--listen",
            &addr,
            "--certs",
            certs,
            "--backend",
            "emu",
            "--log-format",
            "json",
        ])
        .current_dir(repo())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the node starts");
    let result = std::panic::catch_unwind(|| {
        // The node answers once its first worker is up; the first inventory waits for that.
        let start = Instant::now();
        let inventory = loop {
            let out = tasklet(
                &["inventory", "--node", &addr, "--certs", certs, "--json"],
                b"",
            );
            if out.status.success() || start.elapsed() > WAIT {
                break out;
            }
        };
        assert!(inventory.status.success(), "{}", text(&inventory.stderr));
        let json = text(&inventory.stdout);
        assert!(
            json.contains("\"backend\":\"emu\"") && json.contains("\"leases\":0"),
            "{json}"
        );

        let out = tasklet(
            &["run", "--node", &addr, "--certs", certs, "tasklets/iota"],
            b"5",
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "1\n2\n3\n4\n5\n");
        let out = tasklet(
            &[
                "run",
                "--node",
                &addr,
                "--certs",
                certs,
                "--tenant",
                "team-7",
                "tasklets/scale",
            ],
            b"2 1.5 -4",
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "3\n-8\n");

        // A tenant with no certificate here: one line, what is missing and how to make it.
        let out = tasklet(
            &[
                "run",
                "--node",
                &addr,
                "--certs",
                certs,
                "--tenant",
                "nobody",
                "tasklets/iota",
            ],
            b"",
        );
        assert_eq!(out.status.code(), Some(2));
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("nobody.pem does not exist") && err.contains("tasklet certs issue"),
            "{err}"
        );
    });
    // SIGTERM drains: with no lease running, the node exits 0 at once.
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(node.id() as i32, libc::SIGTERM) };
    let status = wait_exit(&mut node, WAIT);
    if status.is_none() {
        let _ = node.kill();
    }
    let mut logs = String::new();
    let _ = node.stderr.take().unwrap().read_to_string(&mut logs);
    if let Err(panic) = result {
        eprintln!("node logs:\n{logs}");
        std::panic::resume_unwind(panic);
    }
    assert!(
        status.is_some_and(|s| s.success()),
        "node exit {status:?}; logs:\n{logs}"
    );
    for event in [
        "\"connection open\"",
        "\"lease acquired\"",
        "\"tenant\":\"team-7\"",
        "draining",
        "\"stopped\"",
    ] {
        assert!(logs.contains(event), "no {event} in the logs:\n{logs}");
    }
}
