//! Headless Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`):
//! open a page, read what it shows, click what a user clicks, save screenshots. The
//! driver and the browser are stopped on drop.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

/// WebDriver's key for an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One HTTP/1.1 exchange with the driver (Content-Length or chunked answers).
fn exchange(port: u16, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .map_err(|e| e.to_string())?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
    s.write_all(body.as_bytes()).map_err(|e| e.to_string())?;
    // The driver keeps connections open whatever the request says: read one answer.
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let payload = loop {
        if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let headers = String::from_utf8_lossy(&raw[..split]).to_lowercase();
            let body = &raw[split + 4..];
            if let Some(len) = headers
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
            {
                if body.len() >= len {
                    break body[..len].to_vec();
                }
            } else if headers.contains("transfer-encoding: chunked") {
                if let Some(b) = dechunk(body) {
                    break b;
                }
            } else {
                return Err(format!("no length: {headers}"));
            }
        }
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed before the answer ended".into());
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let v: Value = serde_json::from_slice(&payload).map_err(|e| e.to_string())?;
    if let Some(err) = v["value"]["error"].as_str() {
        return Err(format!("{err}: {}", v["value"]["message"]));
    }
    Ok(v["value"].clone())
}

/// A whole chunked body, or `None` while more is to come.
fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&rest[..line_end])
                .split(';')
                .next()
                .unwrap_or("0")
                .trim(),
            16,
        )
        .ok()?;
        if size == 0 {
            return Some(out);
        }
        let start = line_end + 2;
        if rest.len() < start + size + 2 {
            return None;
        }
        out.extend_from_slice(&rest[start..start + size]);
        rest = &rest[start + size + 2..];
    }
}

impl Browser {
    /// Start chromedriver and a headless Chromium session at 1366×900 (a laptop screen).
    pub fn start() -> Self {
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian chromium-driver)");
        let deadline = Instant::now() + Duration::from_secs(60);
        while exchange(port, "GET", "/status", None).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().expect("a profile directory");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1366,900",
                         format!("--user-data-dir={}", profile.path().display())]
            }
        }}});
        let session = exchange(port, "POST", "/session", Some(&caps))
            .unwrap_or_else(|e| panic!("a Chromium session: {e}"));
        let session = session["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        Browser {
            driver,
            port,
            session,
            _profile: profile,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        exchange(
            self.port,
            method,
            &format!("/session/{}{path}", self.session),
            body.as_ref(),
        )
    }

    pub fn open(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url})))
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// Run `script` (a function body; `return` gives the value) in the page.
    pub fn script(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .unwrap_or_else(|e| panic!("script {script}: {e}"))
    }

    /// Click the element `css` selects, as a user does (WebDriver's element click:
    /// scrolled into view, hit-tested).
    pub fn click(&self, css: &str) {
        let found = self
            .call(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .unwrap_or_else(|e| panic!("find {css}: {e}"));
        let id = found[ELEMENT].as_str().expect("an element").to_string();
        self.call("POST", &format!("/element/{id}/click"), Some(json!({})))
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    /// Save a PNG of the window.
    pub fn screenshot(&self, path: &Path) {
        let b64 = self
            .call("GET", "/screenshot", None)
            .unwrap_or_else(|e| panic!("screenshot: {e}"));
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap_or_default())
            .expect("a PNG");
        std::fs::write(path, png).expect("writing a screenshot");
        eprintln!("screenshot: {}", path.display());
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.call("DELETE", "", None);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
