"""Alternates `ishizuki bench` and `llama-bench` on one model and prints median speed ratios.

Called by vs-llamacpp.sh; each round probes the host's read bandwidth (how loaded a shared host
is), then runs both tools once with the same -t/-p/-n/-d/-r and records their mean t/s per
test; peak memory (max RSS of the process) is measured once at the end.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys


def run(cmd):
    """Runs cmd, returns (stdout, stderr); exits on failure."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout, proc.stderr


def rss_of(cmd):
    """Max RSS in bytes of one run of cmd (wait4 rusage of the child)."""
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execvp(cmd[0], cmd)
    _, status, usage = os.wait4(pid, 0)
    if status != 0:
        sys.exit(f"{cmd[0]} exited with status {status}")
    return usage.ru_maxrss * 1024


def host_bandwidth(a):
    """The read bandwidth `ishizuki bench` measures over the model's size, as printed."""
    out, _ = run([a.ishizuki, "bench", "-m", a.model, "-t", a.threads, "-p", "0", "-n", "1", "-r", "1"])
    found = re.search(r"measured read bandwidth: ([0-9.]+ GB/s)", out)
    return found.group(1) if found else "? GB/s"


def key(row):
    return (row["n_prompt"], row["n_gen"], row["n_depth"])


def name(k):
    p, n, d = k
    test = f"pp{p}" if p else f"tg{n}"
    return f"{test} @ d{d}" if d else test


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ishizuki", required=True)
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("model")
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("-p", default="512")
    ap.add_argument("-n", default="128")
    ap.add_argument("-d", default="0,2048")
    ap.add_argument("-r", default="5")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    common = ["-m", a.model, "-t", a.threads, "-p", a.p, "-n", a.n, "-d", a.d, "-r", a.r]
    ours_cmd = [a.ishizuki, "bench", *common, "--json"]
    theirs_cmd = [a.llama_bench, *common, "-o", "json"]

    _, log = run([a.llama_bench, "-m", a.model, "-t", a.threads, "-p", "16", "-n", "0", "-r", "1", "-v"])
    amx = "AMX" in log
    print(f"llama.cpp AMX buffer type in use: {'yes' if amx else 'no (this CPU or build has no AMX)'}")

    ours, theirs = {}, {}
    for r in range(a.rounds):
        # a shared host's speed changes between rounds: its read bandwidth says how loaded it is
        bw = host_bandwidth(a)
        for label, cmd, store in (("ishizuki", ours_cmd, ours), ("llama.cpp", theirs_cmd, theirs)):
            out, _ = run(cmd)
            for row in json.loads(out):
                store.setdefault(key(row), []).append(row["avg_ts"])
        so_far = ", ".join(f"{name(k)} {ours[k][-1] / theirs[k][-1]:.2f}x" for k in ours if k in theirs)
        print(f"round {r + 1}/{a.rounds} (host reads {bw}): {so_far}", file=sys.stderr, flush=True)

    print(f"\n| test | ishizuki t/s | llama.cpp t/s | ratio (median of {a.rounds} rounds) | rounds' range |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for k in sorted(ours, key=lambda k: (k[2], k[1], k[0])):
        if k not in theirs:
            continue
        ratios = [o / t for o, t in zip(ours[k], theirs[k])]
        print(f"| {name(k)} | {statistics.median(ours[k]):.1f} | {statistics.median(theirs[k]):.1f} "
              f"| {statistics.median(ratios):.2f}x | {min(ratios):.2f}-{max(ratios):.2f}x |")

    small = ["-m", a.model, "-t", a.threads, "-p", a.p, "-n", "16", "-r", "1"]
    ours_rss = rss_of([a.ishizuki, "bench", *small, "--json"])
    theirs_rss = rss_of([a.llama_bench, *small, "-o", "json"])
    print(f"\npeak memory: ishizuki {ours_rss / 2**20:.0f} MiB, llama.cpp {theirs_rss / 2**20:.0f} MiB "
          f"({ours_rss / theirs_rss:.2f}x)")


if __name__ == "__main__":
    main()
