//! A GPU worker process for this crate's tests and benchmark.

fn main() {
    std::process::exit(tasklet_worker::serve_main(std::env::args().skip(1)));
}
