//! The proxy against the real Redis on 127.0.0.1:6379 (`REDIS_PORT` overrides the port): every fault
//! does what the control protocol says, seen from a plain client socket.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

struct Proxy {
    child: Child,
    _stdin: ChildStdin,
    listen: String,
    control: BufReader<TcpStream>,
}

impl Proxy {
    fn start() -> Proxy {
        let port = std::env::var("REDIS_PORT").unwrap_or_else(|_| "6379".into());
        let mut child = Command::new(env!("CARGO_BIN_EXE_ratewindow-faultproxy"))
            .args(["--target", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the proxy");
        let stdin = child.stdin.take().unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let field = |name: &str| {
            let at = first.find(&format!("\"{name}\":\"")).expect(name) + name.len() + 4;
            first[at..at + first[at..].find('"').unwrap()].to_string()
        };
        let control = TcpStream::connect(field("control")).unwrap();
        control
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Proxy {
            listen: field("listen"),
            control: BufReader::new(control),
            child,
            _stdin: stdin,
        }
    }

    fn command(&mut self, line: &str) -> String {
        self.control
            .get_mut()
            .write_all(format!("{line}\n").as_bytes())
            .unwrap();
        let mut reply = String::new();
        self.control.read_line(&mut reply).unwrap();
        let reply = reply.trim_end().to_string();
        assert!(reply.starts_with("ok"), "{line}: {reply}");
        reply
    }

    fn client(&self) -> TcpStream {
        let s = TcpStream::connect(&self.listen).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends PING, reads until the reply line ends, end of file or an error.
fn ping(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    s.write_all(b"PING\r\n")?;
    let mut out = Vec::new();
    let mut buf = [0u8; 64];
    while !out.ends_with(b"\r\n") {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    Ok(out)
}

#[test]
fn passes_through() {
    let p = Proxy::start();
    let mut c = p.client();
    for _ in 0..3 {
        assert_eq!(ping(&mut c).unwrap(), b"+PONG\r\n");
    }
}

#[test]
fn latency_per_direction() {
    let mut p = Proxy::start();
    let mut c = p.client();
    p.command("latency 150 0");
    let t = Instant::now();
    assert_eq!(ping(&mut c).unwrap(), b"+PONG\r\n");
    let up = t.elapsed();
    assert!(up >= Duration::from_millis(150), "{up:?}");
    p.command("latency 0 250");
    let t = Instant::now();
    assert_eq!(ping(&mut c).unwrap(), b"+PONG\r\n");
    let down = t.elapsed();
    assert!(down >= Duration::from_millis(250), "{down:?}");
    p.command("resume");
    let t = Instant::now();
    ping(&mut c).unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn stall_holds_then_delivers() {
    let mut p = Proxy::start();
    let mut c = p.client();
    p.command("stall");
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let err = ping(&mut c).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err:?}"
    );
    // A new connection is accepted while stalled, and hears nothing either.
    let mut c2 = p.client();
    c2.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    assert!(ping(&mut c2).is_err());
    p.command("unstall");
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut held = [0u8; 7];
    c.read_exact(&mut held).unwrap();
    assert_eq!(
        &held, b"+PONG\r\n",
        "the held reply arrives after the stall"
    );
}

#[test]
fn reset_sends_rst() {
    let mut p = Proxy::start();
    let mut c = p.client();
    ping(&mut c).unwrap();
    let reply = p.command("reset");
    assert_eq!(reply, "ok reset=1");
    let mut buf = [0u8; 8];
    let err = c.read(&mut buf).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err:?}");
    // New connections work.
    assert_eq!(ping(&mut p.client()).unwrap(), b"+PONG\r\n");
}

#[test]
fn cut_reply_then_close() {
    let mut p = Proxy::start();
    let mut c = p.client();
    p.command("cut 3");
    assert_eq!(
        ping(&mut c).unwrap(),
        b"+PO",
        "three bytes, then end of file"
    );
    assert!(p.command("stats").contains("cuts=1"));
    // Once only: the next connection gets the whole reply.
    assert_eq!(ping(&mut p.client()).unwrap(), b"+PONG\r\n");
}

#[test]
fn refuse_then_accept() {
    let mut p = Proxy::start();
    let mut open = p.client();
    p.command("refuse");
    let err = TcpStream::connect(&p.listen).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err:?}");
    // The connection made before carries on.
    assert_eq!(ping(&mut open).unwrap(), b"+PONG\r\n");
    p.command("accept");
    assert_eq!(ping(&mut p.client()).unwrap(), b"+PONG\r\n");
}

#[test]
fn half_close_passes_fin() {
    let p = Proxy::start();
    let mut c = p.client();
    c.write_all(b"PING\r\n").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut all = Vec::new();
    c.read_to_end(&mut all).unwrap();
    assert!(all.is_empty() || all == b"+PONG\r\n", "{all:?}");
}
