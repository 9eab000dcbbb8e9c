//! A worker's OS process as the host's child: started with its channel's fds, watched, killed and
//! reaped by pid.

use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use super::error::WorkerError;
use super::output;
use crate::contract::{DeviceBinding, WorkerArgs, WorkerCommand, EXIT_DEADLINE};

/// Held across each worker start: while it is held, that worker's fds are inheritable.
static SPAWNS: Mutex<()> = Mutex::new(());

/// Sets or clears `FD_CLOEXEC` on `fd`.
fn close_on_exec(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: plain fcntl on a fd of ours.
    let r = unsafe { libc::fcntl(fd, libc::F_SETFD, if on { libc::FD_CLOEXEC } else { 0 }) };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A worker's OS process: reaped by us (never by `std::process::Child`) so that a kill from the
/// pool's shutdown and the owner's liveness checks agree on whether the pid is still ours.
pub(crate) struct Proc {
    pid: i32,
    /// Set once reaped, with how it ended. Holding this lock across kill+waitpid means nobody
    /// signals a pid after it was reaped (and possibly reused).
    exited: Mutex<Option<Exit>>,
    /// Closed when the thread relaying its output has relayed the last of it.
    relayed: Mutex<Option<mpsc::Receiver<()>>>,
}

/// How long [`Proc::kill`] waits for the relay of what the process wrote before it died: its
/// last lines (a kernel's printf at exit) reach the host's stderr before the host goes on.
const RELAY_DRAIN: Duration = Duration::from_secs(1);

/// How a reaped process ended.
#[derive(Debug, Clone)]
struct Exit {
    how: String,
    /// It exited with [`EXIT_DEADLINE`]: its watchdog ended it over a runaway kernel.
    deadline: bool,
    /// The signal that ended it, if one did.
    signal: Option<i32>,
}

impl Proc {
    /// Runs `program args… <args>` with the fds in `inherit` (close-on-exec in this process, as
    /// every fd the host makes) left open for the child alone. Stdin and stdout are null; its
    /// stderr is relayed to the host's by a thread of its own ([`output::relay`]). The child
    /// leads its own process group, so a terminal's Ctrl-C goes to the host, which decides; and
    /// it is killed when the *thread* that spawned it exits (the worker arms `PR_SET_PDEATHSIG`
    /// itself, and ends at once if its parent is already not the host it was told). A bound
    /// worker sees only its device ([`DeviceBinding::env`]).
    ///
    /// Started without `fork`: `posix_spawn` (a `vfork`-like clone sharing this process's memory
    /// until the exec) suspends only the spawning thread, where a `fork` of a host with many
    /// threads and much memory mapped copies its page tables under the memory-map lock, so every
    /// other thread that faults a page or maps memory meanwhile (other tenants' calls) stalls
    /// with it, for longer the more the host has mapped. So no code
    /// runs in the child before the exec: the inherited fds are made inheritable here, for the
    /// spawn alone, under [`SPAWNS`], which every worker start takes (a worker never holds
    /// another's channel); a child started meanwhile by other code of this process, not through
    /// here, could inherit them too.
    pub(crate) fn spawn(
        command: &WorkerCommand,
        args: &WorkerArgs,
        inherit: [RawFd; 2],
        binding: &DeviceBinding,
    ) -> Result<Proc, WorkerError> {
        let mut cmd = Command::new(&command.program);
        // A host that starts its workers through `/proc/self/exe` (the image it runs, even once
        // its file was replaced) would list them in `ps` under that name: they go under the
        // program's own path instead, so that `ps | grep tasklet` finds them beside their host.
        if command.program == Path::new("/proc/self/exe") {
            if let Ok(exe) = std::env::current_exe() {
                // Once the file was replaced the kernel names it `PATH (deleted)`.
                let exe = exe.to_string_lossy();
                cmd.arg0(exe.strip_suffix(" (deleted)").unwrap_or(&exe));
            }
        }
        if let Some((key, value)) = binding.env() {
            cmd.env(key, value);
        }
        cmd.args(&command.args)
            .args(args.to_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let spawned = {
            let _one_at_a_time = SPAWNS.lock().unwrap_or_else(|p| p.into_inner());
            let opened = inherit.iter().try_for_each(|&fd| close_on_exec(fd, false));
            let spawned = opened.and_then(|()| cmd.spawn());
            // Ours again alone, whatever happened (a fd that was never made inheritable is
            // made close-on-exec again: no harm).
            for fd in inherit {
                let _ = close_on_exec(fd, true);
            }
            spawned
        };
        let mut child = spawned.map_err(|e| {
            WorkerError::Spawn(format!("cannot run {}: {e}", command.program.display()))
        })?;
        let pid = child.id() as i32;
        let (done, relayed) = mpsc::channel::<()>();
        let relay = child.stderr.take().map(|stderr| {
            std::thread::Builder::new()
                .name(format!("worker-{pid}-output"))
                .spawn(move || {
                    output::relay(pid, stderr, io::stderr());
                    drop(done);
                })
        });
        // Reaped by pid here, never through the `Child`: dropping it neither waits nor kills.
        drop(child);
        let proc = Proc {
            pid,
            exited: Mutex::new(None),
            relayed: Mutex::new(Some(relayed)),
        };
        if let Some(Err(e)) = relay {
            // Nothing would read its output: it would fail at its first line.
            let _ = proc.kill();
            return Err(WorkerError::Spawn(format!(
                "cannot start the thread that relays worker {pid}'s output: {e}"
            )));
        }
        Ok(proc)
    }

    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// None while running; how it ended once it has (reaping it).
    pub(crate) fn poll(&self) -> Option<String> {
        let mut g = self.exited.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = reap(self.pid, libc::WNOHANG);
        }
        g.as_ref().map(|e| e.how.clone())
    }

    /// Whether it has ended by its watchdog over a kernel past its deadline.
    pub(crate) fn ended_by_watchdog(&self) -> bool {
        self.exited
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|e| e.deadline)
    }

    /// The signal that ended it, once it has ended by one (as [`Proc::poll`] or [`Proc::kill`]
    /// saw it).
    pub(crate) fn killed_by(&self) -> Option<i32> {
        self.exited
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|e| e.signal)
    }

    /// SIGKILL (if still running) and reap, then wait (up to [`RELAY_DRAIN`]) for the last of
    /// its output to be relayed. Returns how it ended.
    pub(crate) fn kill(&self) -> String {
        let how = {
            let mut g = self.exited.lock().unwrap_or_else(|p| p.into_inner());
            if g.is_none() {
                // SAFETY: the pid is our unreaped child (the lock guarantees it), so it is not
                // reused.
                unsafe { libc::kill(self.pid, libc::SIGKILL) };
                *g = reap(self.pid, 0);
            }
            g.as_ref()
                .map_or_else(|| "killed".into(), |e| e.how.clone())
        };
        let relayed = self
            .relayed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(relayed) = relayed {
            // Disconnected once the relay has read to the end of the pipe (the process is gone).
            let _ = relayed.recv_timeout(RELAY_DRAIN);
        }
        how
    }

    /// Sends `sig` if the process has not been reaped: SIGKILL to give a worker up without
    /// waiting for it to end (it is reaped later, by `kill` or `poll`); for tests, SIGSTOP.
    pub(crate) fn signal(&self, sig: i32) {
        let g = self.exited.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            // SAFETY: as in `kill`.
            unsafe { libc::kill(self.pid, sig) };
        }
    }
}

fn reap(pid: i32, flags: i32) -> Option<Exit> {
    loop {
        let mut status = 0;
        // SAFETY: plain waitpid on our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        if r == pid {
            let deadline = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == EXIT_DEADLINE;
            let how = if deadline {
                "ended itself: its watchdog stopped a kernel that ran past its deadline".to_string()
            } else if libc::WIFEXITED(status) {
                format!("exited with status {}", libc::WEXITSTATUS(status))
            } else if libc::WIFSIGNALED(status) {
                format!("was killed by signal {}", libc::WTERMSIG(status))
            } else {
                format!("ended with wait status {status:#x}")
            };
            let signal = libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status));
            return Some(Exit {
                how,
                deadline,
                signal,
            });
        }
        if r == 0 {
            return None;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            // Someone else reaped it (a waitpid(-1) elsewhere, or SIGCHLD ignored): it is gone.
            _ => {
                return Some(Exit {
                    how: "exited (reaped elsewhere)".into(),
                    deadline: false,
                    signal: None,
                })
            }
        }
    }
}
