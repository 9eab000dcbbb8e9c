//! `/metrics` over HTTP/1.1: the smallest responder a Prometheus scraper needs, and no more.
//!
//! One request per connection (`Connection: close`). `GET` or `HEAD` of `/metrics` is answered
//! with the registry in Prometheus's text format; anything else gets a 4xx and the connection is
//! closed. Every connection is bounded: the request head in bytes and time, the answer in time,
//! and the connections answered at once in number (more are closed unanswered), so that a client
//! sending garbage, or nothing, costs the node a few kilobytes for a few seconds.

use crate::shared::Shared;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// The most bytes of request head read: a scraper's request is a few hundred.
const MAX_HEAD: usize = 8 << 10;

/// How long a client has to send its request head, and the node to write its answer.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections answered at once; more are closed at once.
const MAX_CONNECTIONS: usize = 16;

/// The only path served.
const PATH: &str = "/metrics";

/// Answers scrapes on `listener` until the task is aborted.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of file descriptors, most likely: wait rather than spin.
                tracing::warn!("metrics: cannot accept a connection: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::debug!(%peer, "metrics: too many connections at once; closed one");
            continue;
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            answer(stream, &shared).await;
            drop(slot);
        });
    }
}

/// What a request asked for, or why it cannot be answered.
#[derive(Debug, PartialEq, Eq)]
enum Asked {
    Metrics { head_only: bool },
    Refused(Status),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    BadRequest,
    NotFound,
    MethodNotAllowed,
    Timeout,
    HeadTooLarge,
}

impl Status {
    fn line(self) -> &'static str {
        match self {
            Status::BadRequest => "400 Bad Request",
            Status::NotFound => "404 Not Found",
            Status::MethodNotAllowed => "405 Method Not Allowed",
            Status::Timeout => "408 Request Timeout",
            Status::HeadTooLarge => "431 Request Header Fields Too Large",
        }
    }

    fn body(self) -> &'static str {
        match self {
            Status::BadRequest => "bad request: this port serves GET /metrics over HTTP/1.1\n",
            Status::NotFound => "not found: the node's metrics are at /metrics\n",
            Status::MethodNotAllowed => "method not allowed: use GET /metrics\n",
            Status::Timeout => "request timeout: no complete request in time\n",
            Status::HeadTooLarge => "request head too large\n",
        }
    }
}

async fn answer(mut stream: TcpStream, shared: &Shared) {
    let asked = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(asked) => asked,
        Err(_) => Asked::Refused(Status::Timeout),
    };
    let response = match asked {
        Asked::Metrics { head_only } => {
            shared.observe_for_scrape();
            match shared.metrics.encode() {
                Ok(body) => response("200 OK", prometheus::TEXT_FORMAT, &body, head_only),
                Err(err) => {
                    tracing::warn!("metrics: {err}");
                    response(
                        "500 Internal Server Error",
                        "text/plain",
                        b"the node cannot encode its metrics\n",
                        head_only,
                    )
                }
            }
        }
        Asked::Refused(status) => {
            response(status.line(), "text/plain", status.body().as_bytes(), false)
        }
    };
    let _ = tokio::time::timeout(WRITE_TIMEOUT, async {
        stream.write_all(&response).await?;
        stream.shutdown().await
    })
    .await;
}

/// Reads the request head (up to the blank line) and says what it asks for.
async fn read_head(stream: &mut TcpStream) -> Asked {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return Asked::Refused(Status::BadRequest),
            Ok(n) => n,
        };
        head.extend_from_slice(&buf[..n]);
        // A request line starts with its method's capitals: anything else (a TLS hello, binary)
        // is told so at once, not when its time is up.
        if !head[0].is_ascii_uppercase() {
            return Asked::Refused(Status::BadRequest);
        }
        // So is a request line with a byte no request line holds (a control or a non-ASCII
        // byte) or, once it is whole, one that is not `METHOD /path HTTP/1.x`: what follows it
        // cannot mend it.
        let line_end = head.iter().position(|&b| b == b'\n');
        let line = &head[..line_end.unwrap_or(head.len())];
        if line
            .iter()
            .any(|&b| !(b' '..=b'~').contains(&b) && b != b'\r')
        {
            return Asked::Refused(Status::BadRequest);
        }
        if let Some(end) = line_end {
            if parse(&head[..end]) == Asked::Refused(Status::BadRequest) {
                return Asked::Refused(Status::BadRequest);
            }
        }
        // The limit is on the head with its closing blank line, however the reads fell.
        match head_end(&head) {
            Some((end, blank)) if end + blank <= MAX_HEAD => return parse(&head[..end]),
            Some(_) => return Asked::Refused(Status::HeadTooLarge),
            None => {}
        }
        if head.len() >= MAX_HEAD {
            return Asked::Refused(Status::HeadTooLarge);
        }
    }
}

/// Where a head's lines end, and how many bytes the blank line after them takes with the
/// newline before it: lines end in CRLF, or in a bare LF, which HTTP/1.1 lets a server accept
/// (RFC 9112, section 2.2) and `printf 'GET /metrics HTTP/1.1\n\n'` sends.
fn head_end(head: &[u8]) -> Option<(usize, usize)> {
    head.iter().enumerate().find_map(|(at, &b)| {
        let after = &head[at + 1..];
        match b {
            b'\n' if after.starts_with(b"\n") => Some((at, 2)),
            b'\n' if after.starts_with(b"\r\n") => Some((at, 3)),
            _ => None,
        }
    })
}

/// Reads a request head: its request line decides; header lines need only be text.
fn parse(head: &[u8]) -> Asked {
    let Ok(head) = std::str::from_utf8(head) else {
        return Asked::Refused(Status::BadRequest);
    };
    let request_line = head.split('\n').next().unwrap_or_default();
    let request_line = request_line.strip_suffix('\r').unwrap_or(request_line);
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Asked::Refused(Status::BadRequest);
    };
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") || !target.starts_with('/') {
        return Asked::Refused(Status::BadRequest);
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Asked::Refused(Status::BadRequest);
    }
    let path = target.split('?').next().unwrap_or_default();
    if path != PATH {
        return Asked::Refused(Status::NotFound);
    }
    match method {
        "GET" => Asked::Metrics { head_only: false },
        "HEAD" => Asked::Metrics { head_only: true },
        _ => Asked::Refused(Status::MethodNotAllowed),
    }
}

fn response(status: &str, content_type: &str, body: &[u8], head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    )
    .into_bytes();
    if status.starts_with("405") {
        out.extend_from_slice(b"Allow: GET, HEAD\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_ends_at_its_blank_line_whether_lines_end_in_crlf_or_lf() {
        let parsed = |head: &[u8]| head_end(head).map(|(end, _)| parse(&head[..end]));
        let metrics = Some(Asked::Metrics { head_only: false });
        assert_eq!(parsed(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), metrics);
        assert_eq!(parsed(b"GET /metrics HTTP/1.1\n\n"), metrics);
        assert_eq!(parsed(b"GET /metrics HTTP/1.1\nHost: x\n\n"), metrics);
        assert_eq!(head_end(b"GET /metrics HTTP/1.1\r\n\r\n"), Some((22, 3)));
        assert_eq!(head_end(b"GET /metrics HTTP/1.1\n\n"), Some((21, 2)));
        assert_eq!(head_end(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"), None);
    }

    #[test]
    fn requests_are_read_by_their_request_line() {
        let ok = |head: &str| parse(head.as_bytes());
        assert_eq!(
            ok("GET /metrics HTTP/1.1\r\nHost: x"),
            Asked::Metrics { head_only: false }
        );
        assert_eq!(
            ok("HEAD /metrics?x=1 HTTP/1.0"),
            Asked::Metrics { head_only: true }
        );
        assert_eq!(ok("GET / HTTP/1.1"), Asked::Refused(Status::NotFound));
        assert_eq!(
            ok("POST /metrics HTTP/1.1"),
            Asked::Refused(Status::MethodNotAllowed)
        );
        for bad in [
            "",
            "GET",
            "GET /metrics",
            "GET /metrics HTTP/2",
            "GET metrics HTTP/1.1",
            "get /metrics HTTP/1.1",
            "GET  /metrics HTTP/1.1",
            "GET /metrics HTTP/1.1 extra",
        ] {
            assert_eq!(ok(bad), Asked::Refused(Status::BadRequest), "{bad:?}");
        }
        assert_eq!(
            parse(b"GET /metrics HTTP/1.1\r\n\xff"),
            Asked::Refused(Status::BadRequest)
        );
    }
}
