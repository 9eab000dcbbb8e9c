//! Builds the tasklets (examples and test tasklets) for wasm32-wasip2 as part of the test build, so
//! that `cargo test` alone tests the real components.

use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("..");
    for watched in ["tasklets", "guest-sdk", "wit", "kernels"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
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
