//! `tasklet check`: validate a manifest and its component, and show what the node would grant.

use anyhow::Result;
use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tasklet_runtime::component_bytes::{not_a_component, PREAMBLE_BYTES};
use tasklet_runtime::config::units::format_size;
use tasklet_runtime::{Manifest, Policy};

/// Validate a tasklet's manifest and its component, and print what this node's policy grants it.
/// Exits with 1 when the component is missing, unreadable or not a WebAssembly component.
///
/// A manifest's errors name the key and the line; with --policy the grant is what a node run
/// with that policy gives the tasklet (the intersection of the two), and a policy a node would
/// refuse to start with is refused here too.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tasklet check tasklets/iota                                     the manifest, its component (built by a first `tasklet run`), the default grant\n  \
    tasklet check tasklets/iota/tasklet.toml --policy policy.toml   the grant under a node's policy\n\n\
    (policy.toml: a node policy, as docs/operating.md writes one)")]
pub struct CheckArgs {
    /// A tasklet folder (with tasklet.toml) or a manifest file.
    pub tasklet: PathBuf,
    /// Node policy to grant against (defaults without it).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
}

pub fn run(args: CheckArgs) -> Result<ExitCode> {
    let manifest = Manifest::load(&args.tasklet)?;
    let policy = match &args.policy {
        Some(p) => Policy::load(p)?,
        None => Policy::default(),
    };
    // What `tasklet node` would refuse to start with.
    tasklet_node::check_policy_tenants(&policy)?;
    let grant = policy.grant(&manifest);
    let component = Component::inspect(&manifest.component);
    let verdict = if component.is_usable() {
        "ok"
    } else {
        "not usable"
    };
    outln!("{}: manifest ok, component {verdict}", manifest.name);
    outln!(
        "  component     {}: {component}",
        manifest.component.display()
    );
    outln!("  memory        {}", format_size(grant.limits.memory));
    outln!("  wall time     {:?}", grant.limits.wall_time);
    if grant.gpu.max_leases == 0 {
        outln!("  gpu           none (no [gpu] section)");
    } else {
        outln!("  max vram      {}", format_size(grant.gpu.max_vram));
        outln!("  max leases    {}", grant.gpu.max_leases);
        outln!("  max lease     {:?}", grant.gpu.max_lease_time);
        outln!("  rights        {}", grant.gpu.rights);
        let missing: Vec<_> = manifest
            .gpu
            .rights
            .iter()
            .filter(|r| !grant.gpu.rights.contains(*r))
            .collect();
        if !missing.is_empty() {
            let names: Vec<_> = missing.iter().map(|r| r.name()).collect();
            outln!("  warning: the policy withholds {}", names.join(", "));
        }
    }
    if component.is_usable() {
        return Ok(ExitCode::SUCCESS);
    }
    errln!(
        "{}: {}: {component}",
        manifest.name,
        manifest.component.display()
    );
    Ok(ExitCode::from(1))
}

/// What `check` found at the manifest's `component` path.
enum Component {
    /// A WebAssembly component of this many bytes.
    Usable(u64),
    Missing,
    Unreadable(std::io::Error),
    /// A file, but not a component: why.
    Unusable(&'static str),
}

impl Component {
    /// Reads the start of the file at `path` (8 bytes): enough to tell a component from anything
    /// else without compiling it.
    fn inspect(path: &Path) -> Component {
        let mut file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Component::Missing,
            Err(e) => return Component::Unreadable(e),
        };
        let size = match file.metadata() {
            Ok(m) if m.is_dir() => return Component::Unusable("it is a folder"),
            Ok(m) => m.len(),
            Err(e) => return Component::Unreadable(e),
        };
        let mut preamble = [0u8; PREAMBLE_BYTES];
        match file.read_exact(&mut preamble) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Component::Unusable("it is shorter than a WebAssembly preamble")
            }
            Err(e) => return Component::Unreadable(e),
        }
        match not_a_component(&preamble) {
            Some(why) => Component::Unusable(why),
            None => Component::Usable(size),
        }
    }

    fn is_usable(&self) -> bool {
        matches!(self, Component::Usable(_))
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Component::Usable(size) => write!(f, "a WebAssembly component of {size} bytes"),
            Component::Missing => f.write_str(
                "missing: build it (`tasklet run` builds a tasklet crate beside its manifest; or \
                 cargo build --release --target wasm32-wasip2), or correct `component` in the manifest",
            ),
            Component::Unreadable(e) => write!(f, "unreadable: {e}"),
            Component::Unusable(why) => write!(f, "not usable: {why}"),
        }
    }
}
