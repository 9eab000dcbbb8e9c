//! What a worker process writes to its stderr (its own diagnostics, and its tenants' kernels'
//! `printf`, which the device or the emulator prints there): relayed to the host's stderr line
//! by line, each line behind `worker PID | ` with its control characters escaped, at most
//! [`BYTES_PER_SECOND`] a second per worker. A tenant's kernel decides what it prints and how
//! much, so on a node it must neither fill the disk the log is written to nor write a line that
//! reads as one of the node's own.

use std::io::{self, BufRead, Write};
use std::time::{Duration, Instant};

/// Bytes of a worker's output relayed per second at most; past it lines are dropped and
/// counted, and the next line relayed says how many.
pub const BYTES_PER_SECOND: usize = 256 << 10;
/// Bytes of one line relayed at most; the rest of it is dropped and counted.
pub const LINE_BYTES: usize = 4 << 10;

/// Relays `from` (a worker's stderr) to `to` until `from` ends (the worker exited), for the
/// worker `pid`. Always reads on, whatever it drops, so that the worker never waits on a full
/// pipe.
pub(crate) fn relay(pid: i32, from: impl io::Read, mut to: impl Write) {
    let mut from = io::BufReader::with_capacity(LINE_BYTES, from);
    let mut budget = Budget::new(Instant::now());
    let mut line = Vec::with_capacity(LINE_BYTES);
    loop {
        line.clear();
        let (read, cut) = match read_line(&mut from, &mut line) {
            Ok(Some(r)) => r,
            Ok(None) | Err(_) => break,
        };
        let now = Instant::now();
        if !budget.admit(now, line.len()) {
            budget.dropped += read as u64;
            continue;
        }
        let dropped = std::mem::take(&mut budget.dropped);
        let mut text = format!("worker {pid} | {}", escaped(&line));
        if cut > 0 {
            text.push_str(&format!(" … ({cut} more bytes of this line dropped)"));
        }
        if dropped > 0 {
            text.push_str(&format!(
                " [before this line, {dropped} bytes of output were dropped: over {} KiB a second]",
                BYTES_PER_SECOND >> 10
            ));
        }
        text.push('\n');
        // A host whose stderr is gone still drains the pipe.
        let _ = to.write_all(text.as_bytes());
    }
    let _ = to.flush();
}

/// Reads one line (without its `\n`) into `line`, keeping at most [`LINE_BYTES`] of it: the bytes
/// read in all and those not kept; `None` at the end of the stream with nothing read.
fn read_line(from: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<Option<(usize, usize)>> {
    let (mut read, mut cut) = (0usize, 0usize);
    loop {
        let buf = match from.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok((read > 0).then_some((read, cut)));
        }
        let (piece, end) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        let keep = piece.len().min(LINE_BYTES - line.len());
        line.extend_from_slice(&piece[..keep]);
        cut += piece.len() - keep;
        let used = end.unwrap_or(buf.len());
        read += used;
        from.consume(used);
        if end.is_some() {
            return Ok(Some((read, cut)));
        }
    }
}

/// `line` as text with every control character (a terminal's escape sequences, a carriage
/// return that would overwrite the prefix) written as its escape.
fn escaped(line: &[u8]) -> String {
    let mut out = String::with_capacity(line.len());
    for c in String::from_utf8_lossy(line).chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Bytes relayed in the current second, and those dropped since the last line relayed.
struct Budget {
    start: Instant,
    used: usize,
    dropped: u64,
}

impl Budget {
    fn new(now: Instant) -> Budget {
        Budget {
            start: now,
            used: 0,
            dropped: 0,
        }
    }

    fn admit(&mut self, now: Instant, bytes: usize) -> bool {
        if now.saturating_duration_since(self.start) >= Duration::from_secs(1) {
            self.start = now;
            self.used = 0;
        }
        if self.used + bytes > BYTES_PER_SECOND {
            return false;
        }
        self.used += bytes;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relayed(input: &[u8]) -> String {
        let mut out = Vec::new();
        relay(42, input, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn each_line_is_prefixed_and_its_control_characters_escaped() {
        let out = relayed(b"hello\n\x1b[2Jx\rINFO forged\nlast without newline");
        assert_eq!(
            out,
            "worker 42 | hello\nworker 42 | \\u{1b}[2Jx\\rINFO forged\nworker 42 | last without newline\n"
        );
    }

    #[test]
    fn a_long_line_is_cut_and_says_so() {
        let mut input = vec![b'a'; LINE_BYTES + 10];
        input.extend_from_slice(b"\nnext\n");
        let out = relayed(&input);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(lines[0].ends_with("… (10 more bytes of this line dropped)"));
        assert_eq!(lines[0].matches('a').count(), LINE_BYTES);
        assert_eq!(lines[1], "worker 42 | next");
    }

    #[test]
    fn past_the_bytes_a_second_lines_are_dropped_and_counted() {
        let line = [b'x'; 1023];
        let mut input = Vec::new();
        for _ in 0..(BYTES_PER_SECOND / 1023 + 100) {
            input.extend_from_slice(&line);
            input.push(b'\n');
        }
        let out = relayed(&input);
        let relayed_bytes: usize = out.lines().map(|l| l.len() - "worker 42 | ".len()).sum();
        assert!(relayed_bytes <= BYTES_PER_SECOND, "{relayed_bytes}");
        assert!(out.lines().count() >= BYTES_PER_SECOND / 1023 - 1);
        let mut budget = Budget::new(Instant::now());
        assert!(budget.admit(budget.start, BYTES_PER_SECOND));
        assert!(!budget.admit(budget.start, 1));
        assert!(budget.admit(budget.start + Duration::from_secs(1), 1));
    }
}
