//! Loads PTX files and reports their kernels or the load error: `cargo run -p tasklet-ptx
//! --example ptx_check -- kernels/*.ptx`.
fn main() {
    let mut failed = false;
    for path in std::env::args().skip(1) {
        match std::fs::read_to_string(&path) {
            Err(e) => {
                eprintln!("{path}: {e}");
                failed = true;
            }
            Ok(src) => match tasklet_ptx::Module::parse(&src) {
                Ok(m) => {
                    let names: Vec<_> = m.kernels().iter().map(|k| k.name.as_str()).collect();
                    println!("{path}: ok: {}", names.join(", "));
                }
                Err(e) => {
                    println!("{path}: {e}");
                    failed = true;
                }
            },
        }
    }
    std::process::exit(failed as i32);
}
