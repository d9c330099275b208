"""Server cost per call of the GCRA and sliding-window counter scripts (issue 17), on a private
``redis-server``: callgrind instructions (``--callgrind``, load-independent: the whole server process,
reading the pipelined request, the script, the reply) or ``INFO commandstats`` ``usec_per_call``.

Parts, each over ``--keys`` keys pipelined, by ``EVALSHA`` with the arguments the core sends
(``core/src/call/rates.rs``, limits whose times are whole ms):

- ``return 1`` with 3 and 7 arguments (the floor);
- GCRA ``allowed full`` (a use a ms, every bucket full), ``allowed ahead`` (10 a minute, one use
  taken first: the TAT ahead of now), ``refused`` (5 a minute, filled first), ``peek refused``,
  ``peek full``;
- counter ``allowed new key``, ``allowed in use``, ``refused`` (5 a minute, filled), ``peek refused``.

``--before-gcra FILE`` / ``--before-counter FILE`` measure an earlier script too, with the 7 / 5
arguments the core sent before bc35248 / 4f2018d (``git show bc35248~1:core/src/redis/gcra.lua``).

Run: ``python3 bench/redis_rates.py --callgrind [--keys 1000] [--port 6485]`` (valgrind and
``redis-server``; no Python packages) or without ``--callgrind`` for commandstats (a quiet machine).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import tempfile
import time
from typing import Any, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Resp:
    """A minimal RESP2 client: enough for EVALSHA, SCRIPT LOAD, INFO and pipelining."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    @staticmethod
    def encode(args: Sequence[object]) -> bytes:
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(out)

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(1 << 20)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _bytes(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self.buf += self.sock.recv(1 << 20)
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._bytes(n).decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ValueError(line)

    def call(self, *args: object) -> Any:
        self.sock.sendall(self.encode(args))
        return self.read()

    def pipe(self, commands: Sequence[Sequence[object]], batch: int = 1000) -> list[Any]:
        out: list[Any] = []
        for i in range(0, len(commands), batch):
            part = commands[i:i + batch]
            self.sock.sendall(b"".join(self.encode(c) for c in part))
            out.extend(self.read() for _ in part)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=6485)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--before-gcra", action="append", default=[])
    parser.add_argument("--before-counter", action="append", default=[])
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="rates-bench-")
    command = ["redis-server", "--port", str(args.port), "--save", "", "--appendonly", "no"]
    if args.callgrind:
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                   f"--callgrind-out-file={work}/callgrind.out.%p", *command]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                r = Resp(args.port)
                r.call("PING")
                break
            except OSError:
                time.sleep(0.1)

        def control(*what: str) -> None:
            subprocess.run(["callgrind_control", *what, str(server.pid)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def dump() -> int:
            before = set(os.listdir(work))
            control("--dump")
            for _ in range(400):
                new = [f for f in set(os.listdir(work)) - before if f.startswith("callgrind.out")]
                if new:
                    for _ in range(100):
                        with open(os.path.join(work, new[0])) as f:
                            for line in f:
                                if line.startswith("totals:"):
                                    return int(line.split()[1])
                        time.sleep(0.05)
                time.sleep(0.05)
            raise RuntimeError("callgrind wrote no dump")

        def timed(commands: Sequence[Sequence[object]]) -> tuple[float, list[Any]]:
            if args.callgrind:
                dump()
                control("--instr=on")
            else:
                r.call("CONFIG", "RESETSTAT")
            out = r.pipe(commands)
            if args.callgrind:
                control("--instr=off")
                return dump() / len(commands), out
            info = r.call("INFO", "commandstats")
            m = re.search(r"cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([\d.]+)", info)
            if m is None:
                raise RuntimeError("no cmdstat_evalsha in INFO commandstats")
            return float(m.group(1)), out

        unit = "instructions a call" if args.callgrind else "usec_per_call"
        print(f"{'part':44s} {unit:>20s}   a reply")

        def part(label: str, sha: str, prefix: str, argv: list[str], fill: int = 0) -> None:
            keys = [f"{prefix}:{i}" for i in range(args.keys)]
            for _ in range(fill):
                r.pipe([["EVALSHA", sha, 1, k, *argv] for k in keys])
            cost, out = timed([["EVALSHA", sha, 1, k, *argv] for k in keys])
            errors = [o for o in out if isinstance(o, Exception)]
            if errors:
                raise SystemExit(f"{label}: {errors[0]}")
            print(f"{label:44s} {cost:20,.1f}   {out[0]!r}", flush=True)

        one = r.call("SCRIPT", "LOAD", "return 1")
        part("return 1, 3 arguments", one, "one3", ["1"] * 3)
        part("return 1, 7 arguments", one, "one7", ["1"] * 7)
        gcras = [(f, "old") for f in args.before_gcra] + [(os.path.join(ROOT, "core/src/redis/gcra.lua"), "new")]
        for i, (path, style) in enumerate(gcras):
            sha = r.call("SCRIPT", "LOAD", open(path).read())
            name = f"gcra {os.path.basename(path)}"

            def a(consume: bool, uses: str, q: str, d: str, tau: str) -> list[str]:
                if style == "old":
                    return ["c" if consume else "p", uses, q, "0", d, "0", tau]
                return [tau if consume else "p", q, d]

            part(f"{name} allowed full", sha, f"g{i}af", a(True, "1000000", "1", "999999", "1000000"))
            ahead = a(True, "10", "6000", "54000", "60000")
            part(f"{name} allowed ahead", sha, f"g{i}aa", ahead, fill=1)
            refused = a(True, "5", "12000", "48000", "60000")
            part(f"{name} refused", sha, f"g{i}rf", refused, fill=5)
            part(f"{name} peek refused", sha, f"g{i}rf", a(False, "5", "12000", "48000", "60000"))
            part(f"{name} peek full", sha, f"g{i}pf", a(False, "5", "12000", "48000", "60000"))
        counters = [(f, "old") for f in args.before_counter] + [(os.path.join(ROOT, "core/src/redis/counter.lua"), "new")]
        for i, (path, style) in enumerate(counters):
            sha = r.call("SCRIPT", "LOAD", open(path).read())
            name = f"counter {os.path.basename(path)}"

            def c(consume: bool, uses: str, w: str, cost: str = "1") -> list[str]:
                if style == "old":
                    return ["c" if consume else "p", uses, w, cost, str(2 * int(w))]
                return [str(2 * int(w)) if consume else "p", uses, w, cost]

            part(f"{name} allowed new key", sha, f"c{i}an", c(True, "1000000", "1000000"))
            part(f"{name} allowed in use", sha, f"c{i}an", c(True, "1000000", "1000000"))
            part(f"{name} refused", sha, f"c{i}rf", c(True, "5", "60000"), fill=5)
            part(f"{name} peek refused", sha, f"c{i}rf", c(False, "5", "60000"))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
