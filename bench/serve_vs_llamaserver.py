"""Alternates `ishizuki serve` and `llama-server` through /v1/chat/completions (streaming) and prints
median TTFT, decode speed and second-turn TTFT per server, and their ratios.

Called by serve-vs-llamaserver.sh, which starts both servers (same GGUF, threads, context) and stops
them. Standard library only. Each round, per server (the order flips every round):
  turn 1: one user message of about --prompt-tokens tokens, unique from its first words (the round
          number), so no prefix cache helps; max_tokens --gen, temperature 0, ignore_eos (llama-server
          honours it; ishizuki may stop early: decode is then measured over what it generated).
          TTFT = request sent -> first chunk carrying text; decode tok/s = (completion_tokens - 1) /
          (last text chunk - first text chunk).
  turn 2: turn 1's user message + the assistant reply + a short new user message: its TTFT shows what
          the prefix cache saves.
"""
import argparse
import http.client
import json
import os
import random
import re
import statistics
import sys
import time

WORDS = {
    "adj": "quiet old bright narrow wooden distant cold patient heavy gentle broken golden hidden "
    "early rusty silent crowded careful tired small ancient open".split(),
    "noun": "river lantern farmer bridge market teacher harbor engine garden letter mountain "
    "village window merchant library forest station baker clock road ship painter orchard tower".split(),
    "verb": "watched repaired carried followed painted crossed opened visited measured described "
    "guarded remembered counted cleaned built found".split(),
    "time": "at dawn|after the rain|before winter|every morning|late at night|during the festival|"
    "in early spring|on market day".split("|"),
}
FOLLOW_UP = "Thank you. Now give that story a short title."


def sentence(rng):
    w = {k: rng.choice(v) for k, v in WORDS.items()}
    a2, n2 = rng.choice(WORDS["adj"]), rng.choice(WORDS["noun"])
    return f"The {w['adj']} {w['noun']} {w['verb']} the {a2} {n2} {w['time']}."


def prompt_text(tag, n_sentences):
    """A user message unique from its first words (tag), then n_sentences of notes, then the ask."""
    rng = random.Random(tag)
    notes = " ".join(sentence(rng) for _ in range(n_sentences))
    return (f"{tag}. Here are my travel notes: {notes}\n\n"
            "Retell these notes as one long, detailed story in plain prose, at least 400 words.")


class Server:
    def __init__(self, name, port, pid, log):
        self.name, self.port, self.pid, self.log = name, port, pid, log

    def alive(self):
        return os.path.exists(f"/proc/{self.pid}")

    def cpu_s(self):
        """utime + stime of the server process, in seconds (to see whether it burns CPU while idle)."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            return float("nan")

    def tail(self, n=20):
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def wait_health(servers, timeout):
    deadline = time.monotonic() + timeout
    pending = list(servers)
    while pending:
        for s in list(pending):
            if not s.alive():
                sys.exit(f"{s.name} exited before it was ready; its log ends:\n{s.tail()}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    pending.remove(s)
                c.close()
            except OSError:
                pass
        if pending and time.monotonic() > deadline:
            sys.exit(f"not ready after {timeout}s: {', '.join(s.name for s in pending)}")
        if pending:
            time.sleep(0.25)


def chat(server, messages, max_tokens, timeout):
    """One streamed chat completion; returns timings, the reply text and the usage."""
    body = json.dumps({
        "messages": messages, "max_tokens": max_tokens, "temperature": 0,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
    })
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    t0 = time.monotonic()
    deadline = t0 + timeout
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            sys.exit(f"{server.name}: HTTP {resp.status}: {resp.read(2000)!r}")
        t_first = t_last = None
        text, usage, timings, finish, n_text_chunks = [], None, None, None, 0
        while True:
            if time.monotonic() > deadline:
                sys.exit(f"{server.name}: a request ran past {timeout}s")
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            ev = json.loads(data)
            now = time.monotonic()
            usage = ev.get("usage") or usage
            timings = ev.get("timings") or timings
            for ch in ev.get("choices") or []:
                d = ch.get("delta") or {}
                piece = (d.get("content") or "") + (d.get("reasoning_content") or "")
                if piece or d.get("tool_calls"):
                    t_first = t_first if t_first is not None else now
                    t_last = now
                    n_text_chunks += 1
                    text.append(d.get("content") or "")
                finish = ch.get("finish_reason") or finish
    finally:
        conn.close()
    if t_first is None:
        sys.exit(f"{server.name}: the reply carried no text")
    usage = usage or {}
    n_gen = usage.get("completion_tokens") or n_text_chunks
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is None and timings:
        cached = timings.get("cache_n")
    span = t_last - t_first
    return {
        "ttft": t_first - t0, "n_gen": n_gen, "prompt": usage.get("prompt_tokens"), "cached": cached,
        "decode": (n_gen - 1) / span if n_gen > 1 and span > 0 else float("nan"),
        "text": "".join(text), "finish": finish,
        "server_pp": timings.get("prompt_per_second") if timings else None,
        "server_tg": timings.get("predicted_per_second") if timings else None,
    }


def med(xs):
    xs = [x for x in xs if x is not None and x == x]
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--ctx", default="4096")
    ap.add_argument("--ishizuki", required=True, metavar="PORT:PID:LOG")
    ap.add_argument("--llama-server", required=True, metavar="PORT:PID:LOG")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=2000)
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--health-timeout", type=float, default=300)
    ap.add_argument("--request-timeout", type=float, default=600)
    a = ap.parse_args()

    def server(name, spec):
        port, pid, log = spec.split(":", 2)
        return Server(name, int(port), int(pid), log)

    ours, theirs = server("ishizuki", a.ishizuki), server("llama-server", a.llama_server)
    servers = [ours, theirs]
    wait_health(servers, a.health_timeout)

    # Warm-up (first touches of the weights, thread pools) and calibration: how many sentences make
    # a prompt of about --prompt-tokens tokens (both servers read the same GGUF tokenizer).
    n_sent = max(1, a.prompt_tokens // 14)
    for s in servers:
        r = chat(s, [{"role": "user", "content": prompt_text(f"Warm-up {s.name}", n_sent)}], 8,
                 a.request_timeout)
        if s is servers[0] and r["prompt"]:
            n_sent = max(1, round(n_sent * a.prompt_tokens / r["prompt"]))
    print(f"model {os.path.basename(a.model)}, threads {a.threads}, ctx {a.ctx}, rounds {a.rounds}, "
          f"prompt {n_sent} sentences, max_tokens {a.gen}", flush=True)

    res = {s.name: [] for s in servers}
    idle_cpu = {s.name: 0.0 for s in servers}
    busy_wall = {s.name: 0.0 for s in servers}
    for rnd in range(a.rounds):
        order = servers if rnd % 2 == 0 else servers[::-1]
        for s in order:
            other = theirs if s is ours else ours
            c0, w0 = other.cpu_s(), time.monotonic()
            user = {"role": "user", "content": prompt_text(f"Round {rnd + 1}", n_sent)}
            t1 = chat(s, [user], a.gen, a.request_timeout)
            msgs = [user, {"role": "assistant", "content": t1["text"]},
                    {"role": "user", "content": FOLLOW_UP}]
            t2 = chat(s, msgs, 16, a.request_timeout)
            idle_cpu[other.name] += other.cpu_s() - c0
            busy_wall[other.name] += time.monotonic() - w0
            res[s.name].append((t1, t2))
            print(f"  round {rnd + 1} {s.name:12s} prompt={t1['prompt']} cached={t1['cached']} "
                  f"ttft={t1['ttft']:.3f}s gen={t1['n_gen']} ({t1['finish']}) "
                  f"decode={t1['decode']:.1f} tok/s | turn 2 prompt={t2['prompt']} "
                  f"cached={t2['cached']} ttft={t2['ttft']:.3f}s", flush=True)

    m = {}
    for s in servers:
        rs = res[s.name]
        m[s.name] = {
            "prompt": med([t1["prompt"] for t1, _ in rs]),
            "ttft1": med([t1["ttft"] for t1, _ in rs]),
            "n_gen": med([t1["n_gen"] for t1, _ in rs]),
            "decode": med([t1["decode"] for t1, _ in rs]),
            "prompt2": med([t2["prompt"] for _, t2 in rs]),
            "cached2": med([t2["cached"] for _, t2 in rs]),
            "ttft2": med([t2["ttft"] for _, t2 in rs]),
            "t2_over_t1": med([t2["ttft"] / t1["ttft"] for t1, t2 in rs]),
            "pp_client": med([t1["prompt"] / t1["ttft"] for t1, _ in rs if t1["prompt"]]),
        }
    o, t = m["ishizuki"], m["llama-server"]
    rows = [
        ("prompt tokens, turn 1", "prompt", "{:.0f}"),
        ("TTFT turn 1 (s)", "ttft1", "{:.3f}"),
        ("  = prompt tok/s", "pp_client", "{:.1f}"),
        ("generated tokens", "n_gen", "{:.0f}"),
        ("decode tok/s", "decode", "{:.2f}"),
        ("prompt tokens, turn 2", "prompt2", "{:.0f}"),
        ("cached tokens, turn 2", "cached2", "{:.0f}"),
        ("TTFT turn 2 (s)", "ttft2", "{:.3f}"),
        ("TTFT turn 2 / turn 1", "t2_over_t1", "{:.3f}"),
    ]
    print(f"\nmedians over {a.rounds} rounds ({os.path.basename(a.model)}, -t {a.threads}, ctx {a.ctx})")
    print(f"{'':24s} {'ishizuki':>10s} {'llama-server':>13s}")
    for label, k, fmt in rows:
        print(f"{label:24s} {fmt.format(o[k]):>10s} {fmt.format(t[k]):>13s}")
    decode_ratio = med([a1["decode"] / b1["decode"] for (a1, _), (b1, _) in
                        zip(res["ishizuki"], res["llama-server"])])
    ttft_ratio = med([a1["ttft"] / b1["ttft"] for (a1, _), (b1, _) in
                      zip(res["ishizuki"], res["llama-server"])])

    def verdict(ok):
        return "meets target" if ok else "MISSES target"

    print(f"\nratios (median of per-round ratios; ratio of medians in brackets):")
    print(f"  decode ishizuki/llama-server        {decode_ratio:.3f}x [{o['decode'] / t['decode']:.3f}x]"
          f"  (target >= 1.2: {verdict(decode_ratio >= 1.2)})")
    print(f"  TTFT ishizuki/llama-server          {ttft_ratio:.3f}x [{o['ttft1'] / t['ttft1']:.3f}x]"
          f"  (target <= 0.85: {verdict(ttft_ratio <= 0.85)})")
    for s in servers:
        v = m[s.name]["t2_over_t1"]
        print(f"  {s.name + ' turn 2 / turn 1 TTFT':35s} {v:.3f}  (target <= 0.2: {verdict(v <= 0.2)})")
    for s in servers:
        w = busy_wall[s.name]
        print(f"  {s.name} CPU while the other was measured: {idle_cpu[s.name]:.2f} s over {w:.1f} s")
    lines = [l for l in open(ours.log, errors="replace") if re.search(r"POST \S+.* prompt=", l)]
    print("\nishizuki log, last requests:\n" + "".join(lines[-4:]), end="")


if __name__ == "__main__":
    main()
