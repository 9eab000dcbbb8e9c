//! `tasklet ptx check FILE…`: parse and validate PTX with the emulator's loader and show each
//! kernel's signature and argument-block layout.

use anyhow::Result;
use std::path::PathBuf;
use std::process::ExitCode;

/// Work with PTX modules.
#[derive(clap::Args, Debug)]
pub struct PtxArgs {
    #[command(subcommand)]
    pub command: PtxCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum PtxCommand {
    /// Parse and validate PTX files as the emulator loads them; list each kernel's parameters.
    ///
    /// Exits 1 naming `file:line: message` for every file that does not load (an unsupported
    /// instruction anywhere, even in a kernel never launched, is an error), 0 when all load.
    #[command(after_help = "Example:\n  tasklet ptx check kernels/*.ptx")]
    Check {
        /// PTX files.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
}

pub fn run(args: PtxArgs) -> Result<ExitCode> {
    match args.command {
        PtxCommand::Check { files } => check(&files),
    }
}

fn check(files: &[PathBuf]) -> Result<ExitCode> {
    let mut failed = 0usize;
    for path in files {
        let shown = path.display();
        let src = match std::fs::read(path) {
            Ok(b) => match String::from_utf8(b) {
                Ok(s) => s,
                Err(e) => {
                    errln!(
                        "{shown}: not UTF-8 text (byte {})",
                        e.utf8_error().valid_up_to()
                    );
                    failed += 1;
                    continue;
                }
            },
            Err(e) => {
                errln!("{shown}: {e}");
                failed += 1;
                continue;
            }
        };
        let module = match tasklet_ptx::Module::parse(&src) {
            Ok(m) => m,
            Err(e) => {
                errln!("{shown}:{}: {}", e.line, e.message);
                failed += 1;
                continue;
            }
        };
        // Declared types, for display; the module above already validated the same headers.
        let types = tasklet_ptx::entry_param_types(&src).unwrap_or_default();
        let kernels = module.kernels();
        outln!(
            "{shown}: ok, {} kernel{}",
            kernels.len(),
            if kernels.len() == 1 { "" } else { "s" }
        );
        for (i, k) in kernels.iter().enumerate() {
            let (_, size) = k.param_layout();
            let params: Vec<String> = k
                .params
                .iter()
                .enumerate()
                .map(|(j, p)| {
                    let ty = types
                        .get(i)
                        .and_then(|t| t.get(j))
                        .cloned()
                        .unwrap_or_else(|| format!(".b8[{}]", p.size));
                    format!("{}: {ty} ({} B)", p.name, p.size)
                })
                .collect();
            outln!("  {}({})  args {size} B", k.name, params.join(", "));
        }
    }
    if failed > 0 {
        errln!(
            "{failed} of {} file{} failed",
            files.len(),
            if files.len() == 1 { "" } else { "s" }
        );
        Ok(ExitCode::from(1))
    } else {
        Ok(ExitCode::SUCCESS)
    }
}
