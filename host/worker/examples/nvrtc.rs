//! Compiles one CUDA C file to PTX with the worker's NVRTC loader (src/worker/nvrtc.rs), as
//! `load_source` does: `cargo run -p tasklet-worker --example nvrtc -- FILE.cu [NVRTC options…]`.
//! PTX goes to stdout; the library used to stderr. `TASKLET_NVRTC` picks a specific libnvrtc
//! (kernels/regen.sh uses it for the NVRTC 12 corpus).
use tasklet_worker::nvrtc;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(file) = args.next() else {
        eprintln!("usage: nvrtc FILE.cu [NVRTC options…]");
        std::process::exit(2);
    };
    let options: Vec<String> = args.collect();
    let source = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        eprintln!("{file}: {e}");
        std::process::exit(2);
    });
    match nvrtc::library() {
        Ok((path, (major, minor))) => eprintln!("NVRTC {major}.{minor} from {path}"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    }
    match nvrtc::compile(&source, &options) {
        Ok(ptx) => print!("{ptx}"),
        Err(e) => {
            eprintln!("{file}: {e}");
            std::process::exit(1);
        }
    }
}
