//! A node served from a small program of its own: what another daemon does to embed one.
//!
//! ```text
//! tasklet certs init certs
//! cargo run -p tasklet-node --example embedded -- 127.0.0.1:5701 certs
//! tasklet inventory --node 127.0.0.1:5701 --certs certs
//! ```
//!
//! The program is also its own GPU worker: the node starts worker processes by running it
//! again with `worker` first, which is answered before anything else starts. Ctrl-C drains the
//! node (new leases are refused, running ones finish) and the program exits once it has.

use std::net::SocketAddr;
use std::process::ExitCode;
use tasklet_node::{Denied, NodeBuilder};
use tasklet_runtime::config::Grant;
use tasklet_runtime::{BackendKind, WorkerCommand};
use tasklet_tls::Tenant;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if first.as_deref() == Some("worker") {
        return ExitCode::from(tasklet_worker::serve_main(args) as u8);
    }
    let listen: SocketAddr = match first.as_deref().unwrap_or("127.0.0.1:5701").parse() {
        Ok(addr) => addr,
        Err(err) => {
            eprintln!("usage: embedded [ADDR [CERTS]]: {err}");
            return ExitCode::from(2);
        }
    };
    let certs = args.next().unwrap_or_else(|| "certs".into());
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("cannot start a runtime: {err}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(serve(listen, certs)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
    }
}

async fn serve(listen: SocketAddr, certs: String) -> Result<(), Box<dyn std::error::Error>> {
    let worker = WorkerCommand {
        program: std::env::current_exe()?,
        args: vec!["worker".into()],
    };
    let node = NodeBuilder::new()
        .listen(listen)
        .certs(certs)
        .backend(BackendKind::Emu)
        .worker(worker)
        .name("embedded example")
        .authorizer(narrow_guests)
        .build()?;
    println!("serving on {}", node.local_addr());
    let control = node.control();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            println!("draining");
            control.drain();
        }
    });
    node.serve().await?;
    println!("drained");
    Ok(())
}

/// The daemon's own rule, on top of the policy: tenant `guest` gets at most 64 MiB of VRAM.
fn narrow_guests(tenant: &Tenant, mut ceiling: Grant) -> Result<Grant, Denied> {
    if tenant.as_str() == "guest" {
        ceiling.gpu.max_vram = ceiling.gpu.max_vram.min(64 << 20);
    }
    Ok(ceiling)
}
