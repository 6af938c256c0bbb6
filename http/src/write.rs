//! Writing a response within its deadline.

use crate::{Options, Response};
use std::io::{self, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Writes `response` (its head only for `HEAD`) within the deadline `options` give it.
pub(crate) fn write_response(
    stream: &mut TcpStream,
    response: &Response,
    head_only: bool,
    options: &Options,
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\
         X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    );
    for (name, value) in &response.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let body: &[u8] = if head_only { &[] } else { &response.body };
    let deadline = Instant::now() + time_to_write(body.len(), options);
    for mut part in [head.as_bytes(), body] {
        // One write at a time, each within what is left of the deadline: a client that reads a
        // few bytes now and then cannot keep the worker past it.
        while !part.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            stream.set_write_timeout(Some(left))?;
            match stream.write(part) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => part = &part[n..],
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
    }
    stream.flush()
}

/// The time a client has to read a body of `bytes`.
fn time_to_write(bytes: usize, options: &Options) -> Duration {
    let extra = match options.write_rate {
        0 => Duration::ZERO,
        rate => Duration::from_secs_f64(bytes as f64 / rate as f64),
    };
    options.write_deadline + extra
}

/// The reason phrase of a status.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        414 => "URI Too Long",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => match status / 100 {
            2 => "OK",
            4 => "Client Error",
            _ => "Internal Server Error",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_bodies_have_more_time() {
        let fixed = Options::default();
        assert_eq!(time_to_write(50 << 20, &fixed), fixed.write_deadline);
        let rated = Options {
            write_rate: 1 << 20,
            ..fixed
        };
        assert_eq!(
            time_to_write(50 << 20, &rated),
            fixed.write_deadline + Duration::from_secs(50)
        );
    }
}
