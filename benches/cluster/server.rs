//! The nats-server the benchmark measures: started on loopback ports with JetStream in a
//! temporary folder and its monitoring endpoint on, and read for its CPU time (/proc) and its
//! message counters (/varz).

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use tasklet_cluster::{start_nats_server, LocalServer};

/// How long the server may take to answer its first health check.
const START_WAIT: Duration = Duration::from_secs(30);

/// The longest one monitoring request may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest monitoring answer read (/varz is a few KiB).
const HTTP_MAX: u64 = 1 << 20;

/// The server's counters at one moment (/varz).
#[derive(Debug, Clone, Copy, Default)]
pub struct Varz {
    pub in_msgs: u64,
    pub out_msgs: u64,
    pub in_bytes: u64,
    pub out_bytes: u64,
    /// Resident memory, bytes.
    pub mem: u64,
}

/// A running nats-server, killed when dropped.
pub struct NatsServer {
    child: Child,
    pub url: String,
    monitor_port: u16,
    pub version: String,
    /// JetStream's store; removed when dropped.
    _dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts `binary` on free loopback ports: clients, and monitoring (`-m`).
    pub fn start(binary: &Path) -> Result<NatsServer, String> {
        let version = Command::new(binary)
            .arg("--version")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .unwrap_or_default();
        let dir = tempfile::Builder::new()
            .prefix("tasklet-cluster-bench")
            .tempdir()
            .map_err(|e| format!("cannot make a temporary folder: {e}"))?;
        let port = free_port()?;
        let monitor_port = free_port()?;
        let mut local = LocalServer::new(port, dir.path().join("js"));
        local.args = vec!["-m".into(), monitor_port.to_string()];
        local.start_timeout = START_WAIT;
        let child = start_nats_server(binary, &local)?;
        let mut server = NatsServer {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            monitor_port,
            version,
            _dir: dir,
        };
        let start = Instant::now();
        loop {
            let healthy = server
                .get("/healthz")
                .is_ok_and(|body| body.contains("\"ok\""));
            if healthy && TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok() {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("nats-server exited at start: {status}"));
            }
            if start.elapsed() > START_WAIT {
                return Err(format!("nats-server was not healthy within {START_WAIT:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU time the server has used so far (user + system).
    pub fn cpu(&self) -> Result<Duration, String> {
        process_cpu(self.pid())
    }

    /// The message counters now.
    pub fn varz(&self) -> Result<Varz, String> {
        let body = self.get("/varz")?;
        let json: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("/varz is not JSON: {e}"))?;
        let field = |name: &str| {
            json[name]
                .as_u64()
                .ok_or_else(|| format!("/varz has no number {name}"))
        };
        Ok(Varz {
            in_msgs: field("in_msgs")?,
            out_msgs: field("out_msgs")?,
            in_bytes: field("in_bytes")?,
            out_bytes: field("out_bytes")?,
            mem: field("mem")?,
        })
    }

    /// The body of a GET on the monitoring port: HTTP/1.0, so the server closes when done.
    fn get(&self, path: &str) -> Result<String, String> {
        let failed = |e: std::io::Error| format!("GET {path} on the monitoring port: {e}");
        let mut stream =
            TcpStream::connect((Ipv4Addr::LOCALHOST, self.monitor_port)).map_err(failed)?;
        stream
            .set_read_timeout(Some(HTTP_TIMEOUT))
            .map_err(failed)?;
        stream
            .set_write_timeout(Some(HTTP_TIMEOUT))
            .map_err(failed)?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").map_err(failed)?;
        let mut response = String::new();
        stream
            .take(HTTP_MAX)
            .read_to_string(&mut response)
            .map_err(failed)?;
        let (head, body) = response
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("GET {path}: no end of headers"))?;
        if !head.starts_with("HTTP/1.") || head.split_whitespace().nth(1).is_none_or(|s| s != "200")
        {
            return Err(format!(
                "GET {path}: {}",
                head.lines().next().unwrap_or_default()
            ));
        }
        Ok(body.to_owned())
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time (user + system) of process `pid` so far, from /proc/PID/stat.
pub fn process_cpu(pid: u32) -> Result<Duration, String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| format!("{path}: no command name"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .ok_or_else(|| format!("{path}: field {} is not a number", i + 3))
    };
    let total = ticks(11)? + ticks(12)?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let per_second = u64::try_from(per_second)
        .ok()
        .filter(|&t| t > 0)
        .unwrap_or(100);
    Ok(Duration::from_secs_f64(total as f64 / per_second as f64))
}

/// A loopback TCP port free now.
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}
