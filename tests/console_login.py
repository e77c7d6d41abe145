"""The console's login from a test (docs/CONSOLE.md, "Security"): SCRAM users written into a data
directory before the broker starts (``oncelog users add --data-dir``), a login over HTTP that
returns the session cookie, and GET/POST with it."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from pathlib import Path


def add_users(data_dir: Path, users: dict[str, str]) -> None:
    for user, pw in users.items():
        r = subprocess.run([sys.executable, "-m", "oncelog", "users", "add", user, "--password", pw, "--mechanism",
                            "SCRAM-SHA-256", "--data-dir", str(data_dir)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr


def request(address: str, method: str, path: str, *, cookie: str | None = None, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], dict]:
    """(status, headers (lower-case names; Set-Cookie joined), JSON body)."""
    c = http.client.HTTPConnection(*address.split(":"), timeout=20)
    try:
        hdrs = dict(headers or {})
        if cookie:
            hdrs["Cookie"] = cookie
        c.request(method, path, body=body, headers=hdrs)
        r = c.getresponse()
        raw = r.read()
        out = {k.lower(): v for k, v in r.getheaders()}
        out["set-cookie"] = "\n".join(v for k, v in r.getheaders() if k.lower() == "set-cookie")
        is_json = out.get("content-type", "").startswith("application/json")
        return r.status, out, json.loads(raw) if raw and is_json else {}
    finally:
        c.close()


def post(address: str, path: str, action: str, doc: dict, cookie: str | None = None) -> tuple[int, dict[str, str], dict]:
    return request(address, "POST", path, cookie=cookie, body=json.dumps(doc).encode(),
                   headers={"Content-Type": "application/json", "X-Oncelog-Console": action})


def login(address: str, user: str, password: str) -> str:
    """Log in; returns the ``Cookie`` header value of the session."""
    status, headers, doc = post(address, "/api/login", "login", {"username": user, "password": password})
    assert status == 200, doc
    return headers["set-cookie"].split(";", 1)[0]


def get(address: str, path: str, cookie: str | None = None) -> tuple[int, dict]:
    status, _headers, doc = request(address, "GET", path, cookie=cookie)
    return status, doc
