"""Drives ``ratewindow-faultproxy`` (``tests/faultproxy``) from the Python tests.

The proxy is a small Rust binary that forwards TCP from a port of its own to a real server and puts
faults in between on command. This module builds nothing: ``scripts/test-python.sh`` runs
``cargo build --release -p ratewindow-faultproxy`` first, and ``RATEWINDOW_FAULTPROXY`` may name
another binary.

.. code-block:: python

    with FaultProxy("127.0.0.1", 6379) as proxy:
        client = redis.Redis(host=proxy.host, port=proxy.port)
        proxy.latency(300)          # every chunk, both ways, 300 ms late
        proxy.stall()               # nothing forwarded; connections stay open
        proxy.reset()               # RST on every open connection
        proxy.cut(3)                # the next reply cut after 3 bytes, then closed
        proxy.refuse()              # the port refuses new connections
        proxy.resume()              # all faults cleared
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]


def binary() -> Path:
    """The proxy binary: ``$RATEWINDOW_FAULTPROXY`` or the workspace's release build."""
    named = os.environ.get("RATEWINDOW_FAULTPROXY")
    if named:
        return Path(named)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "release" / "ratewindow-faultproxy"


class FaultProxy:
    """A running proxy in front of ``target_host:target_port``; stopped by :meth:`close`."""

    def __init__(self, target_host: str, target_port: int) -> None:
        path = binary()
        if not path.exists():
            raise RuntimeError(
                f"{path} is missing: run `cargo build --release -p ratewindow-faultproxy` "
                "(scripts/test-python.sh does)"
            )
        # stdin stays a pipe: the proxy exits when it closes, so it dies with this process.
        self._process = subprocess.Popen(
            [str(path), "--target", f"{target_host}:{target_port}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            self._process.kill()
            raise RuntimeError("ratewindow-faultproxy exited before printing its ports")
        ports = json.loads(line)
        host, port = ports["listen"].rsplit(":", 1)
        self.host: str = host
        self.port: int = int(port)
        chost, cport = ports["control"].rsplit(":", 1)
        self._control = socket.create_connection((chost, int(cport)), timeout=10)
        self._reader = self._control.makefile("r", encoding="utf-8", newline="\n")

    def command(self, line: str) -> str:
        """Sends one command and returns the text after ``ok``; raises on ``err``."""
        self._control.sendall(line.encode() + b"\n")
        reply = self._reader.readline().strip()
        if reply == "ok":
            return ""
        if reply.startswith("ok "):
            return reply[3:]
        raise RuntimeError(f"faultproxy {line!r}: {reply or 'no reply'}")

    def latency(self, up_ms: int, down_ms: int | None = None) -> None:
        """Delays every chunk: client to server by ``up_ms``, server to client by ``down_ms``
        (``up_ms`` when not given)."""
        self.command(f"latency {up_ms} {up_ms if down_ms is None else down_ms}")

    def stall(self) -> None:
        """Stops forwarding both ways; connections, old and new, stay open."""
        self.command("stall")

    def unstall(self) -> None:
        """Forwards again, the data held first."""
        self.command("unstall")

    def reset(self) -> int:
        """Closes every open connection with a TCP RST on both sides; returns how many were open."""
        return int(self.command("reset").split("=", 1)[1])

    def cut(self, after_bytes: int) -> None:
        """Cuts the next server-to-client chunk after ``after_bytes`` bytes, then closes that
        connection."""
        self.command(f"cut {after_bytes}")

    def refuse(self) -> None:
        """Closes the listening port: new connections are refused, open ones carry on."""
        self.command("refuse")

    def accept(self) -> None:
        """Listens again on the same port."""
        self.command("accept")

    def resume(self) -> None:
        """Clears every fault."""
        self.command("resume")

    def stats(self) -> dict[str, str]:
        """``open``, ``accepted``, ``up``, ``down`` (bytes), ``resets``, ``cuts``, ``cut_pending``."""
        pairs = (pair.partition("=") for pair in self.command("stats").split())
        return {name: value for name, _, value in pairs}

    def close(self) -> None:
        """Stops the proxy (its connections close with it)."""
        try:
            self._reader.close()
            self._control.close()
        finally:
            if self._process.stdin is not None:
                self._process.stdin.close()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            if self._process.stdout is not None:
                self._process.stdout.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
