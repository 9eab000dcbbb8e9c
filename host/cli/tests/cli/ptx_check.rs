//! `tasklet ptx check`: validates PTX files and lists their kernels' parameters.

use std::process::{Command, Output};

use crate::support::{repo, text};

fn tasklet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tasklet"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("tasklet starts")
}

fn corpus() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(repo().join("kernels"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ptx"))
        .map(|n| format!("kernels/{n}"))
        .collect();
    v.sort();
    v.push("kernels/nvrtc12/scan.ptx".into());
    v
}

#[test]
fn every_corpus_file_checks_and_lists_its_kernels() {
    let files = corpus();
    assert!(files.len() >= 15);
    let args: Vec<&str> = ["ptx", "check"]
        .into_iter()
        .chain(files.iter().map(|s| s.as_str()))
        .collect();
    let out = tasklet(&args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}\n{}", stdout, text(&out.stderr));
    for f in &files {
        assert!(
            stdout.contains(&format!("{f}: ok, ")),
            "{f} missing from:\n{stdout}"
        );
    }
    // Signatures with declared types and sizes, and the argument block size.
    assert!(
        stdout.contains("  iota(iota_param_0: .u64 (8 B), iota_param_1: .u32 (4 B))  args 12 B"),
        "{stdout}"
    );
    assert!(stdout.contains("kernels/vector_add.ptx: ok, "), "{stdout}");
}

#[test]
fn a_broken_file_fails_naming_file_and_line() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let dir = scratch.path();
    let bad = dir.join("bad.ptx");
    std::fs::write(
        &bad,
        ".version 9.0\n.target sm_80\n.address_size 64\n\n.visible .entry k(.param .u64 p)\n{\n\tfrobnicate.u32 %r1;\n\tret;\n}\n",
    )
    .unwrap();
    let bad_s = bad.to_str().unwrap();
    let out = tasklet(&[
        "ptx",
        "check",
        "kernels/iota.ptx",
        bad_s,
        "kernels/does-not-exist.ptx",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stdout.contains("kernels/iota.ptx: ok"), "{stdout}");
    assert!(stderr.contains(&format!("{bad_s}:7: ")), "{stderr}");
    assert!(stderr.contains("frobnicate"), "{stderr}");
    assert!(stderr.contains("kernels/does-not-exist.ptx: "), "{stderr}");
    assert!(stderr.contains("2 of 3 files failed"), "{stderr}");
}

#[test]
fn no_files_is_a_usage_error() {
    let out = tasklet(&["ptx", "check"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("FILE"), "{}", text(&out.stderr));
}
