//! A GPU worker process for the test suite (the `tasklet` binary serves the same role with its
//! hidden `worker` command).

fn main() {
    std::process::exit(tasklet_worker::serve_main(std::env::args().skip(1)));
}
