//! CUDA C sources, one way for every backend: NVRTC compiles them to PTX, which the backend then
//! loads as it loads any PTX. Only the architecture differs between backends.

use super::BackendError;
use crate::contract::modules::MAX_COMPILED_PTX_BYTES;
use crate::contract::{quote, ErrorKind};
use crate::worker::nvrtc::{self, NvrtcError};

/// Compiles `source` with `options` for `arch` (`compute_XY`'s X and Y) unless the options name
/// an architecture; `None`: NVRTC's default for the emulator
/// ([`nvrtc::DEFAULT_ARCH_OPTION`]). NVRTC's failures as the backend reports them: missing NVRTC
/// is `Unsupported` (load PTX instead, or install it), everything else — compile errors with
/// NVRTC's log, bad options, a broken install — `LoadFailed`.
pub(super) fn compile(
    source: &str,
    options: &[&str],
    arch: Option<(u32, u32)>,
) -> Result<String, BackendError> {
    let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
    let default_arch = arch.map_or_else(
        || nvrtc::DEFAULT_ARCH_OPTION.to_owned(),
        |(major, minor)| format!("--gpu-architecture=compute_{major}{minor}"),
    );
    let ptx = nvrtc::compile_for(source, &options, &default_arch).map_err(|e| match e {
        NvrtcError::NotFound { .. } => BackendError::new(
            ErrorKind::Unsupported,
            format!("compiling CUDA C needs NVRTC, which this node does not have: {e}; or load PTX instead"),
        ),
        // NVRTC's log quotes the source (and a refused option is echoed): only its start.
        other => BackendError::new(ErrorKind::LoadFailed, quote::text(&other.to_string()).to_string()),
    })?;
    if ptx.len() > MAX_COMPILED_PTX_BYTES {
        return Err(BackendError::new(
            ErrorKind::LoadFailed,
            format!(
                "NVRTC made {:.1} MiB of PTX of this source, more than the {} MiB one module may have; \
                 split the source into several modules",
                ptx.len() as f64 / (1 << 20) as f64,
                MAX_COMPILED_PTX_BYTES >> 20
            ),
        ));
    }
    Ok(ptx)
}

/// An error from loading the PTX that NVRTC made of a source, saying so.
pub(super) fn in_compiled_ptx(e: BackendError) -> BackendError {
    BackendError::new(
        e.kind,
        format!("{} (in the PTX NVRTC made of the source)", e.message),
    )
}
