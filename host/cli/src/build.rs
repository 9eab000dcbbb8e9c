//! Building a tasklet's component with cargo when it is missing or older than its sources, and
//! saying how to build one that cargo does not (a tasklet in Python or JavaScript).

use anyhow::{bail, Context, Result};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;
use tasklet_runtime::config::MANIFEST_FILE;

pub const WASM_TARGET: &str = "wasm32-wasip2";

/// Why a component needs building, if it does: it is missing, a file in its folder is newer,
/// or a file its last build read from elsewhere (a kernel `include_str!`ed from `kernels/`, a
/// crate of the workspace) is, as cargo's dependency file beside it lists them.
pub fn staleness(dir: &Path, component: &Path) -> Option<String> {
    let Ok(built) = component.metadata().and_then(|m| m.modified()) else {
        return Some("its component is missing".into());
    };
    if newest_source(dir).is_some_and(|newest| newest > built) {
        return Some("its sources are newer than its component".into());
    }
    let changed = built_from(component).into_iter().find(|file| {
        file.metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|m| m > built)
    })?;
    Some(format!(
        "{} changed since its last build",
        changed.display()
    ))
}

/// The files cargo's dependency file (`NAME.d` beside `NAME.wasm`) says the component was built
/// from; none where there is no such file.
fn built_from(component: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(component.with_extension("d")) else {
        return Vec::new();
    };
    // `target: dep dep …`, a space inside a path escaped as `\ `; the first line names the
    // component itself.
    let Some((_, deps)) = text.lines().next().and_then(|line| line.split_once(": ")) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    let mut current = String::new();
    let mut chars = deps.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => {
                current.push(' ');
                chars.next();
            }
            ' ' => {
                if !current.is_empty() {
                    files.push(PathBuf::from(std::mem::take(&mut current)));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        files.push(PathBuf::from(current));
    }
    files
}

/// The target folder a component lies in (`…/target` of `…/target/wasm32-wasip2/release/x.wasm`),
/// which the build is told, so that a `CARGO_TARGET_DIR` of the caller's does not send the new
/// component elsewhere.
fn target_dir_of(component: &Path) -> Option<&Path> {
    let release = component.parent()?;
    let target = release.parent()?;
    (release.file_name()? == "release" && target.file_name()? == WASM_TARGET)
        .then(|| target.parent())
        .flatten()
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

/// Builds the tasklet crate in `dir` for wasm32-wasip2 (release) into the target folder where
/// its manifest expects `component`, installing the target first if rustup lacks it.
pub fn build(dir: &Path, component: &Path) -> Result<()> {
    ensure_target()?;
    let mut cargo = Command::new(cargo());
    cargo
        .args(["build", "--release", "--target", WASM_TARGET])
        .current_dir(dir);
    if let Some(target) = target_dir_of(component) {
        // A relative `component` is relative to this process's folder, and cargo runs in `dir`:
        // the folder is made absolute here, or the build would land a second `dir` deep.
        let target = std::path::absolute(target)
            .with_context(|| format!("cannot resolve {}", target.display()))?;
        cargo.arg("--target-dir").arg(target);
    }
    // What cargo made is read from its messages (stdout); its progress and diagnostics still go
    // to stderr as people read them.
    cargo
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped());
    let started = SystemTime::now();
    let mut child = cargo
        .spawn()
        .context("cannot run cargo to build the tasklet")?;
    let mut messages = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut messages);
    }
    let status = child
        .wait()
        .context("cannot run cargo to build the tasklet")?;
    if !status.success() {
        bail!(
            "cargo could not build the tasklet in {} ({status})",
            dir.display()
        );
    }
    // Cargo leaves a component its sources do not need rebuilt as it was: one older than a
    // file of the folder it does not build from (the manifest, a README, an input) would be
    // built again on every run. Cargo has judged everything as of the build's start: the
    // component counts from then (a file saved during the build is still newer). Only a
    // component cargo says it made: one it does not make stays stale, and says so each run.
    if staleness(dir, component).is_some() && made(&messages, component) {
        let _ = std::fs::File::options()
            .write(true)
            .open(component)
            .and_then(|file| file.set_modified(started));
    }
    Ok(())
}

/// Whether cargo's JSON `messages` name `component` among the files a build made (fresh or
/// not).
fn made(messages: &str, component: &Path) -> bool {
    let Ok(component) = component.canonicalize() else {
        return false;
    };
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .filter_map(|message| message["filenames"].as_array().cloned())
        .flatten()
        .filter_map(|name| name.as_str().map(PathBuf::from))
        .any(|name| name.canonicalize().is_ok_and(|name| name == component))
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
    errln!("tasklet: installing the {WASM_TARGET} target with rustup (once)");
    let status = Command::new("rustup")
        .args(["target", "add", WASM_TARGET])
        .status()
        .context("cannot run rustup; install the target with `rustup target add wasm32-wasip2`")?;
    if !status.success() {
        bail!("`rustup target add {WASM_TARGET}` failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dependency_file_names_what_the_component_was_built_from() {
        let dir = tempfile::tempdir().unwrap();
        let component = dir.path().join("iota.wasm");
        std::fs::write(
            dir.path().join("iota.d"),
            "/t/iota.wasm: /r/tasklets/iota/src/lib.rs /r/kernels/iota.ptx /r/a\\ b.rs\n\n/r/x.rs:\n",
        )
        .unwrap();
        assert_eq!(
            built_from(&component),
            [
                PathBuf::from("/r/tasklets/iota/src/lib.rs"),
                PathBuf::from("/r/kernels/iota.ptx"),
                PathBuf::from("/r/a b.rs"),
            ]
        );
        assert!(built_from(&dir.path().join("none.wasm")).is_empty());
    }

    #[test]
    fn a_file_built_from_elsewhere_that_changed_makes_the_component_stale() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("tasklet");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("lib.rs"), "").unwrap();
        let kernel = dir.path().join("kernel.ptx");
        std::fs::write(&kernel, "old").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let component = dir.path().join("t.wasm");
        std::fs::write(&component, "wasm").unwrap();
        std::fs::write(
            dir.path().join("t.d"),
            format!("{}: {}\n", component.display(), kernel.display()),
        )
        .unwrap();
        assert_eq!(staleness(&folder, &component), None);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&kernel, "new").unwrap();
        let why = staleness(&folder, &component).expect("stale");
        assert!(why.contains("kernel.ptx"), "{why}");
    }

    #[test]
    fn the_target_folder_is_the_one_the_component_lies_in() {
        assert_eq!(
            target_dir_of(Path::new(
                "/r/tasklets/target/wasm32-wasip2/release/iota.wasm"
            )),
            Some(Path::new("/r/tasklets/target"))
        );
        assert_eq!(target_dir_of(Path::new("/r/built/iota.wasm")), None);
    }
}
