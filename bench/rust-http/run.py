#!/usr/bin/env python3
"""axum + ratewindow-tower vs axum + tower-governor: one interleaved run of wrk rounds.

Builds the server (release, its own target dir), starts the four servers (two guards x two
scenarios) on loopback, then for each scenario runs ROUNDS rounds of `wrk` against ratewindow then
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
    ("ratewindow", "allowed"): 38101,
    ("governor", "allowed"): 38102,
    ("ratewindow", "refused"): 38103,
    ("governor", "refused"): 38104,
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


def wrk(port: int, seconds: int) -> float:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s", f"http://127.0.0.1:{port}/"],
        capture_output=True, text=True, check=True,
    ).stdout
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def main() -> None:
    binary = build()
    servers = [subprocess.Popen([binary, g, s, str(p)]) for (g, s), p in PORTS.items()]
    try:
        for port in PORTS.values():
            wait_up(port)
        print(f"load average before: {os.getloadavg()}")
        for scenario in ("allowed", "refused"):
            a, b = PORTS[("ratewindow", scenario)], PORTS[("governor", scenario)]
            for port in (a, b):
                for _ in range(12):  # past the refused scenario's ten
                    probe(port)
                status, headers = probe(port)
                shown = {k: v for k, v in headers.items() if "ratelimit" in k.lower() or "retry" in k.lower()}
                print(f"  {scenario} :{port} -> {status} {shown}")
                wrk(port, 1)  # warm-up
            ratios = []
            for r in range(ROUNDS):
                ra, rb = wrk(a, SECONDS), wrk(b, SECONDS)
                ratios.append(ra / rb)
                print(f"  {scenario} round {r + 1}: ratewindow {ra:,.0f} req/s, governor {rb:,.0f} req/s, ratio {ra / rb:.3f}")
            print(f"{scenario}: median ratio ratewindow/governor = {statistics.median(ratios):.3f} "
                  f"(min {min(ratios):.3f}, max {max(ratios):.3f}), load average {os.getloadavg()}")
    finally:
        for s in servers:
            s.terminate()
        for s in servers:
            s.wait()


if __name__ == "__main__":
    main()
