//! Replays the emulator's kernel-corpus launches through a tasklet worker and writes the same JSON
//! with that backend's outputs: the CUDA backend's side of the emulator-vs-GPU diff
//! (kernels/diff/README.md).
//!
//!     cargo build --release -p tasklet-worker --bin tasklet-worker \
//!         -p tasklet-benches --bin replay_corpus
//!     target/release/replay_corpus [--backend cuda|emu] [--worker PATH] [--root DIR]
//!         [--deadline SECS] emu.json > cuda.json
//!     python3 kernels/diff/compare.py emu.json cuda.json
//!
//! emu.json comes from `target/release/corpus_outputs` (corpus_outputs.rs, beside this file) and
//! says everything about each launch: the PTX file (relative to the repository root), kernel,
//! grid, block, dynamic shared memory, the argument block with pointer slots zeroed and the
//! offsets at which each buffer's device address goes, and every buffer's input bytes. Nothing is generated here; this is kernels/diff/gpu_outputs.py (which goes through
//! CuPy) done through our own worker protocol instead: `Worker::spawn`, then per launch alloc,
//! write, load_module (once per PTX file per worker), launch, sync, read.
//!
//! - One worker serves the whole run, in emu.json's order (misc.ptx's `read_counter` reads the
//!   counter that `lookup` bumped in the same module). After a launch that faults, misses its
//!   deadline or loses the worker, that launch is reported as an error and the next one gets a
//!   fresh worker (and reloads its modules).
//! - The kernels that fault or hang on purpose are never in emu.json's `cases` (corpus_outputs
//!   lists them under `skipped`, which is passed through as is). Should one appear in `cases`
//!   anyway, it is not launched and is reported as an error.
//! - The output has the format gpu_outputs.py writes (corpus_outputs' document with `device`,
//!   each case's `status` and `outputs` replaced), so compare.py reads it unchanged.
//! - The worker's stderr is ours (device `printf`, emulated or not, lands there); stdout is JSON.
//! - Exit status 0 once the document is written, failed launches included (each has an
//!   `error: …` status, which compare.py counts as a failure); 2 for bad arguments or input.
//!
//! `--worker` defaults to `tasklet-worker` beside this program (target/release/replay_corpus →
//! target/release/tasklet-worker); `--root` defaults to the checkout this was built in, or the
//! current directory if that is gone. `--backend emu` checks the whole path without a GPU:
//! emu.json against its own replay compares all-equal.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;
use tasklet_worker::{BackendKind, Launch, Worker, WorkerCommand, WorkerError};

const USAGE: &str =
    "usage: replay_corpus [--backend cuda|emu] [--worker PATH] [--root DIR] [--deadline SECS] emu.json > out.json";

/// Device memory a worker may allocate: the whole corpus needs a few MiB.
const DEVICE_MEMORY: u64 = 1 << 30;
/// How long any op but a launch may take before the worker counts as lost (a CUDA context's
/// start and a module's JIT included).
const OP_TIMEOUT: Duration = Duration::from_secs(120);

struct Opts {
    backend: BackendKind,
    worker: PathBuf,
    root: PathBuf,
    deadline: Duration,
    input: PathBuf,
}

fn parse_args() -> Result<Opts, String> {
    let mut backend = BackendKind::Cuda;
    let mut worker = None;
    let mut root = None;
    let mut deadline = Duration::from_secs(60);
    let mut input = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--backend" => {
                let v = value("--backend")?;
                backend = BackendKind::parse(&v)
                    .ok_or_else(|| format!("unknown backend `{v}` (cuda or emu)"))?;
            }
            "--worker" => worker = Some(PathBuf::from(value("--worker")?)),
            "--root" => root = Some(PathBuf::from(value("--root")?)),
            "--deadline" => {
                let v = value("--deadline")?;
                let s: f64 = v
                    .parse()
                    .map_err(|_| format!("--deadline: `{v}` is not a number of seconds"))?;
                if !(s > 0.0 && s < 1e6) {
                    return Err(format!("--deadline: {s} is out of range"));
                }
                deadline = Duration::from_secs_f64(s);
            }
            "-h" | "--help" => return Err(USAGE.into()),
            _ if a.starts_with('-') => return Err(format!("unknown option `{a}`\n{USAGE}")),
            _ if input.is_none() => input = Some(PathBuf::from(a)),
            _ => return Err(format!("one emu.json only\n{USAGE}")),
        }
    }
    let input = input.ok_or(USAGE)?;
    let worker = match worker {
        Some(w) => w,
        None => {
            let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
            // target/<profile>/replay_corpus → target/<profile>/tasklet-worker
            exe.parent()
                .ok_or("cannot locate the target directory; pass --worker")?
                .join("tasklet-worker")
        }
    };
    let root = root.unwrap_or_else(|| {
        let built = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        if built.join("kernels").is_dir() {
            built
        } else {
            PathBuf::from(".")
        }
    });
    Ok(Opts {
        backend,
        worker,
        root,
        deadline,
        input,
    })
}

/// The worker in use, the modules it has loaded, and how it is started again.
struct Replayer {
    opts: Opts,
    command: WorkerCommand,
    worker: Option<Worker>,
    /// PTX path (as in emu.json) → module id in `worker`.
    /// Module path → its id and its kernels' names, in the order launches index them.
    modules: HashMap<String, (u32, Vec<String>)>,
    /// The first worker's description, for the document's `device`.
    device: Option<String>,
    /// Why a worker could not be started: then no launch is tried again.
    spawn_failed: Option<String>,
    respawns: usize,
}

impl Replayer {
    fn worker(&mut self) -> Result<&mut Worker, String> {
        if let Some(why) = &self.spawn_failed {
            return Err(format!("no worker: {why}"));
        }
        if self.worker.is_none() {
            let mut w = Worker::spawn(&self.command, self.opts.backend, DEVICE_MEMORY, OP_TIMEOUT)
                .map_err(|e| {
                    let why = e.to_string();
                    self.spawn_failed = Some(why.clone());
                    why
                })?;
            if self.device.is_none() {
                let info = w.info().map_err(|e| format!("worker info: {e}"))?;
                let mut d = format!(
                    "{} (sm_{}{})",
                    info.device, info.compute_capability.0, info.compute_capability.1
                );
                if info.driver_version != 0 {
                    let _ = write!(d, ", driver {}", info.driver_version);
                }
                let _ = write!(d, ", tasklet-worker {} backend", info.backend);
                self.device = Some(d);
            }
            self.modules.clear();
            self.worker = Some(w);
        }
        Ok(self.worker.as_mut().expect("just set"))
    }

    /// Runs one case; returns its outputs (buffer name → hex) in buffer order.
    fn run(&mut self, case: &Value) -> Result<Vec<(String, String)>, String> {
        let module_path = str_field(case, "module")?.to_string();
        let kernel = str_field(case, "kernel")?.to_string();
        let grid = dims(case, "grid")?;
        let block = dims(case, "block")?;
        let shared = u32::try_from(u64_field(case, "shared_mem_bytes")?)
            .map_err(|_| "shared_mem_bytes too large")?;
        let mut args = unhex(str_field(case, "args")?)?;
        let buffers = array_field(case, "buffers")?;
        let mut bufs = Vec::with_capacity(buffers.len());
        for b in buffers {
            let bytes = u64_field(b, "bytes")?;
            let input = unhex(str_field(b, "input")?)?;
            if input.len() as u64 != bytes {
                return Err(format!(
                    "buffer {}: {} input bytes for a {bytes}-byte buffer",
                    str_field(b, "name")?,
                    input.len()
                ));
            }
            bufs.push((
                str_field(b, "name")?.to_string(),
                bytes,
                input,
                b.get("compare").is_some(),
            ));
        }

        let deadline = self.opts.deadline;
        let module_file = self.opts.root.join(&module_path);
        let known = self.modules.get(&module_path).cloned();
        let w = self.worker()?;
        let (module, names) = match known {
            Some(loaded) => loaded,
            None => {
                let ptx = std::fs::read_to_string(&module_file)
                    .map_err(|e| format!("{}: {e}", module_file.display()))?;
                let m = w
                    .load_module(&ptx)
                    .map_err(|e| format!("load {module_path}: {e}"))?;
                (m.id, m.kernels.iter().map(|k| k.name.clone()).collect())
            }
        };
        let kernel = names
            .iter()
            .position(|k| *k == kernel)
            .ok_or_else(|| format!("{module_path} has no kernel `{kernel}`"))?
            as u32;
        self.modules.insert(module_path, (module, names));
        let w = self.worker.as_mut().expect("started above");

        // As gpu_outputs.py: every buffer allocated (at least one byte, so an empty one still has
        // an address) and filled, its address patched into the argument block, one launch, a
        // sync, the compared buffers read back; then the buffers are freed.
        let mut addrs = Vec::with_capacity(bufs.len());
        let result = (|| -> Result<Vec<(String, String)>, String> {
            for (_, bytes, input, _) in &bufs {
                let a = w.alloc((*bytes).max(1)).map_err(op)?;
                addrs.push(a);
                if !input.is_empty() {
                    w.write(a, input).map_err(op)?;
                }
            }
            for p in array_field(case, "pointers")? {
                let at = usize::try_from(u64_field(p, "offset")?)
                    .map_err(|_| "pointer offset too large")?;
                let b = usize::try_from(u64_field(p, "buffer")?)
                    .map_err(|_| "buffer index too large")?;
                let addr = *addrs
                    .get(b)
                    .ok_or_else(|| format!("pointer to buffer {b}, of {}", addrs.len()))?;
                let len = args.len();
                let slot = args.get_mut(at..at.saturating_add(8)).ok_or_else(|| {
                    format!("pointer offset {at} past the {len}-byte argument block")
                })?;
                slot.copy_from_slice(&addr.to_le_bytes());
            }
            w.launch(&Launch {
                module,
                kernel,
                grid,
                block,
                shared_mem_bytes: shared,
                args: &args,
                deadline,
            })
            .map_err(op)?;
            w.sync().map_err(op)?;
            let mut outputs = Vec::new();
            for ((name, bytes, _, compared), &addr) in bufs.iter().zip(&addrs) {
                if *compared {
                    let mut got = vec![0u8; *bytes as usize];
                    w.read(addr, &mut got).map_err(op)?;
                    outputs.push((name.clone(), hex(&got)));
                }
            }
            Ok(outputs)
        })();
        if !w.is_lost() && !w.is_poisoned() {
            for a in addrs {
                let _ = w.free(a);
            }
        }
        result
    }

    /// After a case: a worker that is lost or poisoned is replaced before the next one.
    fn settle(&mut self) {
        if self
            .worker
            .as_ref()
            .is_some_and(|w| w.is_lost() || w.is_poisoned())
        {
            self.worker = None;
            self.modules.clear();
            self.respawns += 1;
            eprintln!("replay_corpus: the worker is unusable after that launch; the next launch gets a fresh one");
        }
    }
}

fn main() -> ExitCode {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let text = match std::fs::read_to_string(&opts.input) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{}: {e}", opts.input.display());
            return ExitCode::from(2);
        }
    };
    let (doc, raw_doc, raw_cases) = match parse_doc(&text) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{}: {e}", opts.input.display());
            return ExitCode::from(2);
        }
    };
    let cases = doc["cases"].as_array().expect("checked by parse_doc");
    // The same list gpu_outputs.py honours: what corpus_outputs left out, it left out of `cases`.
    let skipped: BTreeSet<String> = doc
        .get("skipped")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.get("kernel").and_then(Value::as_str).map(str::to_string))
        .collect();

    let command = WorkerCommand {
        program: opts.worker.clone(),
        args: Vec::new(),
    };
    let backend = opts.backend;
    let mut r = Replayer {
        opts,
        command,
        worker: None,
        modules: HashMap::new(),
        device: None,
        spawn_failed: None,
        respawns: 0,
    };
    let mut out_cases = Vec::with_capacity(cases.len());
    let mut errors = 0;
    for (case, raw) in cases.iter().zip(&raw_cases) {
        let name = format!(
            "{}:{}",
            case.get("module").and_then(Value::as_str).unwrap_or("?"),
            case.get("kernel").and_then(Value::as_str).unwrap_or("?")
        );
        let result = if skipped.contains(&name) {
            Err("listed under `skipped` (faults or hangs on purpose): not launched".to_string())
        } else {
            r.run(case)
        };
        let (status, outputs) = match result {
            Ok(outputs) => ("ok".to_string(), outputs),
            Err(e) => {
                errors += 1;
                eprintln!("{name}: error: {e}");
                (format!("error: {e}"), Vec::new())
            }
        };
        r.settle();
        let outputs = outputs
            .iter()
            .map(|(name, hex)| format!("{}:\"{hex}\"", json_str(name)))
            .collect::<Vec<_>>()
            .join(",");
        out_cases.push(replace_members(
            &text,
            raw,
            &[
                ("status", json_str(&status)),
                ("outputs", format!("{{{outputs}}}")),
            ],
        ));
    }
    drop(r.worker.take());
    let device = r.device.clone().unwrap_or_else(|| {
        format!(
            "tasklet-worker {} backend: unavailable ({})",
            backend.as_str(),
            r.spawn_failed.as_deref().unwrap_or("no launches")
        )
    });
    let cases_json = if out_cases.is_empty() {
        "[]".to_string()
    } else {
        format!("[\n{}\n]", out_cases.join(",\n"))
    };
    let out = replace_members(
        &text,
        &raw_doc,
        &[("device", json_str(&device)), ("cases", cases_json)],
    );
    println!("{out}");
    eprintln!(
        "replay_corpus: {} launches on {}, {errors} errors, {} fresh workers after unusable ones",
        out_cases.len(),
        backend.as_str(),
        r.respawns
    );
    // As gpu_outputs.py: a launch that failed is in the document (compare.py fails it), not in
    // the exit status, which is for a document that could not be written at all.
    ExitCode::SUCCESS
}

// --- JSON out: everything but `device`, `status` and `outputs` copied from emu.json verbatim ---
//
// serde_json (without its float_roundtrip feature) may read a float 1 ulp off, and the comparison
// bounds in each buffer's `compare` should reach the output byte for byte, as they do through
// Python's json in gpu_outputs.py. So emu.json is parsed twice: into `Value`s for what the replay
// needs (integers, strings), and into byte spans of each object's members, which are written back
// as they were, in their order, with the replaced members' values swapped in.

/// One object's members: key and the byte range of its value.
type Members = Vec<(String, std::ops::Range<usize>)>;

/// The document (validated), its top-level members, and each case's members.
fn parse_doc(text: &str) -> Result<(Value, Members, Vec<Members>), String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if !doc.get("cases").is_some_and(Value::is_array) {
        return Err("not a JSON object with a `cases` array (made by corpus_outputs?)".into());
    }
    let b = text.as_bytes();
    let top = members(b, skip_ws(b, 0))?;
    let cases = &top
        .iter()
        .find(|(k, _)| k == "cases")
        .ok_or("no `cases`")?
        .1;
    let raw_cases = elements(b, cases.start)?
        .into_iter()
        .map(|r| members(b, r.start))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((doc, top, raw_cases))
}

/// The object `m` (spans into `text`) written compactly, with `with`'s values in place of its
/// members' of the same key (appended when missing, as Python's `dict` does).
fn replace_members(text: &str, m: &Members, with: &[(&str, String)]) -> String {
    let mut parts: Vec<String> = m
        .iter()
        .map(|(k, r)| {
            let v = with
                .iter()
                .find(|(w, _)| w == k)
                .map_or(&text[r.clone()], |(_, v)| v.as_str());
            format!("{}:{v}", json_str(k))
        })
        .collect();
    for (k, v) in with {
        if !m.iter().any(|(mk, _)| mk == k) {
            parts.push(format!("{}:{v}", json_str(k)));
        }
    }
    format!("{{{}}}", parts.join(","))
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
        i += 1;
    }
    i
}

/// The end (exclusive) of the JSON value starting at `i`. The text is valid JSON (serde_json
/// checked it first), so this only needs to find where strings and brackets close.
fn value_end(b: &[u8], i: usize) -> Result<usize, String> {
    let mut depth = 0usize;
    let mut j = i;
    loop {
        match b.get(j) {
            None => return Err(format!("JSON value at byte {i} never ends")),
            Some(b'"') => {
                j += 1;
                loop {
                    match b.get(j) {
                        None => return Err(format!("string at byte {i} never ends")),
                        Some(b'\\') => j += 2,
                        Some(b'"') => break,
                        Some(_) => j += 1,
                    }
                }
                j += 1;
            }
            Some(b'{' | b'[') => {
                depth += 1;
                j += 1;
            }
            Some(b'}' | b']') if depth == 0 => return Ok(j),
            Some(b'}' | b']') => {
                depth -= 1;
                j += 1;
            }
            Some(b',') if depth == 0 => return Ok(j),
            Some(c) if depth == 0 && c.is_ascii_whitespace() => return Ok(j),
            Some(_) => j += 1,
        }
        if depth == 0 && j > i && matches!(b[j - 1], b'}' | b']' | b'"') {
            return Ok(j);
        }
    }
}

/// The members of the object whose `{` is at `i`.
fn members(b: &[u8], i: usize) -> Result<Members, String> {
    if b.get(i) != Some(&b'{') {
        return Err(format!("expected an object at byte {i}"));
    }
    let mut out = Vec::new();
    let mut j = skip_ws(b, i + 1);
    if b.get(j) == Some(&b'}') {
        return Ok(out);
    }
    loop {
        let key_end = value_end(b, j)?;
        let key: String =
            serde_json::from_slice(&b[j..key_end]).map_err(|e| format!("key at byte {j}: {e}"))?;
        j = skip_ws(b, key_end);
        if b.get(j) != Some(&b':') {
            return Err(format!("expected `:` at byte {j}"));
        }
        let start = skip_ws(b, j + 1);
        let end = value_end(b, start)?;
        out.push((key, start..end));
        j = skip_ws(b, end);
        match b.get(j) {
            Some(b',') => j = skip_ws(b, j + 1),
            Some(b'}') => return Ok(out),
            _ => return Err(format!("expected `,` or `}}` at byte {j}")),
        }
    }
}

/// The elements of the array whose `[` is at `i`.
fn elements(b: &[u8], i: usize) -> Result<Vec<std::ops::Range<usize>>, String> {
    if b.get(i) != Some(&b'[') {
        return Err(format!("expected an array at byte {i}"));
    }
    let mut out = Vec::new();
    let mut j = skip_ws(b, i + 1);
    if b.get(j) == Some(&b']') {
        return Ok(out);
    }
    loop {
        let end = value_end(b, j)?;
        out.push(j..end);
        j = skip_ws(b, end);
        match b.get(j) {
            Some(b',') => j = skip_ws(b, j + 1),
            Some(b']') => return Ok(out),
            _ => return Err(format!("expected `,` or `]` at byte {j}")),
        }
    }
}

fn json_str(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

fn op(e: WorkerError) -> String {
    e.to_string()
}

// --- JSON in ------------------------------------------------------------------------------------

fn str_field<'a>(v: &'a Value, k: &str) -> Result<&'a str, String> {
    v.get(k)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("`{k}` missing or not a string"))
}

fn u64_field(v: &Value, k: &str) -> Result<u64, String> {
    v.get(k)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("`{k}` missing or not a non-negative integer"))
}

fn array_field<'a>(v: &'a Value, k: &str) -> Result<&'a Vec<Value>, String> {
    v.get(k)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("`{k}` missing or not an array"))
}

fn dims(v: &Value, k: &str) -> Result<[u32; 3], String> {
    let a = array_field(v, k)?;
    let d: Vec<u32> = a
        .iter()
        .filter_map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
        .collect();
    d.try_into()
        .map_err(|_| format!("`{k}` is not three 32-bit integers"))
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err("odd-length hex string".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| format!("bad hex at {i}")))
        .collect()
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}
