//! Headless Chromium driven over the DevTools protocol, as a user's mouse would drive it: the
//! flags every test starts it with, a session with one page, and where an element is. Shared by
//! the tests of the viewer's page and of the HTML report.

#![allow(dead_code)]

use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Chromium's flags for a test: no sandbox (CI runs as root), nothing started in the background.
pub const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1280,900",
];

/// A DevTools protocol session with one page of a headless Chromium, closed when dropped.
pub struct Browser {
    child: Child,
    socket: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next_id: u64,
    session: String,
}

impl Browser {
    pub fn open(chromium: &str, profile: &Path, url: &str) -> Browser {
        let mut child = Command::new(chromium)
            .args(CHROMIUM_FLAGS)
            .arg("--remote-debugging-port=0")
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Chromium says where it listens on stderr; the rest of stderr is drained so that it
        // never blocks on a full pipe.
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        let endpoint = loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                let _ = child.kill();
                panic!("chromium exited without a DevTools endpoint: {seen}");
            }
            if let Some(at) = line.find("ws://") {
                break line[at..].trim().to_owned();
            }
            seen.push_str(&line);
        };
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        let (socket, _) = tungstenite::connect(endpoint.as_str()).unwrap();
        let mut browser = Browser {
            child,
            socket,
            next_id: 0,
            session: String::new(),
        };
        let target = browser.call("Target.createTarget", json!({ "url": url }));
        let target = target["targetId"].as_str().unwrap().to_owned();
        let attached = browser.call(
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_owned();
        browser
    }

    /// Sends one command (to the page once attached) and returns its result; events that come
    /// before the answer are skipped.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        match self.try_call(method, params) {
            Ok(result) => result,
            Err(answer) => panic!("{method}: {answer}"),
        }
    }

    /// A command's result, or the answer that says it failed (a page navigating away while it
    /// ran, say).
    pub fn try_call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.next_id += 1;
        let mut message = json!({ "id": self.next_id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        self.socket
            .send(tungstenite::Message::text(message.to_string()))
            .unwrap();
        loop {
            let answer = match self.socket.read().unwrap() {
                tungstenite::Message::Text(text) => {
                    serde_json::from_str::<Value>(text.as_str()).unwrap()
                }
                _ => continue,
            };
            if answer["id"] != json!(self.next_id) {
                continue;
            }
            if answer.get("error").is_some() {
                return Err(answer);
            }
            return Ok(answer["result"].clone());
        }
    }

    /// The value of a JavaScript expression in the page.
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        assert!(
            result.get("exceptionDetails").is_none(),
            "{expression}: {result}"
        );
        result["result"]["value"].clone()
    }

    /// Waits up to 30 s for `expression` to be true in the page (a document still loading, whose
    /// body is not there yet, or one the page is navigating away from, counts as not yet).
    pub fn wait_for(&mut self, expression: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let guarded =
            format!("(() => {{ try {{ return !!({expression}); }} catch {{ return false; }} }})()");
        let holds = |browser: &mut Browser| {
            browser
                .try_call(
                    "Runtime.evaluate",
                    json!({ "expression": guarded, "returnByValue": true, "awaitPromise": true }),
                )
                .is_ok_and(|result| result["result"]["value"] == json!(true))
        };
        while !holds(self) {
            assert!(
                Instant::now() < deadline,
                "the page never had {expression}: {}",
                self.eval("document.body.innerText")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn mouse(&mut self, kind: &str, x: f64, y: f64) {
        self.call(
            "Input.dispatchMouseEvent",
            json!({ "type": kind, "x": x, "y": y, "button": "left", "buttons": if kind == "mouseReleased" { 0 } else { 1 }, "clickCount": 1 }),
        );
    }

    pub fn click(&mut self, x: f64, y: f64) {
        self.mouse("mouseMoved", x, y);
        self.mouse("mousePressed", x, y);
        self.mouse("mouseReleased", x, y);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The centre of the element an expression gives, scrolled into view.
pub fn centre_of(browser: &mut Browser, element: &str) -> (f64, f64) {
    let centre = browser.eval(&format!(
        "(() => {{ const e = {element}; e.scrollIntoView({{block: 'center'}}); \
         const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
    ));
    (centre[0].as_f64().unwrap(), centre[1].as_f64().unwrap())
}
