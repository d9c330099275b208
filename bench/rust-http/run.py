#!/usr/bin/env python3
"""axum + ratewindow-tower vs axum + tower-governor: one interleaved run of wrk rounds.

Builds the server (release, its own target dir), starts the six servers (two guards x three
scenarios: allowed with the rate-limit fields, allowed without any, refused) on loopback, then for each scenario runs ROUNDS rounds of `wrk` against ratewindow then
governor, and prints each round's requests/s, the median of the per-round ratios and the load average.
Usage: python3 bench/rust-http/run.py [rounds] [seconds]
"""

import os
import re
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TARGET = os.path.join(ROOT, "target", "bench-rust-http")
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
SECONDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
CONNECTIONS = 32
PORTS = {
    ("ratewindow", "allowed"): 18001,
    ("governor", "allowed"): 18002,
    ("ratewindow", "refused"): 18003,
    ("governor", "refused"): 18004,
    ("ratewindow", "allowed-bare"): 18005,
    ("governor", "allowed-bare"): 18006,
}


def build() -> str:
    env = dict(os.environ, CARGO_TARGET_DIR=TARGET)
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=HERE, env=env, check=True)
    return os.path.join(TARGET, "release", "ratewindow-bench-rust-http")


def probe(port: int) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            return r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers)


def wait_up(port: int) -> None:
    for _ in range(100):
        try:
            probe(port)
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"server on {port} did not start")


def wrk(port: int, seconds: int) -> tuple[float, int]:
    """Requests per second and requests served."""
    out = subprocess.run(
        ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s", f"http://127.0.0.1:{port}/"],
        capture_output=True, text=True, check=True,
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return rate, int(re.search(r"(\d+) requests in", out).group(1))


def cpu_s(pid: int) -> float:
    """The process's CPU time so far (user + system), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(pid: int, port: int, seconds: int) -> tuple[float, float]:
    """Requests per second, and the server's CPU µs per request, of one wrk run."""
    before = cpu_s(pid)
    rate, total = wrk(port, seconds)
    return rate, (cpu_s(pid) - before) * 1e6 / max(total, 1)


def main() -> None:
    binary = build()
    servers = [subprocess.Popen([binary, g, s, str(p)]) for (g, s), p in PORTS.items()]
    pids = {p: server.pid for p, server in zip(PORTS.values(), servers)}
    try:
        for port in PORTS.values():
            wait_up(port)
        print(f"load average before: {os.getloadavg()}")
        for scenario in ("allowed", "allowed-bare", "refused"):
            a, b = PORTS[("ratewindow", scenario)], PORTS[("governor", scenario)]
            for port in (a, b):
                for _ in range(12):  # past the refused scenario's ten
                    probe(port)
                status, headers = probe(port)
                shown = {k: v for k, v in headers.items() if "ratelimit" in k.lower() or "retry" in k.lower()}
                print(f"  {scenario} :{port} -> {status} {shown}")
                wrk(port, 1)  # warm-up
            ratios, cpu_ratios = [], []
            for r in range(ROUNDS):
                # Interleaved a, b, b, a, a, b ...: neither side always runs first.
                order = (a, b) if r % 2 == 0 else (b, a)
                got = {port: measured(pids[port], port, SECONDS) for port in order}
                (ra, ca), (rb, cb) = got[a], got[b]
                ratios.append(ra / rb)
                cpu_ratios.append(cb / ca)
                print(f"  {scenario} round {r + 1}: ratewindow {ra:,.0f} req/s {ca:.1f} CPU us/req, "
                      f"governor {rb:,.0f} req/s {cb:.1f} CPU us/req, req/s ratio {ra / rb:.3f}, "
                      f"CPU ratio (governor/ours) {cb / ca:.3f}")
            print(f"{scenario}: median ratio ratewindow/governor = {statistics.median(ratios):.3f} "
                  f"(min {min(ratios):.3f}, max {max(ratios):.3f}); server CPU per request, "
                  f"governor/ratewindow = {statistics.median(cpu_ratios):.3f} "
                  f"(min {min(cpu_ratios):.3f}, max {max(cpu_ratios):.3f}); load average {os.getloadavg()}")
    finally:
        for s in servers:
            s.terminate()
        for s in servers:
            s.wait()


if __name__ == "__main__":
    main()
