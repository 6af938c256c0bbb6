//! `memprof serve` run for a test, and its API asked over HTTP/1.0.

#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

/// A running `memprof serve`, stopped when dropped.
pub struct Server {
    child: Child,
    pub address: String,
    pub trace_address: Option<String>,
    /// Its standard error's lines up to the one that says it serves.
    pub messages: Vec<String>,
    /// Its standard error's lines after that one, so far.
    pub later: Arc<Mutex<Vec<String>>>,
}

impl Server {
    pub fn start(args: &[&str]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_memprof"));
        command.arg("serve").args(args);
        Server::run(command)
    }

    /// `memprof serve` with at most `files` descriptors open (`ulimit -n`).
    pub fn start_limited(args: &[&str], files: u32) -> Server {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("ulimit -n {files} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_memprof"))
            .arg("serve")
            .args(args);
        Server::run(command)
    }

    fn run(mut command: Command) -> Server {
        let mut child = command
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut trace_address = None;
        let mut messages = Vec::new();
        let address = loop {
            let line = lines.next().expect("memprof serve stopped").unwrap();
            messages.push(line.clone());
            if let Some(rest) = line.strip_prefix("memprof: waiting for a trace on ") {
                trace_address = Some(rest.trim().to_owned());
            }
            if let Some(rest) = line.strip_prefix("memprof: serving on http://") {
                break rest.trim_end_matches('/').to_owned();
            }
        };
        let later = Arc::new(Mutex::new(Vec::new()));
        let kept = later.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock().unwrap().push(line);
            }
        });
        Server {
            child,
            address,
            trace_address,
            messages,
            later,
        }
    }

    pub fn get(&self, path: &str) -> (u16, Vec<u8>) {
        let mut stream = TcpStream::connect(&self.address).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n",
            self.address
        )
        .unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).unwrap();
        let split = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let status = String::from_utf8_lossy(&response[9..12]).parse().unwrap();
        (status, response[split + 4..].to_vec())
    }

    pub fn json(&self, path: &str) -> Value {
        let (status, body) = self.get(path);
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap()
    }

    /// A request that must fail with a 400; its message.
    pub fn bad(&self, path: &str) -> String {
        let (status, body) = self.get(path);
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, 400, "GET {path}: {text}");
        let value: Value = serde_json::from_slice(&body).unwrap();
        value["error"].as_str().unwrap().to_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
