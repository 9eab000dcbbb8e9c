//! A tasklet as the command line names it (a folder, its `tasklet.toml`, or a `.wasm`): its
//! manifest, the manifest's text, its component built if need be, and the run's input.

use crate::build;
use anyhow::{bail, Context, Result};
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use tasklet_runtime::config::MANIFEST_FILE;
use tasklet_runtime::Manifest;

/// A tasklet ready to run or push.
pub struct Source {
    pub manifest: Manifest,
    /// The manifest's text: the file's, or the one written for a `.wasm` that has none.
    pub text: String,
}

impl Source {
    /// Reads the tasklet at `path`. A folder with a Cargo project has its component built with
    /// cargo first when it is missing or older than its sources; a folder without one (a
    /// component built by another language's tools) runs its component as it is, and a missing
    /// one is an error saying how to build it.
    pub fn load(path: &Path) -> Result<Source> {
        let source = Source::read(path)?;
        if path.is_dir() {
            let component = &source.manifest.component;
            if build::is_cargo_project(path) {
                if let Some(why) = build::staleness(path, component) {
                    errln!(
                        "tasklet: building {} with cargo ({why})",
                        source.manifest.name
                    );
                    build::build(path, component)?;
                }
            } else if !component.exists() {
                bail!(
                    "the component {} of {} is missing; {}",
                    component.display(),
                    path.display(),
                    build::how_to_build(path)
                );
            } else if build::sources_newer(path, component) {
                errln!(
                    "tasklet: note: files in {} are newer than its component; {}",
                    path.display(),
                    build::how_to_build(path)
                );
            }
        }
        Ok(source)
    }

    /// The component's bytes.
    /// The component's bytes, to push. One larger than a message to a node may carry is
    /// refused before it is read.
    pub fn component(&self) -> Result<Vec<u8>> {
        let path = &self.manifest.component;
        let limit = tasklet_wire::limits::DEFAULT_MAX_STREAM_BYTES;
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.len() > limit {
                bail!(
                    "component {} is {} bytes, more than a push carries ({limit} bytes); a node takes at most its \
                     policy's [deploy] max-component-size besides, 64 MiB unless set",
                    path.display(),
                    meta.len()
                );
            }
        }
        std::fs::read(path).with_context(|| format!("cannot read component {}", path.display()))
    }

    /// The manifest of a folder, or of a component: its neighbour, else one granting the
    /// policy's defaults for a single lease.
    fn read(path: &Path) -> Result<Source> {
        if !path.exists() {
            bail!(
                "{} does not exist: give a tasklet folder (with {MANIFEST_FILE}) or a component (.wasm)",
                path.display()
            );
        }
        let file = if path.is_dir() {
            Some(path.join(MANIFEST_FILE))
        } else if path.file_name().is_some_and(|n| n == MANIFEST_FILE) {
            Some(path.to_path_buf())
        } else {
            None
        };
        if let Some(file) = file {
            return Ok(Source {
                manifest: Manifest::load(path)?,
                text: read_text(&file)?,
            });
        }
        let beside = path.with_file_name(MANIFEST_FILE);
        if beside.exists() {
            let mut manifest = Manifest::load(&beside)?;
            manifest.component = path.to_path_buf();
            return Ok(Source {
                manifest,
                text: read_text(&beside)?,
            });
        }
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "tasklet".into());
        errln!("tasklet: no {MANIFEST_FILE} beside {}; granting one lease of up to 256MiB for 60s with every right", path.display());
        let text = format!(
            "name = {name:?}\ncomponent = {:?}\n[gpu]\nmax-vram = \"256MiB\"\nmax-leases = 1\nmax-lease-secs = \"60s\"\nrights = [\"alloc\", \"write\", \"read\", \"load\", \"launch\"]\n",
            path.display().to_string()
        );
        let manifest =
            Manifest::parse(&text, Path::new(".")).map_err(|(_, m)| anyhow::anyhow!(m))?;
        Ok(Source { manifest, text })
    }
}

fn read_text(file: &Path) -> Result<String> {
    std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))
}

/// The run's input: FILE's bytes, or stdin's (nothing when stdin is a terminal, which would
/// wait for an end of file nobody means to type).
pub fn read_input(file: Option<&PathBuf>) -> Result<Vec<u8>> {
    match file {
        Some(path) => {
            std::fs::read(path).with_context(|| format!("cannot read input {}", path.display()))
        }
        None if std::io::stdin().is_terminal() => Ok(Vec::new()),
        None => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .context("cannot read stdin")?;
            Ok(buf)
        }
    }
}
