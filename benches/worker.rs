//! A GPU worker process for the benchmarks that start workers (the `tasklet` binary serves the
//! same role with its hidden `worker` command): built with them, so `cargo bench` alone has one.

fn main() {
    std::process::exit(tasklet_worker::serve_main(std::env::args().skip(1)));
}
