"""Starts `ishizuki serve` for the test session and hands out clients for it.

Environment:
  ISHIZUKI_BIN          the ishizuki binary (default: $CARGO_TARGET_DIR/debug/ishizuki, else
                        target/debug/ishizuki in the repo)
  ISHIZUKI_TEST_MODELS  the folder holding the GGUF test models
  ISHIZUKI_FIXTURES     the reference fixtures folder (used when the repo has no `fixtures/`)
  ISHIZUKI_REQUIRE_MODELS=1  a missing model fails the tests that need it instead of skipping

Every server listens on 127.0.0.1 only; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import anthropic
import httpx
import openai
import pytest

REPO = Path(__file__).resolve().parents[2]
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
API_KEY = "test-key-5f2c9a"

# seconds: loading a model, one HTTP request (a debug build on 2 cores), stopping a server
START_TIMEOUT = 180
REQUEST_TIMEOUT = 120
STOP_TIMEOUT = 15


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "constrained: structured output that needs the constraint engine (llguidance)",
    )


def _binary() -> Path:
    if os.environ.get("ISHIZUKI_BIN"):
        return Path(os.environ["ISHIZUKI_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "debug" / "ishizuki"


def _models_dir() -> Path:
    if os.environ.get("ISHIZUKI_TEST_MODELS"):
        return Path(os.environ["ISHIZUKI_TEST_MODELS"])
    cache = Path(
        os.environ.get("ISHIZUKI_TEST_CACHE", Path.home() / ".cache" / "ishizuki-test")
    )
    return cache / "ishizuki" / "models"


def model_path(name: str) -> Path:
    path = _models_dir() / name
    if not path.is_file():
        message = f"test model {path} is missing (run `ishizuki pull`, or set ISHIZUKI_TEST_MODELS)"
        if os.environ.get("ISHIZUKI_REQUIRE_MODELS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def fixtures_dir() -> Path:
    local = REPO / "fixtures"
    if local.is_dir():
        return local
    if os.environ.get("ISHIZUKI_FIXTURES"):
        return Path(os.environ["ISHIZUKI_FIXTURES"])
    return REPO.parent / "shared" / "fixtures"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One running `ishizuki serve`, its log, and clients for it."""

    def __init__(self, model: Path, log_path: Path, args: list[str], api_key: str | None):
        self.model_file = model
        self.log_path = log_path
        self.api_key = api_key
        self.proc: subprocess.Popen | None = None
        self.port = 0
        binary = _binary()
        if not binary.is_file():
            pytest.fail(f"ishizuki binary {binary} not found (build it, or set ISHIZUKI_BIN)")
        env = {k: v for k, v in os.environ.items() if k != "ISHIZUKI_API_KEY"}
        # a port picked free may be taken before the server binds it: a few tries
        for _attempt in range(5):
            self.port = _free_port()
            cmd = [str(binary), "serve", "-m", str(model), "--host", "127.0.0.1",
                   "--port", str(self.port), "-t", "2", *args]
            if api_key:
                cmd += ["--api-key", api_key]
            self.log = open(log_path, "ab")
            self.log.write(f"\n$ {' '.join(cmd)}\n".encode())
            self.log.flush()
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, env=env
            )
            if self._wait_ready():
                break
            self.stop()
            if "bind" not in self.log_tail():
                pytest.fail(f"ishizuki serve did not become ready:\n{self.log_tail()}")
        else:
            pytest.fail(f"ishizuki serve could not bind a port:\n{self.log_tail()}")
        self.base_url = f"http://127.0.0.1:{self.port}"
        models = self.http().get("/v1/models")
        models.raise_for_status()
        self.model = models.json()["data"][0]["id"]
        self.n_ctx = models.json()["data"][0]["meta"]["n_ctx"]

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        url = f"http://127.0.0.1:{self.port}/health"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        pytest.fail(f"ishizuki serve not ready after {START_TIMEOUT}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        self.log.flush()
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
        self.log.close()

    # clients -----------------------------------------------------------------------------------

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def http(self, **kw) -> httpx.Client:
        return httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}",
            timeout=REQUEST_TIMEOUT,
            headers=self.headers(),
            **kw,
        )

    def openai(self, **kw) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.base_url}/v1",
            api_key=self.api_key or "unused",
            timeout=REQUEST_TIMEOUT,
            max_retries=0,
            **kw,
        )

    def anthropic(self, **kw) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            base_url=self.base_url,
            api_key=self.api_key or "unused",
            timeout=REQUEST_TIMEOUT,
            max_retries=0,
            **kw,
        )

    def post(self, path: str, body, **kw) -> httpx.Response:
        """A raw POST; `body` is JSON-encoded unless it is bytes."""
        with self.http() as c:
            if isinstance(body, (bytes, bytearray)):
                headers = {"content-type": "application/json", **kw.pop("headers", {})}
                return c.post(path, content=bytes(body), headers=headers, **kw)
            return c.post(path, json=body, **kw)

    def sse(self, path: str, body: dict, params=None, headers=None,
            stop_after: int | None = None) -> list[tuple[str | None, object]]:
        """A raw streamed POST as (event name, parsed data) pairs; `[DONE]` stays a string.
        With `stop_after`, the stream is dropped after that many events."""
        events: list[tuple[str | None, object]] = []
        with self.http() as c, c.stream("POST", path, json=body, params=params,
                                        headers=headers) as r:
            assert r.status_code == 200, r.read()
            assert r.headers["content-type"].startswith("text/event-stream")
            for name, data in parse_sse(r.iter_lines()):
                events.append((name, data if data == "[DONE]" else json.loads(data)))
                if stop_after is not None and len(events) >= stop_after:
                    break
        return events


def parse_sse(lines) -> Iterator[tuple[str | None, str]]:
    """Server-sent events as (event name, data); fields in any order, dispatched on a blank line."""
    name, data = None, []
    for line in lines:
        if line == "":
            if data:
                yield name, "\n".join(data)
            name, data = None, []
        elif line.startswith(":"):
            continue  # a comment (keep-alive)
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
    if data:
        yield name, "\n".join(data)


def _server(request, tmp_path_factory, name: str, model: str, args: list[str],
            api_key: str | None = None) -> Iterator[Server]:
    path = model_path(model)
    log = tmp_path_factory.mktemp("logs") / f"{name}.log"
    server = Server(path, log, args, api_key)
    try:
        yield server
    finally:
        alive = server.alive()
        server.stop()
        if not alive:
            pytest.fail(f"the {name} server died during the tests:\n{server.log_tail()}")


@pytest.fixture(scope="session")
def smol(request, tmp_path_factory) -> Iterator[Server]:
    """SmolLM2-135M-Instruct with a 2048-token context (the 1024-token fixture passage fits)."""
    yield from _server(request, tmp_path_factory, "smollm2", SMOLLM2, ["--ctx", "2048"])


@pytest.fixture(scope="session")
def qwen(request, tmp_path_factory) -> Iterator[Server]:
    """Qwen2.5-Coder-0.5B-Instruct: its template renders tools (Hermes `<tool_call>`)."""
    yield from _server(request, tmp_path_factory, "qwen", QWEN, ["--ctx", "4096"])


@pytest.fixture(scope="module")
def keyed(request, tmp_path_factory) -> Iterator[Server]:
    """SmolLM2 behind --api-key (module scope: it is stopped once the auth tests are done)."""
    yield from _server(request, tmp_path_factory, "keyed", SMOLLM2, ["--ctx", "512"],
                       api_key=API_KEY)


@pytest.fixture(scope="session")
def fixtures() -> Path:
    d = fixtures_dir()
    if not (d / "ref-smollm2-135m.json").is_file():
        pytest.fail(f"fixtures not found in {d} (set ISHIZUKI_FIXTURES)")
    return d


def error_shape(protocol: str, r: httpx.Response) -> dict:
    """Checks a 4xx body's shape for its protocol and returns the inner error object."""
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    body = r.json()
    if protocol == "openai":
        assert set(body) == {"error"}, body
        err = body["error"]
        assert isinstance(err["message"], str) and err["message"], body
        assert isinstance(err["type"], str) and err["type"], body
        assert "param" in err and "code" in err, body
        return err
    assert protocol == "anthropic"
    assert body["type"] == "error", body
    err = body["error"]
    assert isinstance(err["type"], str) and err["type"], body
    assert isinstance(err["message"], str) and err["message"], body
    return err
