//! A bare worker process, for this crate's tests and benchmarks. The CLI embeds the same loop as
//! `tasklet worker …`.

fn main() {
    std::process::exit(tasklet_worker::serve_main(std::env::args().skip(1)));
}
