//! Tasklets written in other languages than Rust: the Python examples (`tasklets/python-*`,
//! built with componentize-py over `guest-sdk/python`) and the JavaScript ones (`tasklets/js-*`,
//! built with componentize-js over `guest-sdk/js`), run through the same host as the Rust
//! examples, and their outputs and errors compared with the Rust examples' on the same inputs.
//!
//! The examples are built by `tasklet_tests::guest_build` (where the tools come from, and
//! `TASKLET_GUEST_PREBUILT=1`, the GPU suite's way on a machine without them); without a tool,
//! its tests print `skipped: componentize-py not found` (or `componentize-js`) and return.

use std::io::Write as _;
use std::process::Command;
use std::time::Instant;

use tasklet_runtime::{Host, RunError, Tasklet};
use tasklet_tests::guest_build::{self, Built, Tool, COMPONENTIZE_JS, COMPONENTIZE_PY};
use tasklet_tests::{assert_baseline, load, manifest, repo, run_ok, test_host};

/// Builds the tasklet `name` with `tool` (nothing to do when it is up to date, or prebuilt) and
/// loads it; `None` (having said why) when the tool is not found.
fn build_and_load(host: &Host, tool: &Tool, name: &str) -> Option<Tasklet> {
    let built = match guest_build::build(tool, name) {
        Ok(built) => built,
        Err(skip) => {
            // Past the harness's capture, on a line of its own (the harness has printed "test
            // name ... " without a newline).
            let _ = writeln!(std::io::stderr(), "\n{skip}");
            return None;
        }
    };
    let started = Instant::now();
    let tasklet = load(host, manifest(name));
    let how = match built {
        Built::Built(took) => format!("built in {took:?} (or up to date)"),
        Built::Prebuilt => "prebuilt".to_owned(),
    };
    eprintln!(
        "[guest-languages] {name}: {how}, compiled in {:?}",
        started.elapsed()
    );
    Some(tasklet)
}

/// The error a run ended with, which must be the tasklet's own (`RunError::Failed`).
fn failure(host: &Host, tasklet: &Tasklet, input: &str) -> String {
    match host.run(tasklet, input.as_bytes()) {
        Err(RunError::Failed(message)) => message,
        other => panic!("expected the tasklet to fail on {input:?}, got {other:?}"),
    }
}

/// `guest` (a port of tasklets/vector-add) against the Rust example: the same outputs, and the
/// same errors, the SDK's own (input that does not parse) and a `gpu-error` case raised as an
/// exception (a lease past the manifest's max-vram).
fn vector_add_matches_the_rust_example(tool: &Tool, guest: &str) {
    let host = test_host!();
    let Some(guest) = build_and_load(&host, tool, guest) else {
        return;
    };
    let rust = load(&host, manifest("vector-add"));
    for input in ["", "0", "1", "1000", "100000"] {
        let expected = run_ok(&host, &rust, input);
        assert_eq!(run_ok(&host, &guest, input), expected, "input {input:?}");
    }
    for input in ["twelve", "100000000"] {
        let expected = failure(&host, &rust, input);
        assert_eq!(failure(&host, &guest, input), expected, "input {input:?}");
    }
    let quota = failure(&host, &guest, "100000000");
    assert!(quota.starts_with("quota-exceeded: "), "{quota}");
    assert_baseline(&host);
}

/// `guest` (a port of tasklets/iota as one `GpuCall`) against the Rust example.
fn iota_matches_the_rust_example(tool: &Tool, guest: &str) {
    let host = test_host!();
    let Some(guest) = build_and_load(&host, tool, guest) else {
        return;
    };
    let rust = load(&host, manifest("iota"));
    for input in ["", "0", "1", "37", "5000"] {
        let expected = run_ok(&host, &rust, input);
        assert_eq!(run_ok(&host, &guest, input), expected, "input {input:?}");
    }
    let expected = failure(&host, &rust, "-3");
    assert_eq!(failure(&host, &guest, "-3"), expected);
    assert_baseline(&host);
}

/// `guest` (a port of tasklets/jacobi) against the Rust example: the sweeps as a graph replayed
/// with device scalars set between replays, as bursts whose launches change two buffers and a
/// buffer offset each (more sweeps than one burst holds, so two bursts), and as launches on a
/// stream that waits for an event recorded on another after a write, print the Rust example's
/// output byte for byte; and its own errors are the Rust example's.
fn jacobi_matches_the_rust_example(tool: &Tool, guest: &str) {
    let host = test_host!();
    let Some(guest) = build_and_load(&host, tool, guest) else {
        return;
    };
    let rust = load(&host, manifest("jacobi"));
    for input in ["", "3 0", "3 2", "33 64"] {
        let expected = run_ok(&host, &rust, input);
        // An empty input is the defaults, 64 100 as a graph.
        let sweeps = if input.is_empty() { "64 100" } else { input };
        let mut guest_inputs = vec![input.to_owned()];
        guest_inputs.extend(["graph", "burst", "stream"].map(|how| format!("{sweeps} {how}")));
        for guest_input in guest_inputs {
            assert_eq!(
                run_ok(&host, &guest, &guest_input),
                expected,
                "input {guest_input:?}"
            );
        }
    }
    // More sweeps than one burst holds: two bursts (the emulator takes seconds for these, so
    // bursts only; the graph's replays are the same as above).
    let expected = run_ok(&host, &rust, "9 4098");
    let out = run_ok(&host, &guest, "9 4098 burst");
    assert_eq!(out, expected, "input \"9 4098 burst\"");
    // Not vacuous: heat reached the midpoint, and the second burst's sweeps ran.
    let history = out.lines().next().unwrap_or_default();
    assert_eq!(history.split(' ').count(), 1 + 4098, "{history}");
    assert!(!history.ends_with(" 0.0"), "{history}");
    for input in ["64 3", "2 2", "x", "64 8194"] {
        let expected = failure(&host, &rust, input);
        assert_eq!(failure(&host, &guest, input), expected, "input {input:?}");
    }
    assert_eq!(
        failure(&host, &guest, "8 2 streams"),
        "the third word says how: graph, burst or stream, not \"streams\""
    );
    assert_baseline(&host);
}

/// `guest` (a port of tasklets/actor) against the Rust example: a persistent kernel started once
/// with two rings and its control block serves every message (more than a ring's 256 slots, so the
/// rings wrap), is stopped, and the output is the Rust example's byte for byte; so are its errors.
fn actor_matches_the_rust_example(tool: &Tool, guest: &str) {
    let host = test_host!();
    let Some(guest) = build_and_load(&host, tool, guest) else {
        return;
    };
    let rust = load(&host, manifest("actor"));
    for input in ["1", "300", ""] {
        let expected = run_ok(&host, &rust, input);
        // Not vacuous: every answer came back right and the kernel returned when asked.
        assert!(expected.starts_with("served "), "{expected}");
        assert!(expected.ends_with("returned when asked\n"), "{expected}");
        assert_eq!(run_ok(&host, &guest, input), expected, "input {input:?}");
    }
    for input in ["many", "-3"] {
        let expected = failure(&host, &rust, input);
        assert_eq!(failure(&host, &guest, input), expected, "input {input:?}");
    }
    assert_baseline(&host);
}

#[test]
fn python_actor_serves_messages_through_rings_as_the_rust_example_does() {
    actor_matches_the_rust_example(&COMPONENTIZE_PY, "python-actor");
}

#[test]
fn js_actor_serves_messages_through_rings_as_the_rust_example_does() {
    actor_matches_the_rust_example(&COMPONENTIZE_JS, "js-actor");
}

#[test]
fn python_jacobi_as_a_graph_bursts_and_a_stream_matches_the_rust_example() {
    jacobi_matches_the_rust_example(&COMPONENTIZE_PY, "python-jacobi");
}

#[test]
fn js_jacobi_as_a_graph_bursts_and_a_stream_matches_the_rust_example() {
    jacobi_matches_the_rust_example(&COMPONENTIZE_JS, "js-jacobi");
}

#[test]
fn python_vector_add_matches_the_rust_example() {
    vector_add_matches_the_rust_example(&COMPONENTIZE_PY, "python-vector-add");
}

#[test]
fn python_iota_as_one_gpu_call_matches_the_rust_example() {
    iota_matches_the_rust_example(&COMPONENTIZE_PY, "python-iota");
}

#[test]
fn js_vector_add_matches_the_rust_example() {
    vector_add_matches_the_rust_example(&COMPONENTIZE_JS, "js-vector-add");
}

#[test]
fn js_iota_as_one_gpu_call_matches_the_rust_example() {
    iota_matches_the_rust_example(&COMPONENTIZE_JS, "js-iota");
}

/// The Python SDK's own logic (guest-sdk/python/tests) under the host's CPython, against the
/// bindings componentize-py generates: no component is built.
#[test]
fn python_sdk_unit_tests_pass() {
    let Some(tool) = COMPONENTIZE_PY.find() else {
        let _ = writeln!(
            std::io::stderr(),
            "\nskipped: componentize-py not found (scripts/install-componentize-py.sh installs it): the Python SDK's unit tests"
        );
        return;
    };
    // The generated bindings use `typing.Self`.
    let python_ok = Command::new("python3")
        .args(["-c", "import sys; sys.exit(sys.version_info < (3, 11))"])
        .status()
        .is_ok_and(|s| s.success());
    if !python_ok {
        let _ = writeln!(
            std::io::stderr(),
            "\nskipped: python3 3.11 or later not found: the Python SDK's unit tests"
        );
        return;
    }
    let bindings = std::env::temp_dir().join(format!("tasklet-py-bindings-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&bindings);
    let status = Command::new(&tool)
        .args([
            "-d",
            repo().join("wit").to_str().unwrap(),
            "-w",
            "tasklet",
            "bindings",
        ])
        .arg(&bindings)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tool.display()));
    assert!(
        status.success(),
        "componentize-py bindings failed ({status})"
    );
    let sdk = repo().join("guest-sdk/python");
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s"])
        .arg(sdk.join("tests"))
        .env(
            "PYTHONPATH",
            format!("{}:{}", bindings.display(), sdk.display()),
        )
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs");
    let _ = std::fs::remove_dir_all(&bindings);
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("OK"), "{report}");
}

/// The JavaScript SDK's own logic (guest-sdk/js/tests: bursts, graphs, streams, rings and actors
/// against fake sessions) under the host's Node.js, which componentize-js needs anyway; no
/// component is built.
#[test]
fn js_sdk_unit_tests_pass() {
    let node_ok = Command::new("node")
        .args([
            "-e",
            "process.exit(Number(process.versions.node.split('.')[0]) < 18 ? 1 : 0)",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !node_ok {
        let _ = writeln!(
            std::io::stderr(),
            "\nskipped: node 18 or later not found: the JavaScript SDK's unit tests"
        );
        return;
    }
    let out = Command::new("node")
        .arg("--test")
        .arg(repo().join("guest-sdk/js/tests/sdk.test.mjs"))
        .output()
        .expect("node runs");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("# fail 0"), "{report}");
    assert!(!report.contains("# pass 0"), "{report}");
}
