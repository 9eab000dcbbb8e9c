//! How a worker process is run and how it ends: the command line the host starts it with and
//! the exit statuses it reports with.

use std::path::PathBuf;

/// How to run a worker: `program args… <pool's own flags>`. For the CLI: `(tasklet, ["worker"])`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// The device a worker serves. On cuda, the worker's process sees that device as its device 0,
/// through `CUDA_VISIBLE_DEVICES`; a UUID names one device however the driver orders them.
/// Unbound, a worker serves device 0 of what its environment shows it. On emu, a pool's workers
/// are bound to their device by their pool alone (each emulated device is its own size).
///
/// `peers` are the machine's other whole GPUs, which the worker sees after its own: it makes no
/// context on them and its kernels reach none of their memory, but it can map memory another
/// worker exports from them, so that a copy between the GPUs of a group lease goes GPU to GPU
/// (`Request::CopyFromPeer`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceBinding {
    /// `GPU-…` or `MIG-…`, as NVML reports it.
    pub uuid: Option<String>,
    /// Other GPUs' `GPU-…` UUIDs, visible to the worker after its own.
    pub peers: Vec<String>,
}

impl DeviceBinding {
    /// Bound to the GPU or MIG instance with this UUID.
    pub fn uuid(uuid: impl Into<String>) -> DeviceBinding {
        DeviceBinding {
            uuid: Some(uuid.into()),
            peers: Vec::new(),
        }
    }

    /// The same binding, seeing `peers` too.
    pub fn with_peers(mut self, peers: Vec<String>) -> DeviceBinding {
        self.peers = peers;
        self
    }

    /// The environment a bound worker is started with: its device first (the worker's device 0),
    /// then its peers.
    pub fn env(&self) -> Option<(&'static str, String)> {
        let own = self.uuid.as_deref()?;
        let mut visible = own.to_owned();
        for peer in &self.peers {
            visible.push(',');
            visible.push_str(peer);
        }
        Some(("CUDA_VISIBLE_DEVICES", visible))
    }
}

/// Which backend a worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    Emu,
    Cuda,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Emu => "emu",
            BackendKind::Cuda => "cuda",
        }
    }

    pub fn parse(s: &str) -> Option<BackendKind> {
        match s {
            "emu" => Some(BackendKind::Emu),
            "cuda" => Some(BackendKind::Cuda),
            _ => None,
        }
    }
}

/// What a worker prints when its command line is wrong.
pub const USAGE: &str = "usage: <worker> --shm-fd N [--ctl-fd N] [--backend emu|cuda] [--device-memory BYTES] [--host-pid PID] [--emu-threads N] [--null-backend]\n       <worker> --inventory   (print the NVML GPU inventory and exit)";

/// The worker served until the host closed the channel or went away.
pub const EXIT_OK: i32 = 0;
/// The channel or the backend could not be opened (the host is told why through the channel
/// when it can be).
pub const EXIT_START_FAILED: i32 = 1;
/// The command line was not one [`WorkerArgs::parse`] accepts.
pub const EXIT_USAGE: i32 = 2;
/// The cuda backend's watchdog ended the process because a kernel ran past its deadline with no
/// `sync` waiting for it (the host reports `DeadlineExceeded`).
pub const EXIT_DEADLINE: i32 = 3;

/// What the pool passes a worker. [`WorkerArgs::to_args`] and [`WorkerArgs::parse`] are inverses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerArgs {
    pub shm_fd: i32,
    /// The worker's end of the control socket that carries guest memories' fds
    /// ([`super::control_socket`]); without one, the worker refuses to attach guest memory.
    pub ctl_fd: Option<i32>,
    pub backend: BackendKind,
    pub device_memory: u64,
    /// The host's pid: a worker whose parent is no longer this exits (the parent died before the
    /// worker could arm its parent-death signal).
    pub host_pid: Option<i32>,
    pub emu_threads: usize,
    /// Serve with a backend that has no device and refuses every op that would need one: for
    /// tests and IPC benchmarks, passed through `WorkerCommand::args`.
    pub null_backend: bool,
}

impl WorkerArgs {
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            "--shm-fd".into(),
            self.shm_fd.to_string(),
            "--backend".into(),
            self.backend.as_str().into(),
            "--device-memory".into(),
            self.device_memory.to_string(),
            "--emu-threads".into(),
            self.emu_threads.to_string(),
        ];
        if let Some(p) = self.host_pid {
            v.push("--host-pid".into());
            v.push(p.to_string());
        }
        if self.null_backend {
            v.push("--null-backend".into());
        }
        if let Some(fd) = self.ctl_fd {
            v.push("--ctl-fd".into());
            v.push(fd.to_string());
        }
        v
    }

    pub fn parse(args: impl Iterator<Item = String>) -> Result<WorkerArgs, String> {
        let mut shm_fd = None;
        let mut out = WorkerArgs {
            shm_fd: -1,
            ctl_fd: None,
            backend: BackendKind::Emu,
            device_memory: 1 << 30,
            host_pid: None,
            emu_threads: 0,
            null_backend: false,
        };
        let mut args = args;
        while let Some(flag) = args.next() {
            let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
            fn num<T: std::str::FromStr>(name: &str, v: String) -> Result<T, String> {
                v.parse()
                    .map_err(|_| format!("{name}: `{v}` is not a valid number"))
            }
            match flag.as_str() {
                "--shm-fd" => shm_fd = Some(num::<i32>("--shm-fd", value("--shm-fd")?)?),
                "--backend" => {
                    let v = value("--backend")?;
                    out.backend =
                        BackendKind::parse(&v).ok_or_else(|| format!("unknown backend `{v}`"))?;
                }
                "--device-memory" => {
                    out.device_memory = num("--device-memory", value("--device-memory")?)?
                }
                "--host-pid" => out.host_pid = Some(num("--host-pid", value("--host-pid")?)?),
                "--emu-threads" => out.emu_threads = num("--emu-threads", value("--emu-threads")?)?,
                "--null-backend" => out.null_backend = true,
                "--ctl-fd" => out.ctl_fd = Some(num::<i32>("--ctl-fd", value("--ctl-fd")?)?),
                other => return Err(format!("unexpected argument `{other}`")),
            }
        }
        out.shm_fd = shm_fd.ok_or("--shm-fd is required")?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_round_trip() {
        let a = WorkerArgs {
            shm_fd: 5,
            ctl_fd: Some(6),
            backend: BackendKind::Emu,
            device_memory: 123,
            host_pid: Some(42),
            emu_threads: 3,
            null_backend: true,
        };
        assert_eq!(WorkerArgs::parse(a.to_args().into_iter()), Ok(a));
    }

    #[test]
    fn bad_args_are_errors() {
        let p = |v: &[&str]| WorkerArgs::parse(v.iter().map(|s| s.to_string()));
        assert!(p(&[]).is_err());
        assert!(p(&["--shm-fd"]).is_err());
        assert!(p(&["--shm-fd", "x"]).is_err());
        assert!(p(&["--shm-fd", "3", "--backend", "tpu"]).is_err());
        assert!(p(&["--shm-fd", "3", "extra"]).is_err());
        assert_eq!(p(&["--shm-fd", "3"]).unwrap().backend, BackendKind::Emu);
    }
}
