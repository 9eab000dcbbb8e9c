//! Ctrl-C (SIGINT) while connected to nodes: every connection this command opened is closed,
//! telling its node, so that the node frees the leases it held for it at once rather than at its
//! idle timeout; then the command exits 130, as a shell reports a command ended by SIGINT.

use std::sync::{Mutex, Once, PoisonError};
use std::time::Duration;

use tasklet_remote::{Closer, NodeClient};

/// The most one close waits for its packet to leave.
const CLOSE_WAIT: Duration = Duration::from_millis(200);

static OPEN: Mutex<Vec<Closer>> = Mutex::new(Vec::new());
static WATCH: Once = Once::new();

/// Closes `client`'s connection if the command is interrupted.
pub fn close_on_interrupt(client: &NodeClient) {
    OPEN.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(client.closer());
    WATCH.call_once(|| {
        let watcher = std::thread::Builder::new()
            .name("tasklet-interrupt".into())
            .spawn(|| {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                if runtime.block_on(tokio::signal::ctrl_c()).is_err() {
                    return;
                }
                let open =
                    std::mem::take(&mut *OPEN.lock().unwrap_or_else(PoisonError::into_inner));
                for closer in open {
                    closer.close("the client was interrupted", CLOSE_WAIT);
                }
                std::process::exit(130);
            });
        // Without the watcher SIGINT keeps its default (the process ends at once), which is
        // only less tidy.
        drop(watcher);
    });
}
