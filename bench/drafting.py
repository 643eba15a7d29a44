#!/usr/bin/env python3
"""Drafting's speedup through `ishizuki serve` (chat API, streamed): decode tok/s with drafting
on against the same request with `"draft": false`, median of alternating rounds, per workload:
  edit      greedy: a 40-80-line stdlib function pasted with "rename one parameter"
  edit-t0.7 the same edit sampled at temperature 0.7 (seed = round)
  prose     greedy: a short story
With --draft-model, a second server drafts with that model where lookup finds nothing: its
greedy output must equal plain decoding, and it reports its speedup or that it turned itself off.
  bench/drafting.py -m MODEL [-t 2] [--rounds 3] [--draft-model DRAFT]
ISHIZUKI_BIN names the binary (default target/release/ishizuki). Stdlib only."""

import argparse
import http.client
import inspect
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUNCTION = textwrap.dedent(inspect.getsource(shutil.copytree))
EDIT = ("Rename the parameter `dirs_exist_ok` to `allow_existing` in this function. Reply with "
        f"the whole function and nothing else.\n\n```python\n{FUNCTION}```")
PROSE = "Write a short story about a lighthouse keeper who finds a message in a bottle."
WORKLOADS = {
    "edit": (EDIT, 0.0, 800),
    "edit-t0.7": (EDIT, 0.7, 800),
    "prose": (PROSE, 0.0, 256),
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, model, threads, ctx, extra, log_dir, name):
        self.name, self.port = name, free_port()
        self.log = Path(log_dir) / f"{name}.log"
        args = [binary, "serve", "-m", model, "-t", str(threads), "--ctx", str(ctx),
                "--port", str(self.port), "--alias", "m", *extra]
        self.proc = subprocess.Popen(args, stdout=open(self.log, "w"), stderr=subprocess.STDOUT)

    def wait(self, timeout=600):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"{self.name} exited:\n{self.log.read_text()[-3000:]}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.25)
        sys.exit(f"{self.name} not ready after {timeout}s")

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("GET", path)
        return c.getresponse().read().decode()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def chat(server, prompt, temperature, max_tokens, seed, draft):
    """One streamed chat completion: decode tok/s, the text, the usage."""
    body = {"model": "m", "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": temperature, "seed": seed, "stream": True,
            "stream_options": {"include_usage": True}}
    if not draft:
        body["draft"] = False
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=1200)
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        sys.exit(f"{server.name}: HTTP {resp.status}: {resp.read(2000)!r}")
    t_first = t_last = None
    text, usage = [], {}
    for line in resp:
        line = line.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        ev = json.loads(line[5:])
        usage = ev.get("usage") or usage
        for ch in ev.get("choices") or []:
            piece = (ch.get("delta") or {}).get("content") or ""
            if piece:
                now = time.monotonic()
                t_first = t_first if t_first is not None else now
                t_last = now
                text.append(piece)
    conn.close()
    n = usage.get("completion_tokens", 0)
    span = (t_last - t_first) if t_first is not None else 0
    rate = (n - 1) / span if n > 1 and span > 0 else float("nan")
    return {"rate": rate, "text": "".join(text), "n": n, "draft": usage.get("draft")}


def measure(server, rounds, names, draft_on=True):
    """Per workload: decode rates on and off (alternating which goes first), texts, drafting."""
    out = {w: {"on": [], "off": [], "texts": [], "drafts": []} for w in names}
    for rnd in range(rounds):
        for w in names:
            prompt, temp, max_tokens = WORKLOADS[w]
            arms = [True, False] if rnd % 2 == 0 else [False, True]
            texts = {}
            for on in arms:
                r = chat(server, prompt, temp, max_tokens, seed=rnd, draft=on and draft_on)
                out[w]["on" if on else "off"].append(r["rate"])
                texts[on] = r["text"]
                if on:
                    out[w]["drafts"].append(r["draft"])
                print(f"  round {rnd + 1} {w:9} draft {'on ' if on else 'off'} "
                      f"{r['rate']:6.1f} tok/s, {r['n']} tokens"
                      + (f", {fmt_draft(r['draft'])}" if on and r["draft"] else ""), flush=True)
            out[w]["texts"].append(texts)
    return out


def fmt_draft(d):
    return (f"{d['source']}: kept {d['accepted_tokens']}/{d['drafted_tokens']} "
            f"({100 * d['acceptance_rate']:.0f}%), {d['tokens_per_step']:.2f} tokens/step")


def report(title, res):
    print(f"\n{title}")
    print("| workload | draft on tok/s | off tok/s | speedup | kept | tokens/step | greedy equal |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for w, r in res.items():
        on, off = statistics.median(r["on"]), statistics.median(r["off"])
        ds = [d for d in r["drafts"] if d]
        kept = sum(d["accepted_tokens"] for d in ds) / max(1, sum(d["drafted_tokens"] for d in ds))
        tps = statistics.median([d["tokens_per_step"] for d in ds]) if ds else 1.0
        greedy = WORKLOADS[w][1] == 0
        equal = all(t[True] == t[False] for t in r["texts"]) if greedy else "(sampled)"
        print(f"| {w} | {on:.1f} | {off:.1f} | {on / off:.2f}x | {100 * kept:.0f}% | {tps:.2f} "
              f"| {equal} |")
        if greedy and equal is not True:
            print(f"ERROR: {w}: drafting changed the greedy output", file=sys.stderr)
            sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--draft-model")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--skip-lookup", action="store_true", help="only the --draft-model server")
    a = ap.parse_args()
    binary = os.environ.get("ISHIZUKI_BIN", str(ROOT / "target/release/ishizuki"))
    names = [w for w in a.workloads.split(",") if w]
    logs = tempfile.mkdtemp(prefix="ishizuki-drafting-")
    print(f"model {a.model}, {a.threads} threads, {a.rounds} rounds, logs in {logs}")
    servers = []
    try:
        if not a.skip_lookup:
            lookup = Server(binary, a.model, a.threads, a.ctx, [], logs, "lookup")
            servers.append(lookup)
            lookup.wait()
            chat(lookup, "Hello", 0, 8, 0, True)  # warm-up
            report("prompt lookup (the default)", measure(lookup, a.rounds, names))
            lookup.stop()
        if a.draft_model:
            pair = Server(binary, a.model, a.threads, a.ctx, ["--draft-model", a.draft_model],
                          logs, "draft-model")
            servers.append(pair)
            pair.wait()
            chat(pair, "Hello", 0, 8, 0, True)
            greedy = [w for w in names if WORKLOADS[w][1] == 0]
            report(f"draft model {a.draft_model}", measure(pair, a.rounds, greedy))
            metrics = pair.get("/metrics")
            active = [l for l in metrics.splitlines() if l.startswith("ishizuki:draft_model_active")]
            print(f"\n{active[0] if active else 'no draft_model_active gauge'}"
                  " (0: the draft model turned itself off; later requests drafted by lookup)")
            for line in pair.log.read_text().splitlines():
                if "does not pay" in line:
                    print(line)
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()
