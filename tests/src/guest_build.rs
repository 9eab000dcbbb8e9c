//! Building the Python and JavaScript examples (`tasklets/python-*` with componentize-py over
//! `guest-sdk/python`, `tasklets/js-*` with componentize-js over `guest-sdk/js`), for every test
//! that runs them: each example's `build.sh` with the tool found here (nothing to do when its
//! component is up to date).
//!
//! The tools come from `scripts/install-componentize-py.sh` and `scripts/install-componentize-js.sh`
//! (under target/), or `$TASKLET_COMPONENTIZE_PY` / `$TASKLET_COMPONENTIZE_JS`, or PATH. With
//! `TASKLET_GUEST_PREBUILT=1` nothing is built: the components must already be where their
//! manifests say (the GPU suite's way, on a machine without the tools).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{manifest, repo, tasklet_dir};

/// A language's build tool: how to find it, and the variable its build script takes it from.
pub struct Tool {
    /// Its command name, as a skip line says it.
    pub name: &'static str,
    /// Where `scripts/install-<name>.sh` puts it: under target/<name>/<version>/.
    installed: &'static str,
    /// The variable naming it for the tests, and for the examples' build.sh.
    test_var: &'static str,
    build_var: &'static str,
}

pub const COMPONENTIZE_PY: Tool = Tool {
    name: "componentize-py",
    installed: "componentize-py",
    test_var: "TASKLET_COMPONENTIZE_PY",
    build_var: "COMPONENTIZE_PY",
};

pub const COMPONENTIZE_JS: Tool = Tool {
    name: "componentize-js",
    installed: "node_modules/.bin/componentize-js",
    test_var: "TASKLET_COMPONENTIZE_JS",
    build_var: "COMPONENTIZE_JS",
};

/// The variable saying the examples' components are prebuilt and in place.
pub const PREBUILT_VAR: &str = "TASKLET_GUEST_PREBUILT";

impl Tool {
    /// The tool that builds example `name` (`python-*` or `js-*`), if it is one of theirs.
    pub fn for_example(name: &str) -> Option<&'static Tool> {
        if name.starts_with("python-") {
            Some(&COMPONENTIZE_PY)
        } else if name.starts_with("js-") {
            Some(&COMPONENTIZE_JS)
        } else {
            None
        }
    }

    /// The tool to build with, if there is one: `$test_var`, else the newest installed under
    /// target/, else one on PATH.
    pub fn find(&self) -> Option<PathBuf> {
        if let Some(tool) = std::env::var_os(self.test_var) {
            return Some(PathBuf::from(tool));
        }
        let installed = repo().join("target").join(self.name);
        let mut found: Vec<PathBuf> = std::fs::read_dir(installed)
            .into_iter()
            .flatten()
            .flatten()
            // An install in progress (or interrupted) is in a `.tmp` folder.
            .filter(|e| !e.file_name().to_string_lossy().ends_with(".tmp"))
            .map(|e| e.path().join(self.installed))
            .filter(|p| p.is_file())
            .collect();
        found.sort();
        if let Some(tool) = found.pop() {
            return Some(tool);
        }
        let on_path = Command::new(self.name).arg("--version").output();
        on_path
            .is_ok_and(|o| o.status.success())
            .then(|| PathBuf::from(self.name))
    }
}

/// How example `name`'s component came to be in place.
pub enum Built {
    /// Built now by its build.sh (or found up to date by it), in this long.
    Built(Duration),
    /// `TASKLET_GUEST_PREBUILT=1`: it was there already.
    Prebuilt,
}

/// Makes example `name`'s component (built with `tool`): `Err` with the line to print as the
/// test's skip when the tool is not found. Panics when its build fails, or when it should be
/// prebuilt and is not.
pub fn build(tool: &Tool, name: &str) -> Result<Built, String> {
    if std::env::var_os(PREBUILT_VAR).is_some_and(|v| v == "1") {
        let component = manifest(name).component;
        assert!(
            component.is_file(),
            "{PREBUILT_VAR}=1, yet {name}'s component {} is not there",
            component.display()
        );
        return Ok(Built::Prebuilt);
    }
    let Some(path) = tool.find() else {
        return Err(format!(
            "skipped: {0} not found (scripts/install-{0}.sh installs it): {name}",
            tool.name
        ));
    };
    let started = Instant::now();
    let status = Command::new(tasklet_dir(name).join("build.sh"))
        .env(tool.build_var, &path)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {name}/build.sh: {e}"));
    assert!(status.success(), "{name}/build.sh failed ({status})");
    Ok(Built::Built(started.elapsed()))
}
