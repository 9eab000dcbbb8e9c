//! The `tasklet` command as users run it.

use crate::support::{tasklet, text};

#[test]
fn run_prints_the_output_and_says_which_backend() {
    let out = tasklet(&["run", "tasklets/iota", "--backend", "auto"], b"5");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1\n2\n3\n4\n5\n");
    // auto: CUDA on a machine with a usable GPU, else the emulator, saying why.
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("backend emu") || stderr.contains("backend cuda"),
        "{stderr}"
    );
}

/// A kernel's `printf` reaches the host's stderr, behind its worker's pid (so that no line a
/// kernel prints reads as one of the host's), before `run` exits.
#[test]
fn a_kernels_printf_reaches_stderr_behind_its_worker() {
    let out = tasklet(
        &[
            "run",
            "tasklets/testing/probe",
            "--backend",
            crate::support::suite_backend(),
        ],
        b"printf",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "ok launch lookup\nok sync\n");
    let stderr = text(&out.stderr);
    let printed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("lookup: n=1"))
        .collect();
    assert_eq!(printed.len(), 1, "{stderr}");
    let (prefix, line) = printed[0].split_once(" | ").expect("behind a prefix");
    let pid = prefix.strip_prefix("worker ").expect("`worker PID`");
    assert!(pid.parse::<u32>().is_ok(), "{stderr}");
    assert_eq!(line, "lookup: n=1 lut[5]=9 pi~3.142 ok");
}

#[test]
fn run_reads_input_from_a_file() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let dir = scratch.path();
    let input = dir.join("in.txt");
    std::fs::write(&input, "2 1.5 -4").unwrap();
    let out = tasklet(
        &[
            "run",
            "tasklets/scale",
            "--backend",
            "emu",
            "--input",
            input.to_str().unwrap(),
        ],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "3\n-8\n");
}

#[test]
fn a_failing_tasklet_exits_non_zero_with_the_cause() {
    let out = tasklet(
        &["run", "tasklets/iota", "--backend", "emu"],
        b"not-a-number",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("error:"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_tasklet_that_does_not_exist_is_one_line_saying_so() {
    for command in [
        &["run", "tasklets/no-such-tasklet"][..],
        &[
            "deploy",
            "push",
            "tasklets/no-such-tasklet",
            "--node",
            "127.0.0.1:9",
        ],
    ] {
        let out = tasklet(command, b"");
        assert_eq!(out.status.code(), Some(2), "{command:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{command:?}: {err}");
        assert!(
            err.contains("tasklets/no-such-tasklet does not exist"),
            "{command:?}: {err}"
        );
    }
}

#[test]
fn a_node_name_is_checked_with_or_without_a_cluster() {
    let out = tasklet(
        &["node", "--name", "my node", "--listen", "127.0.0.1:9"],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: --name \"my node\"") && last.contains("only A-Z a-z 0-9 - _ ."),
        "{err}"
    );
}

/// A node whose certificate folder cannot serve says so before it starts its backend: one
/// line, the fix in it, no worker started first.
#[test]
fn a_node_without_certificates_is_refused_before_its_backend_starts() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-certs");
    let store = dir.path().join("store");
    let out = tasklet(
        &[
            "node",
            "--listen",
            "127.0.0.1:9",
            "--certs",
            missing.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: cannot use the node's certificates:")
            && err.contains("--certs DIR")
            && err.contains("make one with `tasklet certs init DIR`"),
        "{err}"
    );
}

/// A node whose policy names a tenant no certificate can carry, whose QUIC port or whose
/// metrics port another process holds, or (in a cluster) whose advertised address clients
/// cannot use, a wildcard or a host its certificate does not name, says so in one line before
/// it starts its backend (and before it looks for NATS, here a port nothing serves).
#[test]
fn a_node_that_cannot_serve_says_why_before_its_backend_starts() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let c = certs.to_str().unwrap();
    assert!(tasklet(&["certs", "init", c], b"").status.success());
    let store = dir.path().join("store");
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "[tenants.\"Bob Smith\"]\nmax-leases = 1\n").unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let held_udp = udp.local_addr().unwrap().to_string();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let held_tcp = tcp.local_addr().unwrap().to_string();
    let free = "127.0.0.1:0";
    let base = ["node", "--certs", c, "--store", store.to_str().unwrap()];
    let nats = ["--nats", "nats://127.0.0.1:9", "--name", "n1"];
    let cases: [(Vec<&str>, &str); 6] = [
        (
            vec!["--listen", free, "--policy", policy.to_str().unwrap()],
            "error: the node's policy names tenant \"Bob Smith\"",
        ),
        (vec!["--listen", &held_udp], "another process holds port"),
        (
            vec!["--listen", free, "--metrics", &held_tcp],
            "another process holds port",
        ),
        (
            [&["--listen", "0.0.0.0:0"][..], &nats].concat(),
            "which clients cannot connect to: give the address they reach it at (`tasklet node --advertise HOST:PORT`",
        ),
        (
            [&["--listen", free, "--advertise", "127.0.0.2:5701"][..], &nats].concat(),
            "its certificate is not valid for 127.0.0.2 (it names localhost, 127.0.0.1, ::1), so clients would refuse it: issue it again with that name, `tasklet certs node CERTS --name 127.0.0.2`",
        ),
        (
            [&["--listen", free, "--advertise", "gpu1.example:5701"][..], &nats].concat(),
            "not valid for gpu1.example",
        ),
    ];
    for (args, said) in cases {
        let mut all = base.to_vec();
        all.extend(args.iter().copied());
        let out = tasklet(&all, b"");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{all:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{all:?}: before its backend: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(said),
            "{all:?}: {err}"
        );
    }
    drop((udp, tcp));
}

#[test]
fn check_validates_and_shows_the_grant() {
    let out = tasklet(&["check", "tasklets/vector-add"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("manifest ok") && stdout.contains("launch"),
        "{stdout}"
    );
}

#[test]
fn check_names_the_bad_key_and_line() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let dir = scratch.path();
    std::fs::write(
        dir.join("tasklet.toml"),
        "name = \"x\"\ncomponent = \"x.wasm\"\n[gpu]\nmax-vram = \"1 lightyear\"\n",
    )
    .unwrap();
    let out = tasklet(&["check", dir.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("tasklet.toml:4") && stderr.contains("max-vram"),
        "{stderr}"
    );
}

#[test]
fn inventory_lists_the_emulated_device_as_json() {
    let out = tasklet(&["inventory", "--json", "--backend", "emu"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with('[') && stdout.contains("\"backend\":\"emu\""),
        "{stdout}"
    );
}

#[test]
fn cuda_backend_fails_clearly_when_unavailable() {
    let out = tasklet(&["inventory", "--backend", "cuda"], b"");
    if out.status.success() {
        eprintln!("a CUDA device is usable here; nothing to check");
        return;
    }
    assert!(
        text(&out.stderr).to_lowercase().contains("cuda"),
        "{}",
        text(&out.stderr)
    );
}

/// The figures of a `stats: key=value …` line, by key (seconds without their `s`); words
/// (`compiled-cache=hit`) are left out.
fn stats_of(stderr: &str) -> std::collections::HashMap<String, f64> {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("stats: "))
        .unwrap_or_else(|| panic!("no stats line in {stderr}"));
    line["stats: ".len()..]
        .split(' ')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("{line}"));
            let v = v.trim_end_matches('s').parse().ok()?;
            Some((k.to_owned(), v))
        })
        .collect()
}

#[test]
fn run_stats_reports_gpu_time_launches_bytes_and_peak_memory() {
    let out = tasklet(
        &["run", "--stats", "tasklets/iota", "--backend", "emu"],
        b"4096",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 4096);
    let s = stats_of(&text(&out.stderr));
    assert!(s["gpu-time"] > 0.0, "{s:?}");
    assert!(s["gpu-time"] <= s["wall-time"], "{s:?}");
    assert_eq!(s["launches"], 1.0, "{s:?}");
    assert_eq!(s["bytes-read"], 4.0 * 4096.0, "{s:?}");
    assert_eq!(s["bytes-written"], 0.0, "{s:?}");
    assert_eq!(s["peak-vram"], 4.0 * 4096.0, "{s:?}");
    // Without --stats, no such line.
    let out = tasklet(&["run", "tasklets/iota", "--backend", "emu"], b"3");
    assert!(
        !text(&out.stderr).contains("stats:"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_actor_example_serves_its_messages_through_a_persistent_kernel() {
    let out = tasklet(&["run", "tasklets/actor", "--backend", "emu"], b"500");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("served 500 messages")
            && stdout.contains("the kernel counted 500 messages, 0 errors")
            && stdout.contains("the kernel returned when asked"),
        "{stdout}"
    );
}

/// A persistent kernel is charged its GPU time as it runs, and the `gpu-seconds` quota stops it
/// even while the tasklet only sends and receives messages (no launch, no sync).
#[test]
fn a_persistent_kernel_is_stopped_when_the_gpu_seconds_run_out() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let dir = scratch.path();
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, "[tasklets]\ngpu-seconds = 1\n").unwrap();
    let started = std::time::Instant::now();
    let out = tasklet(
        &[
            "run",
            "tasklets/actor",
            "--backend",
            "emu",
            "--policy",
            policy.to_str().unwrap(),
        ],
        b"100000000",
    );
    let took = started.elapsed();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("quota-exceeded") && stderr.contains("gpu-seconds"),
        "{stderr}"
    );
    // Well before the tasklet's 30 s wall time, which would otherwise end it.
    assert!(took < std::time::Duration::from_secs(20), "took {took:?}");
}

/// Output that cannot be written (stdout a full device, a closed pipe) is one `error:` line and
/// exit 2, never a panic, for every command that prints a report.
#[test]
fn output_that_cannot_be_written_is_an_error_line_not_a_panic() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        crate::support::say_skipped("no /dev/full on this machine");
        return;
    };
    for args in [
        &["check", "tasklets/iota"][..],
        &["inventory"][..],
        &["inventory", "--json"][..],
        &["ptx", "check", "kernels/iota.ptx"][..],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tasklet"))
            .args(args)
            .current_dir(crate::support::repo())
            .stdout(full.try_clone().unwrap())
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert!(
            errors.len() == 1 && errors[0].starts_with("error: cannot write output:"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Output whose reader went away before it was written (`tasklet inventory | head -0`): no
/// error line, and the status of a program that SIGPIPE ended (141), for every command that
/// prints.
#[test]
fn output_whose_reader_went_away_ends_quietly_with_141() {
    for (args, stdin) in [
        (&["check", "tasklets/iota"][..], &b""[..]),
        (&["inventory", "--json"][..], &b""[..]),
        (&["ptx", "check", "kernels/iota.ptx"][..], &b""[..]),
        (
            &["run", "--stats", "--backend", "emu", "tasklets/iota"][..],
            &b"3"[..],
        ),
    ] {
        // A pipe whose reading end is closed before the command starts: its first write fails.
        let mut ends = [0; 2];
        // SAFETY: pipe(2) into a two-element array; both ends are ours to close.
        assert_eq!(unsafe { libc::pipe(ends.as_mut_ptr()) }, 0);
        // SAFETY: the reading end, closed once, never used again.
        unsafe { libc::close(ends[0]) };
        // SAFETY: the writing end, owned from here on by the `File` (closed when it drops).
        let write_end = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(ends[1]) };
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tasklet"))
            .args(args)
            .current_dir(crate::support::repo())
            .stdin(std::process::Stdio::piped())
            .stdout(write_end)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write as _;
            let _ = child.stdin.take().unwrap().write_all(stdin);
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {err}");
        assert!(
            !err.contains("error:") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
        // What goes to stderr is still said.
        if args.contains(&"--stats") {
            assert!(err.contains("stats: gpu-time="), "{args:?}: {err}");
        }
    }
}

/// Under `--json` an argument the command does not take is a JSON error on stdout too; an
/// option that would do nothing with `--node` is refused, saying why, before anything connects.
#[test]
fn argument_errors_are_json_under_json_and_options_unused_with_a_node_are_refused() {
    let out = tasklet(&["inventory", "--json", "--bogus"], b"");
    assert_eq!(out.status.code(), Some(2));
    let value: serde_json::Value = serde_json::from_str(text(&out.stdout).trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)));
    assert!(
        value["error"]
            .as_str()
            .unwrap_or_default()
            .contains("--bogus"),
        "{value}"
    );
    // A missing argument is named in the JSON too, not only in the lines under it on stderr.
    let out = tasklet(&["deploy", "run", "--json"], b"");
    assert_eq!(out.status.code(), Some(2));
    let value: serde_json::Value = serde_json::from_str(text(&out.stdout).trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)));
    let said = value["error"].as_str().unwrap_or_default();
    assert!(
        said.contains("not provided")
            && said.contains("<TASKLET|DIGEST>")
            && !said.contains("Usage"),
        "{value}"
    );
    // Nothing listens at this address: the refusal comes before any connection is tried.
    for args in [
        &["inventory", "--node", "127.0.0.1:9", "--backend", "emu"][..],
        &[
            "inventory",
            "--node",
            "127.0.0.1:9",
            "--policy",
            "nothing.toml",
        ][..],
        &[
            "run",
            "--node",
            "127.0.0.1:9",
            "--backend",
            "emu",
            "tasklets/iota",
        ][..],
    ] {
        let out = tasklet(args, b"3");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("leave it out"), "{args:?}: {err}");
    }
    let help = tasklet(&["--version"], b"");
    assert!(help.status.success() && text(&help.stdout).starts_with("tasklet "));
}
