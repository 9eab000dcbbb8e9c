//! The fabric as a new user meets it: certificates, a node, a remote run and inventory, deployed
//! tasklets and the node's metrics, and the node drained by a signal. Everything on 127.0.0.1;
//! every wait bounded.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{
    free_tcp_port, free_udp_port, repo, suite_backend, tasklet, tasklet_started, text,
};

const WAIT: Duration = Duration::from_secs(60);

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

/// A certificate folder made by `tasklet certs init` in `dir`: its path.
fn certs_in(dir: &Path) -> String {
    let certs = dir.join("certs");
    let certs = certs.to_str().unwrap().to_owned();
    let out = tasklet(&["certs", "init", &certs], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    certs
}

/// `program node` on `addr` with the certificates in `certs`, the suite's backend, a store in
/// `store` and `extra` arguments, from the checkout, its logs (JSON) kept for [`stop_node`].
///
/// A program file a test has just written may be busy for a moment (`ETXTBSY`): a child another
/// test thread forked meanwhile holds the writing descriptor until it execs. Tried again, a few
/// times.
fn start_node(program: &Path, addr: &str, certs: &str, store: &Path, extra: &[&str]) -> Child {
    let mut tries = 0;
    loop {
        let started = Command::new(program)
            .args(["node", "--listen", addr, "--certs", certs])
            .args(["--backend", suite_backend(), "--log-format", "json"])
            .args(["--store", store.to_str().unwrap()])
            .args(extra)
            .current_dir(repo())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn();
        match started {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            started => return started.expect("the node starts"),
        }
    }
}

/// Drains the node (see [`stop_node`]) after a test's checks ran on it (`result`): a failed
/// check is raised again with the node's logs printed; else the node must have exited 0. Its logs.
fn stopped_cleanly(node: Child, result: std::thread::Result<()>) -> String {
    let (status, logs) = stop_node(node);
    if let Err(panic) = result {
        eprintln!("node logs:\n{logs}");
        std::panic::resume_unwind(panic);
    }
    assert!(
        status.is_some_and(|s| s.success()),
        "node exit {status:?}; logs:\n{logs}"
    );
    logs
}

/// Drains the node (SIGTERM) and waits for it, bounded (killed past that): how it exited
/// (`None`: it had to be killed) and its logs.
fn stop_node(mut node: Child) -> (Option<std::process::ExitStatus>, String) {
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(node.id() as i32, libc::SIGTERM) };
    let status = wait_exit(&mut node, WAIT);
    if status.is_none() {
        let _ = node.kill();
    }
    let mut logs = String::new();
    let _ = node.stderr.take().unwrap().read_to_string(&mut logs);
    (status, logs)
}

/// A node of the suite's backend on a free port of 127.0.0.1, with a certificate folder of its
/// own in `dir`, answering: the node, its address and the folder.
fn serving_node(dir: &Path) -> (Child, String, String) {
    let certs = certs_in(dir);
    let addr = format!("127.0.0.1:{}", free_udp_port());
    let program = Path::new(env!("CARGO_BIN_EXE_tasklet"));
    let node = start_node(program, &addr, &certs, &dir.join("store"), &[]);
    let inventory = first_inventory(&addr, &certs, false);
    assert!(inventory.status.success(), "{}", text(&inventory.stderr));
    (node, addr, certs)
}

/// The first inventory of the node at `addr` (as tenant dev, with `certs`), retried until the
/// node answers (bounded): it answers once its first worker is up.
fn first_inventory(addr: &str, certs: &str, json: bool) -> Output {
    let mut args = vec!["inventory", "--node", addr, "--certs", certs];
    if json {
        args.push("--json");
    }
    once_the_node_answers(&args, b"")
}

/// `tasklet ARGS` with `stdin`, tried again (a pause between tries, for at most [`WAIT`]) until
/// it succeeds: a command on a node just started, which refuses until the node listens. The
/// last try's output.
fn once_the_node_answers(args: &[&str], stdin: &[u8]) -> Output {
    let start = Instant::now();
    loop {
        let out = tasklet(args, stdin);
        if out.status.success() || start.elapsed() > WAIT {
            return out;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn certs_node_remote_run_inventory_and_drain() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs_in(dir.path());
    let certs = certs.as_str();
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

    let addr = format!("127.0.0.1:{}", free_udp_port());
    let program = Path::new(env!("CARGO_BIN_EXE_tasklet"));
    let node = start_node(program, &addr, certs, &dir.path().join("store"), &[]);
    let result = std::panic::catch_unwind(|| {
        let inventory = first_inventory(&addr, certs, true);

        assert!(inventory.status.success(), "{}", text(&inventory.stderr));
        let json = text(&inventory.stdout);
        assert!(
            json.contains(&format!("\"backend\":\"{}\"", suite_backend()))
                && json.contains("\"leases\":0"),
            "{json}"
        );
        // The node lends every device this machine's own inventory lends (both GPUs of a
        // two-GPU machine), each once.
        let here = tasklet(&["inventory", "--backend", suite_backend(), "--json"], b"");
        assert!(here.status.success(), "{}", text(&here.stderr));
        let lent_here = text(&here.stdout).matches("\"lent\":true").count();
        let served = json.matches("\"uuid\":").count();
        assert!(
            lent_here >= 1 && served == lent_here,
            "the node lends {served} devices, this machine's inventory {lent_here}: {json}"
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

        // --requires is checked against the node's devices, and makes no sense without one.
        let out = tasklet(
            &[
                "run",
                "--node",
                &addr,
                "--certs",
                certs,
                "--requires",
                "gpu:vram=100TiB",
                "tasklets/iota",
            ],
            b"2",
        );
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
        let err = text(&out.stderr);
        assert!(err.contains("has no device meeting --requires"), "{err}");
        let out = tasklet(&["run", "--requires", "gpu", "tasklets/iota"], b"2");
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
        let err = text(&out.stderr);
        assert!(err.contains("give it with --node ADDR"), "{err}");

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
    let logs = stopped_cleanly(node, result);
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

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}; stderr: {}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

/// GET /metrics over TCP: the body.
fn scrape(addr: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).expect("the metrics port answers");
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

#[test]
fn deploy_push_and_run_with_json_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs_in(dir.path());
    let certs = certs.as_str();
    let out = tasklet(&["certs", "issue", certs, "--tenant", "guest"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "[tenants.dev]\n[tenants.guest]\ndeploy = false\n").unwrap();

    let addr = format!("127.0.0.1:{}", free_udp_port());
    let metrics = format!("127.0.0.1:{}", free_tcp_port());
    let log_path = dir.path().join("node.log");
    let mut node = Command::new(env!("CARGO_BIN_EXE_tasklet"))
        .args([
            "node",
            "--listen",
            &addr,
            "--certs",
            certs,
            "--backend",
            suite_backend(),
            "--policy",
            policy.to_str().unwrap(),
            "--store",
            dir.path().join("store").to_str().unwrap(),
            "--metrics",
            &metrics,
        ])
        .current_dir(repo())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("the node starts");
    let node_args = ["--node", addr.as_str(), "--certs", certs];
    let with = |args: &[&str]| -> Vec<String> {
        args.iter()
            .map(|a| a.to_string())
            .chain(node_args.iter().map(|a| a.to_string()))
            .collect()
    };
    let run = |args: Vec<String>, stdin: &[u8]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        tasklet(&args, stdin)
    };
    let result = std::panic::catch_unwind(|| {
        // The first push waits for the node to be up.
        let first = with(&["deploy", "push", "tasklets/iota", "--json"]);
        let first: Vec<&str> = first.iter().map(String::as_str).collect();
        let pushed = once_the_node_answers(&first, b"");
        assert!(pushed.status.success(), "{}", text(&pushed.stderr));
        let pushed = json(&pushed);
        let digest = pushed["digest"].as_str().unwrap().to_owned();
        assert_eq!(digest.len(), 64, "{pushed}");
        assert_eq!(pushed["uploaded"], true, "{pushed}");
        assert_eq!(pushed["already_present"], false, "{pushed}");

        // Again: nothing uploaded, the same digest; without --json, the digest alone on stdout.
        let again = run(with(&["deploy", "push", "tasklets/iota", "--json"]), b"");
        let again = json(&again);
        assert_eq!(again["digest"].as_str(), Some(digest.as_str()), "{again}");
        assert_eq!(again["uploaded"], false, "{again}");
        assert_eq!(again["already_present"], true, "{again}");
        let plain = run(with(&["deploy", "push", "tasklets/iota"]), b"");
        assert_eq!(text(&plain.stdout), format!("{digest}\n"));

        // Run by folder and by digest: stdin in, output out.
        let out = run(with(&["deploy", "run", "tasklets/iota"]), b"3");
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "1\n2\n3\n");
        let mut by_digest = with(&["deploy", "run", "--json", "--requires", "gpu"]);
        by_digest.insert(2, digest.clone());
        let out = run(by_digest.clone(), b"4");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let ran = json(&out);
        assert_eq!(ran["status"], "ok", "{ran}");
        assert_eq!(ran["exit_code"], 0, "{ran}");
        assert_eq!(ran["digest"].as_str(), Some(digest.as_str()), "{ran}");
        assert_eq!(ran["run_id"].as_str().map(str::len), Some(32), "{ran}");
        assert!(
            ran["node"].as_str().unwrap().starts_with("tasklet-node"),
            "{ran}"
        );
        assert!(ran["elapsed_us"].as_u64().is_some(), "{ran}");
        use base64::Engine as _;
        let output = base64::engine::general_purpose::STANDARD
            .decode(ran["output"].as_str().unwrap())
            .unwrap();
        assert_eq!(output, b"1\n2\n3\n4\n");

        // The tasklet fails: exit 1, its message, as `tasklet run` says it.
        let out = run(by_digest, b"twelve");
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        let failed = json(&out);
        assert_eq!(failed["status"], "failed", "{failed}");
        let message = failed["message"].as_str().unwrap();
        assert!(message.starts_with("the tasklet failed: "), "{message}");

        // It traps: exit 3, and the JSON's exit code is that exit status.
        let out = run(
            with(&["deploy", "run", "tasklets/testing/probe", "--json"]),
            b"trap",
        );
        assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
        let trapped = json(&out);
        assert_eq!(trapped["status"], "trapped", "{trapped}");
        assert_eq!(trapped["exit_code"], 3, "{trapped}");
        let message = trapped["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("unreachable") && !message.contains('\n'),
            "a trap is one line saying what trapped: {message:?}"
        );
        // What it printed (its panic's message) is in the node's log as one escaped line under
        // the tenant and the run's id, and nowhere raw.
        let run_id = trapped["run_id"].as_str().unwrap().to_owned();
        let log = std::fs::read_to_string(&log_path).unwrap();
        let printed: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("tasklet printed:"))
            .collect();
        assert!(
            printed
                .iter()
                .any(|l| l.contains(&run_id) && l.contains("dev") && l.contains("probe trap\\n")),
            "{log}"
        );
        assert!(
            log.lines()
                .filter(|l| l.contains("panicked at"))
                .all(|l| l.contains("tasklet printed:")),
            "the tasklet's own lines reached the node's log raw:\n{log}"
        );

        // A digest the node does not have, for this tenant: exit 2, one line.
        let out = run(with(&["deploy", "run", &"0".repeat(64)]), b"");
        assert_eq!(out.status.code(), Some(2));
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("NOT_FOUND") && err.contains("tasklet deploy push"),
            "{err}"
        );
        // With --json, the refusal is JSON on stdout too.
        let mut missing = with(&["deploy", "run", "--json"]);
        missing.insert(2, "0".repeat(64));
        let out = run(missing, b"");
        assert_eq!(out.status.code(), Some(2));
        let refused = json(&out);
        let said = refused["error"].as_str().unwrap_or_default();
        assert!(said.contains("NOT_FOUND"), "{refused}");
        assert_eq!(format!("error: {said}\n"), text(&out.stderr));

        // A tenant the policy denies deploying: exit 2, naming the key.
        let guest = with(&["deploy", "push", "tasklets/iota", "--tenant", "guest"]);
        let out = run(guest, b"");
        assert_eq!(out.status.code(), Some(2));
        let err = text(&out.stderr);
        assert!(
            err.contains("UNAUTHORIZED") && err.contains("`deploy = false` in [tenants.guest]"),
            "{err}"
        );

        // The metrics say so.
        let body = scrape(&metrics);
        for line in [
            "tasklet_deploy_pushes_total{result=\"stored\",tenant=\"dev\"} 2",
            "tasklet_deploy_runs_total{status=\"ok\",tenant=\"dev\"} 2",
            "tasklet_deploy_runs_total{status=\"failed\",tenant=\"dev\"} 1",
            "tasklet_deploy_runs_total{status=\"trapped\",tenant=\"dev\"} 1",
            "tasklet_deploy_runs_total{status=\"refused\",tenant=\"dev\"} 2",
            "tasklet_deploy_pushes_total{result=\"refused\",tenant=\"guest\"} 1",
        ] {
            assert!(body.lines().any(|l| l == line), "no {line:?} in:\n{body}");
        }

        // Commands that end right after their run tell the node they are gone: their
        // connections end at once, not at the node's 10 s idle timeout.
        for _ in 0..10 {
            let out = run(with(&["deploy", "run", &digest]), b"2");
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
        let began = std::time::Instant::now();
        let gone = loop {
            let body = scrape(&metrics);
            if body.lines().any(|l| l == "tasklet_connections_open 0") {
                break true;
            }
            if began.elapsed() > Duration::from_secs(3) {
                break false;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            gone,
            "connections still open 3 s after their commands ended:\n{}",
            scrape(&metrics)
        );
    });
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(node.id() as i32, libc::SIGTERM) };
    let status = wait_exit(&mut node, WAIT);
    if status.is_none() {
        let _ = node.kill();
    }
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    assert!(status.is_some_and(|s| s.success()), "node exit {status:?}");
}

/// A deployment whose component went missing from the node's store is uploaded again by the
/// next push, which says so (not "already deployed"), and runs again.
#[test]
fn a_push_restores_a_component_gone_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs_in(dir.path());
    let store = dir.path().join("store");
    let addr = format!("127.0.0.1:{}", free_udp_port());
    let node = start_node(
        Path::new(env!("CARGO_BIN_EXE_tasklet")),
        &addr,
        &certs,
        &store,
        &[],
    );
    let result = std::panic::catch_unwind(|| {
        let push = |json: bool| {
            let mut args = vec![
                "deploy",
                "push",
                "tasklets/iota",
                "--node",
                &addr,
                "--certs",
                &certs,
            ];
            if json {
                args.push("--json");
            }
            once_the_node_answers(&args, b"")
        };
        let first = push(false);
        assert!(first.status.success(), "{}", text(&first.stderr));
        assert!(
            text(&first.stderr).contains("iota deployed on"),
            "{}",
            text(&first.stderr)
        );
        // Every blob gone, the deployment's record kept.
        for blob in std::fs::read_dir(store.join("blobs/sha256")).unwrap() {
            std::fs::remove_file(blob.unwrap().path()).unwrap();
        }
        let again = push(false);
        assert!(again.status.success(), "{}", text(&again.stderr));
        // The node's copy was gone: this push put it back, as a first push would.
        let said = text(&again.stderr);
        assert!(said.contains("iota deployed on"), "{said}");
        assert_eq!(text(&again.stdout), text(&first.stdout), "the same digest");
        let third = json(&push(true));
        assert_eq!(third["already_present"], true, "{third}");
        assert_eq!(third["uploaded"], false, "{third}");
        // A push that restores a missing copy says so in JSON too: it was not there before.
        for blob in std::fs::read_dir(store.join("blobs/sha256")).unwrap() {
            std::fs::remove_file(blob.unwrap().path()).unwrap();
        }
        let digest = text(&first.stdout).trim().to_owned();
        let missing = tasklet(
            &["deploy", "run", &digest, "--node", &addr, "--certs", &certs],
            b"3",
        );
        let said = text(&missing.stderr);
        assert!(
            !missing.status.success()
                && said.contains("missing its blob")
                && said.contains("push it again"),
            "{said}"
        );
        let restoring = json(&push(true));
        assert_eq!(restoring["already_present"], false, "{restoring}");
        assert_eq!(restoring["uploaded"], true, "{restoring}");
        let ran = tasklet(
            &[
                "deploy",
                "run",
                "tasklets/iota",
                "--node",
                &addr,
                "--certs",
                &certs,
            ],
            b"2",
        );
        assert!(ran.status.success(), "{}", text(&ran.stderr));
        assert_eq!(text(&ran.stdout), "1\n2\n");
    });
    stopped_cleanly(node, result);
}

/// The same tasklet, unchanged, with its GPUs here and on a node of the same devices: sdk-check's
/// `group` takes a group of 2 leases, copies between their sessions and prints the refusals of
/// three more groups; `run --node` prints the same lines as a local run.
#[test]
fn a_group_of_leases_runs_alike_here_and_through_a_node() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs_in(dir.path());
    let certs = certs.as_str();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "[emu]\ndevices = [\"64MiB\", \"32MiB\"]\n").unwrap();
    let policy = policy.to_str().unwrap();

    let addr = format!("127.0.0.1:{}", free_udp_port());
    let mut node = Command::new(env!("CARGO_BIN_EXE_tasklet"))
        .args([
            "node",
            "--listen",
            &addr,
            "--certs",
            certs,
            "--backend",
            "emu",
            "--policy",
            policy,
            "--store",
            dir.path().join("store").to_str().unwrap(),
        ])
        .current_dir(repo())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the node starts");
    let result = std::panic::catch_unwind(|| {
        let here = tasklet(
            &[
                "run",
                "--backend",
                "emu",
                "--policy",
                policy,
                "tasklets/testing/sdk-check",
            ],
            b"group",
        );
        assert!(here.status.success(), "{}", text(&here.stderr));
        let here = text(&here.stdout);
        assert!(
            here.starts_with("ok group 0 1\nok group-copy 5 6 7 8\n"),
            "{here}"
        );
        // The first run waits for the node to be up.
        let there = once_the_node_answers(
            &[
                "run",
                "--node",
                &addr,
                "--certs",
                certs,
                "tasklets/testing/sdk-check",
            ],
            b"group",
        );
        assert!(there.status.success(), "{}", text(&there.stderr));
        assert_eq!(text(&there.stdout), here);
    });
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(node.id() as i32, libc::SIGTERM) };
    if wait_exit(&mut node, WAIT).is_none() {
        let _ = node.kill();
    }
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// `run --node --policy FILE` runs the tasklet under the policy's grant, its GPU caps
/// included: the node is asked for no more, so a right or VRAM the policy withholds is refused
/// there as it would be here, in the same words.
#[test]
fn a_remote_run_keeps_its_policys_gpu_caps() {
    let dir = tempfile::tempdir().unwrap();
    let (node, addr, certs) = serving_node(dir.path());
    let result = std::panic::catch_unwind(|| {
        let cases = [
            (
                "no-launch.toml",
                "[tasklets]\nrights = [\"alloc\", \"read\", \"write\", \"load\"]\n",
                &b"3"[..],
                "missing right `launch`",
            ),
            (
                "small.toml",
                "[tasklets]\nmax-vram = \"1MiB\"\n",
                &b"1000000"[..],
                "quota-exceeded",
            ),
        ];
        for (name, text_of_policy, input, refused) in cases {
            let policy = dir.path().join(name);
            std::fs::write(&policy, text_of_policy).unwrap();
            let policy = policy.to_str().unwrap();
            let here = tasklet(
                &[
                    "run",
                    "--backend",
                    "emu",
                    "--policy",
                    policy,
                    "tasklets/iota",
                ],
                input,
            );
            let there = tasklet(
                &[
                    "run",
                    "--node",
                    &addr,
                    "--certs",
                    &certs,
                    "--policy",
                    policy,
                    "tasklets/iota",
                ],
                input,
            );
            for (where_, out) in [("here", &here), ("on the node", &there)] {
                let stderr = text(&out.stderr);
                assert_eq!(out.status.code(), Some(1), "{name} {where_}: {stderr}");
                assert!(stderr.contains(refused), "{name} {where_}: {stderr}");
            }
        }
        // Without the policy the same run goes through on the node.
        let out = tasklet(
            &["run", "--node", &addr, "--certs", &certs, "tasklets/iota"],
            b"3",
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "1\n2\n3\n");
    });
    let (status, log) = stop_node(node);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    assert!(status.is_some_and(|s| s.success()), "{log}");
}

/// The processes `pid` has started and not yet reaped (every thread's children).
fn children(pid: u32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// A node goes on starting workers after the file of its program is replaced (a rebuild or an
/// upgrade under a running node): its workers run the node's own image, not what that path holds
/// now, which a host of another build could not speak to. They are listed (`ps`) under the
/// program's path, not the `/proc/self/exe` they are started through.
#[test]
fn a_node_whose_program_file_is_replaced_still_starts_workers() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs_in(dir.path());
    let certs = certs.as_str();
    let program = dir.path().join("tasklet");
    std::fs::copy(env!("CARGO_BIN_EXE_tasklet"), &program).unwrap();
    let addr = format!("127.0.0.1:{}", free_udp_port());
    let node = start_node(&program, &addr, certs, &dir.path().join("store"), &[]);
    let result = std::panic::catch_unwind(|| {
        let inventory = first_inventory(&addr, certs, false);
        assert!(inventory.status.success(), "{}", text(&inventory.stderr));
        let start = Instant::now();
        let mut named = Vec::new();
        while named.is_empty() && start.elapsed() < WAIT {
            named = children(node.id())
                .iter()
                .filter_map(|w| std::fs::read(format!("/proc/{w}/cmdline")).ok())
                .filter(|line| !line.is_empty())
                .map(|line| String::from_utf8_lossy(&line).replace('\0', " "))
                .collect();
            std::thread::sleep(Duration::from_millis(20));
        }
        let expected = format!("{} worker ", program.display());
        assert!(
            !named.is_empty() && named.iter().all(|line| line.starts_with(&expected)),
            "workers listed as {named:?}, not under {expected:?}"
        );
        // Replaced, as a rebuild does (a new file renamed over the old), by a program that is
        // not a worker at all; then its warm workers are killed, so the next lease needs a new
        // one.
        let other = dir.path().join("tasklet.new");
        std::fs::write(&other, "#!/bin/sh\nexit 97\n").unwrap();
        std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::rename(&other, &program).unwrap();
        let workers = children(node.id());
        assert!(!workers.is_empty(), "the node has started no worker");
        for w in &workers {
            // SAFETY: plain kill(2) of the node's child.
            unsafe { libc::kill(*w, libc::SIGKILL) };
        }
        // A worker still starting when it was killed (the node answers before its warm workers
        // are all up) is replaced by the pool for the lease that waited for it; every start is
        // of the node's own image, or the run would fail with the replacement's exit status 97.
        let out = tasklet(
            &["run", "--node", &addr, "--certs", certs, "tasklets/iota"],
            b"3",
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "1\n2\n3\n");
        let now = children(node.id());
        assert!(
            now.iter().any(|p| !workers.contains(p)),
            "no worker was started after the replacement: before {workers:?}, now {now:?}"
        );
    });
    stopped_cleanly(node, result);
}

/// Leases on the node, from `inventory --json`.
fn leases_on(addr: &str, certs: &str) -> usize {
    let out = tasklet(
        &["inventory", "--node", addr, "--certs", certs, "--json"],
        b"",
    );
    let json = text(&out.stdout);
    json.split("\"leases\":")
        .skip(1)
        .filter_map(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<usize>()
                .ok()
        })
        .sum()
}

/// A `tasklet run --node` of the probe holding a lease (for a minute), started, and waited for
/// (bounded) until the node shows its lease.
fn client_holding_a_lease(addr: &str, certs: &str) -> Child {
    holding_a_lease(&probe_on_node(addr, certs), addr, certs)
}

/// `tasklet run --node ADDR --certs CERTS` of the probe tasklet.
fn probe_on_node<'a>(addr: &'a str, certs: &'a str) -> [&'a str; 6] {
    [
        "run",
        "--node",
        addr,
        "--certs",
        certs,
        "tasklets/testing/probe",
    ]
}

/// `tasklet ARGS` of the probe told to hold a lease for a minute, started, and waited for
/// (bounded) until the node at `addr` shows a lease.
fn holding_a_lease(args: &[&str], addr: &str, certs: &str) -> Child {
    with_a_lease(args, b"hold 60", addr, certs)
}

/// `tasklet ARGS` with `stdin`, started, and waited for (bounded) until the node at `addr` shows
/// a lease.
fn with_a_lease(args: &[&str], stdin: &[u8], addr: &str, certs: &str) -> Child {
    let client = tasklet_started(args, stdin);
    let start = Instant::now();
    while leases_on(addr, certs) == 0 && start.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(50));
    }
    client
}

/// Ctrl-C on a client running against a node closes its connection, telling the node, which
/// frees its lease at once rather than at its idle timeout (10 s); the client exits 130. SIGTERM
/// (`kill`, `timeout`, a service manager) does the same, and the client exits 143 saying so.
#[test]
fn an_interrupted_client_frees_its_lease_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs_in(dir.path());
    let certs = certs.as_str();
    // The node serves a certificate issued again from the same CA, with another name: its
    // clients need nothing new.
    let before = std::fs::read(Path::new(certs).join("node.pem")).unwrap();
    let out = tasklet(&["certs", "node", certs, "--name", "gpu1.example"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("node.pem"),
        "{}",
        text(&out.stdout)
    );
    let after = std::fs::read(Path::new(certs).join("node.pem")).unwrap();
    assert_ne!(before, after, "the node certificate was not replaced");
    let addr = format!("127.0.0.1:{}", free_udp_port());
    let program = Path::new(env!("CARGO_BIN_EXE_tasklet"));
    let node = start_node(program, &addr, certs, &dir.path().join("store"), &[]);
    let result = std::panic::catch_unwind(|| {
        let inventory = first_inventory(&addr, certs, false);
        assert!(inventory.status.success(), "{}", text(&inventory.stderr));
        for (signal, status, said) in [
            (libc::SIGINT, 130, "error: interrupted (Ctrl-C)"),
            (libc::SIGTERM, 143, "error: terminated (SIGTERM)"),
        ] {
            let mut client = client_holding_a_lease(&addr, certs);
            assert_eq!(
                leases_on(&addr, certs),
                1,
                "the client's lease never showed"
            );
            // SAFETY: plain kill(2) of our own child.
            unsafe { libc::kill(client.id() as i32, signal) };
            let exited = wait_exit(&mut client, WAIT);
            if exited.is_none() {
                let _ = client.kill();
            }
            let out = client.wait_with_output().unwrap();
            let stderr = text(&out.stderr);
            assert_eq!(exited.and_then(|s| s.code()), Some(status), "{stderr}");
            assert!(stderr.contains(said), "{stderr}");
            // Nothing of the tasklet's own output: what it wrote once its GPU calls failed is
            // not a result (a local run the signal ends prints nothing either).
            assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
            let stopped = Instant::now();
            while leases_on(&addr, certs) != 0 && stopped.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let freed = stopped.elapsed();
            assert!(
                freed < Duration::from_secs(3),
                "the lease was freed {freed:?} after the client ended ({said}), not at once"
            );
        }
    });
    stopped_cleanly(node, result);
}

/// A client started with SIGHUP ignored (`nohup`, `trap '' HUP`) keeps running through a
/// SIGHUP, its lease held; SIGTERM still stops it, freeing the lease at once.
#[test]
fn a_client_that_ignores_sighup_runs_on_through_one() {
    let dir = tempfile::tempdir().unwrap();
    let (node, addr, certs) = serving_node(dir.path());
    let (addr, certs) = (addr.as_str(), certs.as_str());
    let result = std::panic::catch_unwind(|| {
        let mut client = Command::new("sh")
            .args(["-c", "trap '' HUP; exec \"$0\" \"$@\""])
            .arg(env!("CARGO_BIN_EXE_tasklet"))
            .args(probe_on_node(addr, certs))
            .env(
                "TASKLET_COMPILE_CACHE",
                Path::new(env!("CARGO_TARGET_TMPDIR")).join("tasklet-cli-tests-compile-cache"),
            )
            .current_dir(crate::support::repo())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        client.stdin.take().unwrap().write_all(b"hold 60").unwrap();
        let start = Instant::now();
        while leases_on(addr, certs) == 0 && start.elapsed() < WAIT {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(leases_on(addr, certs), 1, "the client's lease never showed");
        // SAFETY: plain kill(2) of our own child (the shell exec'd the client in its place).
        unsafe { libc::kill(client.id() as i32, libc::SIGHUP) };
        std::thread::sleep(Duration::from_millis(700));
        assert!(
            client.try_wait().unwrap().is_none(),
            "the client ended on a SIGHUP it ignores"
        );
        assert_eq!(leases_on(addr, certs), 1, "the lease went with the SIGHUP");
        // SAFETY: as above.
        unsafe { libc::kill(client.id() as i32, libc::SIGTERM) };
        let exited = wait_exit(&mut client, WAIT);
        if exited.is_none() {
            let _ = client.kill();
        }
        assert_eq!(exited.and_then(|s| s.code()), Some(143));
        let stopped = Instant::now();
        while leases_on(addr, certs) != 0 && stopped.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(3),
            "the lease outlived the client"
        );
    });
    stopped_cleanly(node, result);
}

/// SIGTERM drains a node that has a lease running (it waits for it); a second signal stops it
/// at once, and it exits 1, not the 0 of a drain that ran its course.
#[test]
fn a_second_signal_stops_a_draining_node_at_once_and_it_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let (mut node, addr, certs) = serving_node(dir.path());
    let (addr, certs) = (addr.as_str(), certs.as_str());
    let mut client = client_holding_a_lease(addr, certs);
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(node.id() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(500));
    let draining = node.try_wait().unwrap();
    // Inventory still answers, and says so, in both forms.
    let listed = tasklet(&["inventory", "--node", addr, "--certs", certs], b"");
    let listed_json = tasklet(
        &["inventory", "--node", addr, "--certs", certs, "--json"],
        b"",
    );
    // SAFETY: as above.
    unsafe { libc::kill(node.id() as i32, libc::SIGTERM) };
    let status = node_exit_then_client(&mut node, &mut client);
    assert!(
        draining.is_none(),
        "the node did not wait for its running lease: {draining:?}"
    );
    assert!(
        text(&listed.stdout).contains("(draining: "),
        "{}{}",
        text(&listed.stdout),
        text(&listed.stderr)
    );
    let devices = json(&listed_json);
    assert!(
        devices
            .as_array()
            .is_some_and(|d| !d.is_empty() && d.iter().all(|d| d["draining"] == true)),
        "{devices}"
    );
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{status:?}");
}

/// A node whose log reader goes away (its stderr piped to a program that exited) goes on
/// serving, and still drains and exits 0 on SIGTERM: log lines it cannot write are dropped.
#[test]
fn a_node_whose_log_reader_went_away_still_serves_and_drains() {
    let dir = tempfile::tempdir().unwrap();
    let (mut node, addr, certs) = serving_node(dir.path());
    let (addr, certs) = (addr.as_str(), certs.as_str());
    // The reader goes: every later log line fails to be written (EPIPE).
    drop(node.stderr.take());
    for _ in 0..3 {
        let out = tasklet(&["inventory", "--node", addr, "--certs", certs], b"");
        assert!(
            out.status.success(),
            "with its log reader gone the node stopped serving: {}",
            text(&out.stderr)
        );
        let run = tasklet(
            &["run", "--node", addr, "--certs", certs, "tasklets/iota"],
            b"3",
        );
        assert_eq!(text(&run.stdout), "1\n2\n3\n", "{}", text(&run.stderr));
    }
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(node.id() as i32, libc::SIGTERM) };
    let status = wait_exit(&mut node, WAIT);
    if status.is_none() {
        let _ = node.kill();
    }
    assert!(
        status.is_some_and(|s| s.success()),
        "the node did not drain on SIGTERM with its log reader gone: {status:?}"
    );
}

/// Ctrl-C on `deploy run --json` and on `run --node` (the probe holding a lease; jacobi in the
/// middle of its GPU calls, which then fail): the command says it was interrupted, in one line,
/// as JSON on stdout under `--json` (whole, every time), and exits 130.
#[test]
fn an_interrupted_client_says_so_and_its_json_is_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (node, addr, certs) = serving_node(dir.path());
    let (addr, certs) = (addr.as_str(), certs.as_str());
    let result = std::panic::catch_unwind(|| {
        for round in 0..4 {
            let json = round == 0 || round == 2;
            let mut args = vec!["deploy", "run", "tasklets/testing/probe", "--node", addr];
            args.extend(["--certs", certs]);
            if round == 1 {
                args = probe_on_node(addr, certs).to_vec();
            }
            if round == 3 {
                args = vec!["run", "--node", addr, "--certs", certs, "tasklets/jacobi"];
            }
            if json {
                args.push("--json");
            }
            let mut client = if round == 3 {
                // Built first (a short local run), so that the wait below is for the lease and
                // not for cargo; then sweeps enough to outlast that wait many times over.
                let built = tasklet(&["run", "--backend", "emu", "tasklets/jacobi"], b"8 2");
                assert!(built.status.success(), "{}", text(&built.stderr));
                with_a_lease(&args, b"100000 8192", addr, certs)
            } else {
                holding_a_lease(&args, addr, certs)
            };
            // SAFETY: plain kill(2) of our own child.
            unsafe { libc::kill(client.id() as i32, libc::SIGINT) };
            let status = wait_exit(&mut client, WAIT);
            if status.is_none() {
                let _ = client.kill();
            }
            let out = client.wait_with_output().unwrap();
            let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
            assert_eq!(
                status.and_then(|s| s.code()),
                Some(130),
                "{args:?}: {stderr}"
            );
            // One line: the interruption, not also the run's failure it caused.
            let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
            assert!(
                errors.len() == 1 && errors[0].starts_with("error: interrupted (Ctrl-C)"),
                "{args:?}: {stderr}"
            );
            if json {
                let value: serde_json::Value = serde_json::from_str(stdout.trim())
                    .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {stdout:?}"));
                let said = value["error"].as_str().unwrap_or_default();
                assert!(
                    said.starts_with("interrupted (Ctrl-C)"),
                    "{args:?}: {stdout}"
                );
            }
            let freed = Instant::now();
            while leases_on(addr, certs) != 0 && freed.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    });
    stopped_cleanly(node, result);
}

/// One store folder, one node: a second node given the first's store (on another port) exits
/// at once saying the folder is in use and by which process, in one line before it starts a
/// backend, and the first serves on; once the
/// first is killed (SIGKILL: no clean exit), a node started on that folder serves.
#[test]
fn a_second_node_on_a_store_in_use_is_refused_until_the_first_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let (mut first, addr, certs) = serving_node(dir.path());
    let store = dir.path().join("store");
    let program = Path::new(env!("CARGO_BIN_EXE_tasklet"));
    let second_addr = format!("127.0.0.1:{}", free_udp_port());
    let mut second = start_node(program, &second_addr, &certs, &store, &[]);
    let status = wait_exit(&mut second, Duration::from_secs(20));
    if status.is_none() {
        // Serving on the same folder: its logs end only with it.
        let _ = second.kill();
    }
    let mut logs = String::new();
    let _ = second.stderr.take().unwrap().read_to_string(&mut logs);
    let first_pid = first.id();
    let result = std::panic::catch_unwind(|| {
        assert_eq!(status.and_then(|s| s.code()), Some(2), "{logs}");
        let expected = format!("is in use by another running node (process {first_pid})");
        assert!(
            logs.contains(&expected) && logs.contains("--store DIR"),
            "{logs}"
        );
        assert_eq!(
            logs.lines().count(),
            1,
            "refused before its backend: {logs}"
        );
        let inventory = tasklet(&["inventory", "--node", &addr, "--certs", &certs], b"");
        assert!(inventory.status.success(), "{}", text(&inventory.stderr));
    });
    first.kill().unwrap();
    let _ = first.wait();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    let third = start_node(program, &second_addr, &certs, &store, &[]);
    let result = std::panic::catch_unwind(|| {
        let inventory = first_inventory(&second_addr, &certs, false);
        assert!(inventory.status.success(), "{}", text(&inventory.stderr));
    });
    stopped_cleanly(third, result);
}

/// A node that cannot start says why in its log's format: with `--log-format json` as a log line
/// like its others (level ERROR), not as a line of text a reader of the log cannot parse. Either
/// way one line, and the exit status 2.
#[test]
fn a_node_that_cannot_start_says_why_in_its_log_format() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-certs");
    for format in ["json", "text"] {
        let out = Command::new(env!("CARGO_BIN_EXE_tasklet"))
            .args(["node", "--listen", "127.0.0.1:0", "--log-format", format])
            .arg("--certs")
            .arg(&missing)
            .arg("--store")
            .arg(dir.path().join("store"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{format}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{format}: {err}");
        let said = match format {
            "json" => {
                let line: serde_json::Value = serde_json::from_str(err.trim())
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {err}"));
                assert_eq!(line["level"], "ERROR", "{line}");
                line["fields"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            }
            _ => err
                .strip_prefix("error: ")
                .unwrap_or_else(|| panic!("{err}"))
                .to_owned(),
        };
        assert!(said.contains("tasklet certs init"), "{format}: {said}");
    }
}

/// Two signals in a row, as `timeout` sends them (to its command, then to its process group),
/// are one stop: the node drains, waiting for its running lease, and exits 0 once it is done.
#[test]
fn a_signal_sent_twice_at_once_drains_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let (mut node, addr, certs) = serving_node(dir.path());
    let mut client = client_holding_a_lease(&addr, &certs);
    // Apart enough for the node to take them as two (signals not yet taken are one), well
    // within what it counts as one stop.
    for _ in 0..2 {
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(node.id() as i32, libc::SIGTERM) };
        std::thread::sleep(Duration::from_millis(30));
    }
    std::thread::sleep(Duration::from_millis(500));
    let draining = node.try_wait().unwrap();
    // The client lets go of its lease (closing its connection, as Ctrl-C does): the drain ran
    // its course.
    // SAFETY: as above.
    unsafe { libc::kill(client.id() as i32, libc::SIGINT) };
    let status = node_exit_then_client(&mut node, &mut client);
    assert!(
        draining.is_none(),
        "the node stopped at once, not waiting for its running lease: {draining:?}"
    );
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{status:?}");
}

/// The node's exit status once it exits (bounded; killed if it does not), then the client's
/// end (killed if it does not): neither is left behind, whatever a test checks after.
fn node_exit_then_client(node: &mut Child, client: &mut Child) -> Option<std::process::ExitStatus> {
    let status = wait_exit(node, WAIT);
    if status.is_none() {
        let _ = node.kill();
    }
    if wait_exit(client, WAIT).is_none() {
        let _ = client.kill();
    }
    status
}
