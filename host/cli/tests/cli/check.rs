//! `tasklet check` on a component that is missing, unreadable or not a component: it says so and
//! fails, rather than calling the tasklet ok.

use std::path::Path;
use std::process::{Command, Output};

const MANIFEST: &str = "name = \"t\"\ncomponent = \"t.wasm\"\n";

fn check(dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tasklet"))
        .args(["check", dir.to_str().expect("a UTF-8 temp path")])
        .output()
        .expect("tasklet starts")
}

/// `tasklet check` of a tasklet folder whose manifest names `t.wasm`, after `setup` made it.
fn check_with(setup: impl FnOnce(&Path)) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("tasklet.toml"), MANIFEST).expect("manifest");
    setup(&dir.path().join("t.wasm"));
    let out = check(dir.path());
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[track_caller]
fn assert_refused(found: (Option<i32>, String, String), says: &str) {
    let (code, stdout, stderr) = found;
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("t: manifest ok, component not usable"),
        "{stdout}"
    );
    assert!(
        stdout.contains(says) && stderr.contains(says),
        "{says:?} not in:\n{stdout}{stderr}"
    );
}

#[test]
fn a_missing_component_is_reported_and_fails() {
    assert_refused(check_with(|_| {}), "missing: build it");
}

#[test]
fn an_unreadable_component_is_reported_and_fails() {
    // `t.wasm/` under a file: opening it fails with other than "not found".
    let dir = tempfile::tempdir().expect("temp dir");
    let manifest = MANIFEST.replace("t.wasm", "file/t.wasm");
    std::fs::write(dir.path().join("tasklet.toml"), manifest).expect("manifest");
    std::fs::write(dir.path().join("file"), b"").expect("file");
    let out = check(dir.path());
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("t: manifest ok, component not usable")
            && stderr.contains("unreadable: "),
        "{stdout}{stderr}"
    );
}

#[test]
fn a_folder_in_place_of_the_component_is_reported_and_fails() {
    assert_refused(
        check_with(|path| std::fs::create_dir(path).expect("folder")),
        "not usable: it is a folder",
    );
}

#[test]
fn what_is_not_a_component_is_reported_and_fails() {
    let cases: [(&[u8], &str); 3] = [
        (
            b"\0asm\x01\0\0\0",
            "a core WebAssembly module, not a component",
        ),
        (b"#!/bin/sh\necho hi\n", "not WebAssembly"),
        (b"\0as", "shorter than a WebAssembly preamble"),
    ];
    for (bytes, says) in cases {
        assert_refused(
            check_with(|path| std::fs::write(path, bytes).expect("file")),
            says,
        );
    }
}

#[test]
fn a_component_is_ok() {
    // The preamble is what check reads; the rest need not compile for it.
    let (code, stdout, stderr) = check_with(|path| {
        std::fs::write(path, b"\0asm\x0d\0\x01\0").expect("file");
    });
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("t: manifest ok, component ok")
            && stdout.contains("a WebAssembly component of 8 bytes"),
        "{stdout}"
    );
}

/// `tasklet run` of the same files says what `check` says, in one line, and exits 2 (the run
/// could not start): not the wasm parser's account of the bytes it expected.
#[test]
fn run_refuses_what_is_not_a_component_in_one_line() {
    let cases: [(&[u8], &str); 3] = [
        (
            b"\0asm\x01\0\0\0",
            "a core WebAssembly module, not a component: build the tasklet for wasm32-wasip2",
        ),
        (
            b"root:x:0:0:root:/root:/bin/bash\n",
            "not WebAssembly (no `\\0asm` at its start)",
        ),
        (b"\0as", "shorter than a WebAssembly preamble"),
    ];
    for (bytes, says) in cases {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("tasklet.toml"), MANIFEST).expect("manifest");
        std::fs::write(dir.path().join("t.wasm"), bytes).expect("file");
        let out = Command::new(env!("CARGO_BIN_EXE_tasklet"))
            .args(["run", "--compile-cache", "off", "--backend", "emu"])
            .arg(dir.path())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("tasklet starts");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let error: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(error.len(), 1, "{stderr}");
        assert!(
            error[0].starts_with("error: cannot ") && error[0].ends_with(says),
            "{says:?} not in:\n{stderr}"
        );
    }
}

/// A policy naming a tenant no certificate can carry is refused by `check` as `tasklet node`
/// refuses it at start: exit 2, one line naming the tenant.
#[test]
fn check_refuses_a_policy_tenant_no_certificate_can_carry() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("tasklet.toml"), MANIFEST).expect("manifest");
    std::fs::write(dir.path().join("t.wasm"), b"\0asm\x0d\0\x01\0").expect("file");
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "[tenants.Dev]\nmax-vram = \"1GiB\"\n").expect("policy");
    let out = Command::new(env!("CARGO_BIN_EXE_tasklet"))
        .args(["check"])
        .arg(dir.path())
        .arg("--policy")
        .arg(&policy)
        .output()
        .expect("tasklet starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("names tenant \"Dev\", which no certificate can carry"),
        "{stderr}"
    );
}
