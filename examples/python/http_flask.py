"""Guard Flask views with a named limiter: only failed logins count (a limit's ``after()``), a custom
refusal (its ``response()``), 429 with Retry-After and the IETF RateLimit fields, legacy X-RateLimit-*.

Run: ``.venv/bin/python examples/python/http_flask.py`` serves the app on a free loopback port
(werkzeug's threaded server), sends a few requests with httpx and prints the answers; ``--serve``
keeps it running on port 8000.
"""

from __future__ import annotations

import logging
import sys
import threading

import flask
import httpx
from werkzeug.serving import make_server

from ratewindow import Limit, RateLimiter
from ratewindow.flask import HttpRequest, throttle

limiter = RateLimiter()  # MemoryStore; RateLimiter(RedisStore.using(...)) to share between processes


def locked_out(request: HttpRequest, headers: dict[str, str]) -> flask.Response:
    return flask.Response("Too many failed logins: wait a minute.", 429, headers=headers)


def failed(response: flask.Response) -> bool:
    return response.status_code == 401  # successful logins cost nothing


limiter.for_("login", lambda request: Limit.per_minute(3).by(request.ip).after(failed).response(locked_out))

app = flask.Flask(__name__)


@app.post("/login")
@throttle(limiter, "login", legacy=True)
def login() -> tuple[str, int]:
    ok = flask.request.form.get("password") == "open sesame"
    return ("welcome", 200) if ok else ("wrong password", 401)


def demo() -> None:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request log: the demo prints its own lines
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}") as client:
        for password in ["open sesame", "open sesame", "guess", "guess", "guess", "guess", "open sesame"]:
            answer = client.post("/login", data={"password": password})
            print(f"{password:12} {answer.status_code} {answer.text!r:45} "
                  f"Retry-After={answer.headers.get('retry-after', '-')} "
                  f"X-RateLimit-Remaining={answer.headers.get('x-ratelimit-remaining', '-')}")
    server.shutdown()
    thread.join()


if __name__ == "__main__":
    if "--serve" in sys.argv:
        app.run(port=8000)
    else:
        demo()
