//! Building a tasklet's component with cargo when it is missing or older than its sources.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

pub const WASM_TARGET: &str = "wasm32-wasip2";

/// Why a component needs building, if it does.
pub fn staleness(dir: &Path, component: &Path) -> Option<&'static str> {
    let Ok(built) = component.metadata().and_then(|m| m.modified()) else {
        return Some("its component is missing");
    };
    match newest_source(dir) {
        Some(newest) if newest > built => Some("its sources are newer than its component"),
        _ => None,
    }
}

fn newest_source(dir: &Path) -> Option<SystemTime> {
    let mut newest = None;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if name == "target" || name.to_string_lossy().starts_with('.') {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(modified) = entry.metadata().and_then(|m| m.modified()) {
                newest = newest.max(Some(modified));
            }
        }
    }
    newest
}

/// Builds the tasklet crate in `dir` for wasm32-wasip2 (release), installing the target first if
/// rustup lacks it.
pub fn build(dir: &Path) -> Result<()> {
    ensure_target()?;
    let status = Command::new(cargo())
        .args(["build", "--release", "--target", WASM_TARGET])
        .current_dir(dir)
        .status()
        .context("cannot run cargo to build the tasklet")?;
    if !status.success() {
        bail!(
            "cargo could not build the tasklet in {} ({status})",
            dir.display()
        );
    }
    Ok(())
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// Adds the wasm32-wasip2 target through rustup when the toolchain lacks it.
pub fn ensure_target() -> Result<()> {
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .context("cannot run rustc")?;
    let sysroot = String::from_utf8_lossy(&sysroot.stdout).trim().to_string();
    if Path::new(&sysroot)
        .join("lib/rustlib")
        .join(WASM_TARGET)
        .exists()
    {
        return Ok(());
    }
    eprintln!("tasklet: installing the {WASM_TARGET} target with rustup (once)");
    let status = Command::new("rustup")
        .args(["target", "add", WASM_TARGET])
        .status()
        .context("cannot run rustup; install the target with `rustup target add wasm32-wasip2`")?;
    if !status.success() {
        bail!("`rustup target add {WASM_TARGET}` failed");
    }
    Ok(())
}
