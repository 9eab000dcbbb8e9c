//! Building a tasklet's component with cargo when it is missing or older than its sources, and
//! saying how to build one that cargo does not (a tasklet in Python or JavaScript).

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;
use std::time::SystemTime;
use tasklet_runtime::config::MANIFEST_FILE;

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

/// Whether `dir` is a Cargo project, which `tasklet run` builds itself.
pub fn is_cargo_project(dir: &Path) -> bool {
    dir.join("Cargo.toml").is_file()
}

/// Whether files in `dir` (a tasklet folder without a Cargo project) are newer than its
/// component: components and the manifest aside, which change without any source changing.
pub fn sources_newer(dir: &Path, component: &Path) -> bool {
    let Ok(built) = component.metadata().and_then(|m| m.modified()) else {
        return false;
    };
    newest_file(dir, |path| {
        path.extension().is_none_or(|e| e != "wasm")
            && path.file_name().is_none_or(|n| n != MANIFEST_FILE)
    })
    .is_some_and(|newest| newest > built)
}

/// How to build the component of the tasklet folder `dir`, which has no Cargo project, as the
/// end of a sentence: its own `build.sh` if it has one, else the tool its sources' language uses.
pub fn how_to_build(dir: &Path) -> String {
    let script = dir.join("build.sh");
    if script.is_file() {
        return format!("build it with `{}`", script.display());
    }
    let has = |ext: &str| {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == ext))
        })
    };
    if has("py") {
        "build it with componentize-py (see guest-sdk/python/README.md)".into()
    } else if has("js") {
        "build it with jco componentize (see guest-sdk/js/README.md)".into()
    } else {
        "build it first (a folder with a Cargo project is built by `tasklet run` itself)".into()
    }
}

fn newest_source(dir: &Path) -> Option<SystemTime> {
    newest_file(dir, |_| true)
}

/// The newest modification time of the files under `dir` that `counts`, `target` folders and
/// dot files aside.
fn newest_file(dir: &Path, counts: impl Fn(&Path) -> bool) -> Option<SystemTime> {
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
            } else if !counts(&path) {
                continue;
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
