//! Builds the tasklets (examples and test tasklets) for wasm32-wasip2 as part of the test build, so
//! that `cargo test` alone tests the real components.

use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("..");
    for watched in ["wit", "kernels"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    for guests in ["tasklets", "guest-sdk"] {
        watch_sources(&root.join(guests));
    }
    ensure_target();
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .args(["build", "--release", "--target", TARGET])
        .current_dir(root.join("tasklets"));
    // The outer build's settings (flags, target dir, profile) are not the guests'.
    for (key, _) in std::env::vars() {
        if key.starts_with("CARGO_") && key != "CARGO_HOME" && key != "CARGO_MAKEFLAGS"
            || key == "RUSTFLAGS"
        {
            cargo.env_remove(key);
        }
    }
    let status = cargo
        .status()
        .expect("cannot run cargo to build the test tasklets");
    assert!(
        status.success(),
        "building the tasklets for {TARGET} failed"
    );
}

/// Watches everything in `dir` but its `target` folder: the build below writes there, and a
/// watched output would rerun this script (and rebuild every test of the package) on every build.
fn watch_sources(dir: &Path) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .path();
        if path.file_name().is_some_and(|name| name != "target") {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

fn ensure_target() {
    let sysroot = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["--print", "sysroot"])
        .output()
        .expect("cannot run rustc");
    let sysroot = String::from_utf8_lossy(&sysroot.stdout).trim().to_string();
    if Path::new(&sysroot)
        .join("lib/rustlib")
        .join(TARGET)
        .exists()
    {
        return;
    }
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "the {TARGET} target is missing and `rustup target add {TARGET}` failed"
    );
}
