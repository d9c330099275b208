//! `ratewindow-faultproxy`: a TCP proxy that puts real network faults between a test and a real
//! server (Redis, PostgreSQL), driven by a line protocol.
//!
//! ```text
//! ratewindow-faultproxy --target 127.0.0.1:6379 [--listen 127.0.0.1:0] [--control 127.0.0.1:0] [--ignore-stdin]
//! ```
//!
//! On startup it prints one line of JSON on stdout, then serves:
//!
//! ```text
//! {"listen":"127.0.0.1:40811","control":"127.0.0.1:40812","target":"127.0.0.1:6379"}
//! ```
//!
//! Clients connect to `listen`; each connection opens its own connection to `target` and bytes are
//! forwarded both ways. Commands arrive one per line on the `control` port (any number of control
//! connections) or on stdin; each gets one reply line, `ok …` or `err …`, sent once the command has
//! taken effect (after `refuse` the port refuses; after `reset` the resets are sent).
//!
//! | command | effect |
//! |---|---|
//! | `latency <ms>` / `latency <up_ms> <down_ms>` | delay every chunk by that long (up: client → server, down: server → client); order is kept |
//! | `stall` | stop forwarding both ways, connections stay open (new ones too); data read is held |
//! | `unstall` | forward again, held data first |
//! | `reset` | close every open connection with a TCP RST, both sides; reply `ok reset=N` |
//! | `cut <n>` | the next chunk server → client, on any connection, is cut after `n` bytes, then that connection closes (FIN both sides) |
//! | `refuse` | close the listening socket: new connections get ECONNREFUSED; open ones carry on |
//! | `accept` | listen again on the same port |
//! | `resume` / `pass` | clear every fault: no latency, no stall, no pending cut, listening |
//! | `target <host:port>` | new connections go there |
//! | `stats` | `ok open=N accepted=N up=BYTES down=BYTES resets=N cuts=N` |
//! | `ping` | `ok` |
//! | `quit` | `ok`, then the process exits |
//!
//! Unless `--ignore-stdin` is given, the proxy exits when its stdin reaches end of file, so a test
//! runner that dies takes its proxies with it.
#![forbid(unsafe_code)]

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::{sleep_until, Instant};

/// The faults in force; every connection watches them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Faults {
    up_ms: u64,
    down_ms: u64,
    stalled: bool,
    refusing: bool,
}

struct Shared {
    listen: SocketAddr,
    target: Mutex<String>,
    faults: watch::Sender<Faults>,
    /// Whether the listening socket is open right now (the accept loop's answer to `refusing`).
    listening: watch::Sender<bool>,
    /// Bumped by `reset`; each open connection resets on a change.
    resets: watch::Sender<u64>,
    /// Bytes to let through of the next server → client chunk before closing, once.
    cut: Mutex<Option<usize>>,
    open: AtomicU64,
    accepted: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    resets_sent: AtomicU64,
    cuts_done: AtomicU64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Up,
    Down,
}

/// How one direction of a connection, or the whole connection, ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// The reader saw end of file and everything read was written (then the write side was shut).
    Eof,
    /// A socket failed (e.g. the peer reset): reset the other side too.
    Error,
    /// `cut` fired: close both sides normally.
    Cut,
    /// `reset` fired: RST both sides.
    Reset,
}

struct Args {
    target: String,
    listen: String,
    control: String,
    ignore_stdin: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        target: String::new(),
        listen: "127.0.0.1:0".into(),
        control: "127.0.0.1:0".into(),
        ignore_stdin: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--target" => args.target = value("--target")?,
            "--listen" => args.listen = value("--listen")?,
            "--control" => args.control = value("--control")?,
            "--ignore-stdin" => args.ignore_stdin = true,
            "-h" | "--help" => {
                return Err(
                    "usage: ratewindow-faultproxy --target HOST:PORT [--listen ADDR] \
                            [--control ADDR] [--ignore-stdin]"
                        .into(),
                )
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.target.is_empty() {
        return Err("--target HOST:PORT is required".into());
    }
    Ok(args)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("ratewindow-faultproxy: {message}");
            std::process::exit(2);
        }
    };
    let bind = |addr: String| async move {
        TcpListener::bind(&addr).await.unwrap_or_else(|e| {
            eprintln!("ratewindow-faultproxy: cannot listen on {addr}: {e}");
            std::process::exit(1);
        })
    };
    let listener = bind(args.listen).await;
    let control = bind(args.control).await;
    let listen = listener
        .local_addr()
        .expect("a bound socket has an address");
    let shared = Arc::new(Shared {
        listen,
        target: Mutex::new(args.target.clone()),
        faults: watch::channel(Faults::default()).0,
        listening: watch::channel(true).0,
        resets: watch::channel(0).0,
        cut: Mutex::new(None),
        open: AtomicU64::new(0),
        accepted: AtomicU64::new(0),
        bytes_up: AtomicU64::new(0),
        bytes_down: AtomicU64::new(0),
        resets_sent: AtomicU64::new(0),
        cuts_done: AtomicU64::new(0),
    });
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "{{\"listen\":\"{listen}\",\"control\":\"{}\",\"target\":\"{}\"}}",
            control.local_addr().expect("a bound socket has an address"),
            json_escape(&args.target),
        );
        let _ = out.flush();
    }
    tokio::spawn(serve(listener, shared.clone()));
    tokio::spawn(control_port(control, shared.clone()));
    if args.ignore_stdin {
        std::future::pending::<()>().await;
    } else {
        // Commands on stdin, replies on stdout; end of file ends the process.
        control_session(tokio::io::stdin(), tokio::io::stdout(), &shared).await;
    }
}

fn json_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The accept loop: closes the listening socket while `refusing`, binds the same address again after.
async fn serve(first: TcpListener, shared: Arc<Shared>) {
    let mut listener = Some(first);
    let mut faults = shared.faults.subscribe();
    loop {
        let refusing = faults.borrow_and_update().refusing;
        if refusing && listener.is_some() {
            // Connections the kernel completed but the loop has not accepted yet are open from the
            // client's side: take them before closing, so they carry on like the others.
            if let Some(l) = listener.take() {
                drain_backlog(l, &shared);
            } // the socket is closed now: connects get ECONNREFUSED
            shared.listening.send_replace(false);
        } else if !refusing && listener.is_none() {
            match rebind(shared.listen).await {
                Ok(again) => {
                    listener = Some(again);
                    shared.listening.send_replace(true);
                }
                Err(e) => {
                    eprintln!(
                        "ratewindow-faultproxy: cannot listen again on {}: {e}",
                        shared.listen
                    );
                    std::process::exit(1);
                }
            }
        }
        match &listener {
            Some(l) => tokio::select! {
                accepted = l.accept() => {
                    if let Ok((client, _)) = accepted {
                        tokio::spawn(connection(client, shared.clone()));
                    }
                }
                _ = faults.changed() => {}
            },
            None => {
                let _ = faults.changed().await;
            }
        }
    }
}

/// Accepts every connection already queued on `l` (without waiting), then closes `l`.
fn drain_backlog(l: TcpListener, shared: &Arc<Shared>) {
    let Ok(std) = l.into_std() else { return };
    // `into_std` keeps the socket non-blocking: `accept` answers `WouldBlock` once the queue is empty.
    while let Ok((client, _)) = std.accept() {
        if client.set_nonblocking(true).is_err() {
            continue;
        }
        if let Ok(client) = TcpStream::from_std(client) {
            tokio::spawn(connection(client, shared.clone()));
        }
    }
}

async fn rebind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    // SO_REUSEADDR is set by tokio; retry briefly in case the kernel still holds the port.
    let mut last = None;
    for _ in 0..50 {
        match TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(last.expect("at least one attempt"))
}

struct OpenGuard<'a>(&'a AtomicU64);
impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

async fn connection(mut client: TcpStream, shared: Arc<Shared>) {
    shared.accepted.fetch_add(1, Relaxed);
    shared.open.fetch_add(1, Relaxed);
    let _open = OpenGuard(&shared.open);
    let mut resets = shared.resets.subscribe();
    resets.borrow_and_update();
    let target = shared.target.lock().expect("target lock").clone();
    let mut server = tokio::select! {
        connected = TcpStream::connect(&target) => match connected {
            Ok(server) => server,
            Err(_) => {
                // The target refused or is unreachable: the client sees a reset.
                let _ = client.set_zero_linger();
                return;
            }
        },
        _ = resets.changed() => {
            let _ = client.set_zero_linger();
            shared.resets_sent.fetch_add(1, Relaxed);
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let end = {
        let (mut cr, mut cw) = client.split();
        let (mut sr, mut sw) = server.split();
        let up = pump(&mut cr, &mut sw, Dir::Up, &shared);
        let down = pump(&mut sr, &mut cw, Dir::Down, &shared);
        tokio::pin!(up, down);
        let (mut up_done, mut down_done) = (false, false);
        loop {
            tokio::select! {
                _ = resets.changed() => break End::Reset,
                end = &mut up, if !up_done => {
                    if end != End::Eof { break end; }
                    up_done = true;
                    if down_done { break End::Eof; }
                }
                end = &mut down, if !down_done => {
                    if end != End::Eof { break end; }
                    down_done = true;
                    if up_done { break End::Eof; }
                }
            }
        }
    };
    match end {
        End::Reset | End::Error => {
            // SO_LINGER 0, then close: the peer gets RST, not FIN.
            let _ = client.set_zero_linger();
            let _ = server.set_zero_linger();
            if end == End::Reset {
                shared.resets_sent.fetch_add(1, Relaxed);
            }
        }
        End::Cut => {
            shared.cuts_done.fetch_add(1, Relaxed);
            let _ = client.shutdown().await;
            let _ = server.shutdown().await;
        }
        End::Eof => {}
    }
}

/// Forwards one direction. A reader queues each chunk with the time it may be written (now plus the
/// latency in force); the writer waits for that time and for no stall, then writes it.
async fn pump(r: &mut ReadHalf<'_>, w: &mut WriteHalf<'_>, dir: Dir, shared: &Shared) -> End {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(64);
    let faults = shared.faults.subscribe();
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match r.read(&mut buf).await {
                Ok(0) => {
                    drop(tx);
                    return End::Eof;
                }
                Ok(n) => n,
                Err(_) => return End::Error,
            };
            let f = *faults.borrow();
            let delay = match dir {
                Dir::Up => f.up_ms,
                Dir::Down => f.down_ms,
            };
            let at = Instant::now() + Duration::from_millis(delay);
            if tx.send((at, buf[..n].to_vec())).await.is_err() {
                return End::Error;
            }
        }
    };
    let write = async {
        let mut faults = shared.faults.subscribe();
        while let Some((at, data)) = rx.recv().await {
            sleep_until(at).await;
            // Held while stalled (checked after the latency too, so a stall stops everything queued).
            if faults.wait_for(|f| !f.stalled).await.is_err() {
                return End::Error;
            }
            if dir == Dir::Down {
                let cut = shared.cut.lock().expect("cut lock").take();
                if let Some(n) = cut {
                    let n = n.min(data.len());
                    let _ = write_all(w, &data[..n]).await;
                    shared.bytes_down.fetch_add(n as u64, Relaxed);
                    return End::Cut;
                }
            }
            if write_all(w, &data).await.is_err() {
                return End::Error;
            }
            let counter = match dir {
                Dir::Up => &shared.bytes_up,
                Dir::Down => &shared.bytes_down,
            };
            counter.fetch_add(data.len() as u64, Relaxed);
        }
        // The reader saw end of file and everything it read is written: pass the half-close on.
        let _ = w.shutdown().await;
        End::Eof
    };
    tokio::pin!(read, write);
    let mut read_done = false;
    loop {
        tokio::select! {
            end = &mut read, if !read_done => {
                if end != End::Eof { return end; }
                read_done = true;
            }
            end = &mut write => return end,
        }
    }
}

async fn write_all<W: AsyncWrite + Unpin>(w: &mut W, data: &[u8]) -> std::io::Result<()> {
    w.write_all(data).await?;
    w.flush().await
}

async fn control_port(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        if let Ok((stream, _)) = listener.accept().await {
            let shared = shared.clone();
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let (r, w) = stream.into_split();
                control_session(r, w, &shared).await;
            });
        }
    }
}

/// Reads commands, one a line, and answers each with one line.
async fn control_session<R, W>(r: R, mut w: W, shared: &Shared)
where
    R: tokio::io::AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (reply, quit) = command(line, shared).await;
        if write_all(&mut w, format!("{reply}\n").as_bytes())
            .await
            .is_err()
        {
            return;
        }
        if quit {
            std::process::exit(0);
        }
    }
}

fn parse_ms(s: &str) -> Result<u64, String> {
    s.parse::<u64>()
        .map_err(|_| format!("err not a whole number of milliseconds: {s:?}"))
}

/// Runs one command; returns the reply line and whether to exit.
async fn command(line: &str, shared: &Shared) -> (String, bool) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let ok = |s: &str| {
        (
            if s.is_empty() {
                "ok".to_string()
            } else {
                format!("ok {s}")
            },
            false,
        )
    };
    let reply = match words.as_slice() {
        ["ping"] => return ok(""),
        ["quit"] => return ("ok".into(), true),
        ["latency", both] => parse_ms(both).map(|ms| {
            shared
                .faults
                .send_modify(|f| (f.up_ms, f.down_ms) = (ms, ms));
        }),
        ["latency", up, down] => parse_ms(up).and_then(|up| {
            parse_ms(down).map(|down| {
                shared
                    .faults
                    .send_modify(|f| (f.up_ms, f.down_ms) = (up, down))
            })
        }),
        ["stall"] => {
            shared.faults.send_modify(|f| f.stalled = true);
            Ok(())
        }
        ["unstall"] => {
            shared.faults.send_modify(|f| f.stalled = false);
            Ok(())
        }
        ["reset"] => {
            let open = shared.open.load(Relaxed);
            let before = shared.resets_sent.load(Relaxed);
            shared.resets.send_modify(|n| *n += 1);
            // Answer once the connection tasks have sent their resets (or after 1 s at most: some
            // of the `open` ones may have ended on their own meanwhile).
            let deadline = Instant::now() + Duration::from_secs(1);
            while shared.resets_sent.load(Relaxed) - before < open && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            return ok(&format!("reset={open}"));
        }
        ["cut", n] => n
            .parse::<usize>()
            .map_err(|_| format!("err not a byte count: {n:?}"))
            .map(|n| *shared.cut.lock().expect("cut lock") = Some(n)),
        ["refuse"] => {
            shared.faults.send_modify(|f| f.refusing = true);
            let _ = shared.listening.subscribe().wait_for(|l| !*l).await;
            Ok(())
        }
        ["accept"] => {
            shared.faults.send_modify(|f| f.refusing = false);
            let _ = shared.listening.subscribe().wait_for(|l| *l).await;
            Ok(())
        }
        ["resume"] | ["pass"] => {
            *shared.cut.lock().expect("cut lock") = None;
            shared.faults.send_replace(Faults::default());
            let _ = shared.listening.subscribe().wait_for(|l| *l).await;
            Ok(())
        }
        ["target", addr] => {
            *shared.target.lock().expect("target lock") = (*addr).to_string();
            Ok(())
        }
        ["stats"] => {
            let cut = *shared.cut.lock().expect("cut lock");
            return ok(&format!(
                "open={} accepted={} up={} down={} resets={} cuts={} cut_pending={}",
                shared.open.load(Relaxed),
                shared.accepted.load(Relaxed),
                shared.bytes_up.load(Relaxed),
                shared.bytes_down.load(Relaxed),
                shared.resets_sent.load(Relaxed),
                shared.cuts_done.load(Relaxed),
                cut.map_or("none".to_string(), |n| n.to_string()),
            ));
        }
        _ => Err(format!("err unknown command: {line:?}")),
    };
    match reply {
        Ok(()) => ok(""),
        Err(e) => (e, false),
    }
}
