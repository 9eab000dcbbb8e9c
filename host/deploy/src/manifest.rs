//! A deployment's manifest: the `tasklet.toml` text as pushed, read back as a [`Manifest`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use tasklet_runtime::config::{Grant, Manifest};
use tasklet_store::Digest;

use crate::error::one_line;

/// Parses a deployment's manifest: the line at fault and what is wrong, if it is not one.
///
/// Its `component` path named a file on the pusher's machine; here the component is the blob
/// `component`, so the path becomes that digest (which is what errors about the component then
/// name).
pub(crate) fn parse(bytes: &[u8], component: &Digest) -> Result<Manifest, (Option<u32>, String)> {
    let mut manifest = parse_pushed(bytes)?;
    manifest.component = component_path(component);
    Ok(manifest)
}

/// [`parse`] for a push, before its component (hence its digest) has arrived: the manifest's
/// `component` is left empty, for the push to set with [`component_path`].
pub(crate) fn parse_pushed(bytes: &[u8]) -> Result<Manifest, (Option<u32>, String)> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        (
            None,
            format!("it is not UTF-8 text (at byte {})", e.valid_up_to()),
        )
    })?;
    let mut manifest = Manifest::parse(text, Path::new(""))
        .map_err(|(line, message)| (line, one_line(&message)))?;
    manifest.component = PathBuf::new();
    Ok(manifest)
}

/// How a deployed tasklet's component is named: `sha256:<digest>`.
pub(crate) fn component_path(component: &Digest) -> PathBuf {
    PathBuf::from(format!("sha256:{component}"))
}

/// What a tasklet is linked with before a run's own grant replaces it: what its manifest asks
/// for. Linking does not look at the grant; every run sets the one its caller decided.
pub(crate) fn asked_for(manifest: &Manifest) -> Grant {
    Grant {
        limits: manifest.limits,
        gpu: manifest.gpu,
        kernel_deadline: Duration::ZERO,
        gpu_time: None,
    }
}
