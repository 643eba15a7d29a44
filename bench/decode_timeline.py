#!/usr/bin/env python3
"""Where a decode step's time goes, from the op timeline of a `trace` build.

    cargo build --release -p ishizuki --features trace
    ISHIZUKI_TRACE=/tmp/trace.txt target/release/ishizuki bench -m MODEL -p 0 -n 64 -r 1 -t 2
    python3 bench/decode_timeline.py /tmp/trace.txt

The trace has one `thread nanoseconds event` line per event: an op's or a pool job's or
task's extent as `name+` ... `name-`, and points (`seen`: a worker took a job; `own_done`:
the caller's tasks are done; `all_done`: every task is). Ops are labelled by the op before
them (`matmul < attention` is the attention output's projection). Per label, the table gives
medians in microseconds:

  op        the op on the calling thread, from its start to its end
  gap       from its end to the next op's start (the decoder's own code)
  before    from its start to its pool job's start (serial work: checks, quantizing)
  quant     quantizing the activations (packed matmuls)
  wk_start  from the job's start to a worker's first task
  own       the caller's tasks; wk_busy: a worker's tasks in the job
  wait      from the caller's tasks' end to every task's end
  after     from the job's end to the op's end (serial work after the job)

Then it prints every event of one layer in the middle (from one attention to the next), in
microseconds from its first.
"""
import bisect
import collections
import statistics
import sys

OPS = {"matmul", "matmul_multi", "matmul_glu", "rms_norm", "add_rms_norm", "rope",
       "attention", "glu"}
COLUMNS = ["op", "gap", "before", "quant", "wk_start", "own", "wk_busy", "wait", "after"]


def load(path):
    threads = collections.defaultdict(list)
    for line in open(path):
        thread, ns, event = line.split()
        threads[thread].append((int(ns), event))
    for events in threads.values():
        events.sort()
    return threads


def caller_of(threads):
    """The thread that ran the ops."""
    return max(threads, key=lambda t: sum(e[:-1] in OPS for _, e in threads[t]))


def op_extents(events):
    """(label, start, end) of each top-level op, labelled by the op before it."""
    ops, open_ops, prev = [], [], "start"
    for ns, e in events:
        name, mark = e[:-1], e[-1]
        if name not in OPS:
            continue
        if mark == "+":
            open_ops.append((name, ns))
        elif mark == "-" and open_ops:
            name, start = open_ops.pop()
            if open_ops:
                continue
            ops.append((f"{name} < {prev}", start, ns))
            prev = name
    return ops


def between(events, times, start, end):
    return events[bisect.bisect_left(times, start):bisect.bisect_right(times, end)]


def job_stats(inner, worker_inner):
    """The columns of one op from the caller's and a worker's events inside it."""
    first, last = {}, {}
    for ns, e in inner:
        first.setdefault(e, ns)
        last[e] = ns
    out = {}
    if "quantize+" in first:
        out["quant"] = last["quantize-"] - first["quantize+"]
    if "run+" not in first:
        return out
    out["before"] = first["run+"] - inner[0][0]
    out["after"] = inner[-1][0] - last["run-"]
    if "own_done" in first and "task+" in first:
        out["own"] = first["own_done"] - first["task+"]
    if "all_done" in first and "own_done" in first:
        out["wait"] = first["all_done"] - first["own_done"]
    starts = [ns for ns, e in worker_inner if e == "task+"]
    ends = [ns for ns, e in worker_inner if e == "task-"]
    if starts:
        out["wk_start"] = starts[0] - first["run+"]
        out["wk_busy"] = sum(b - a for a, b in zip(starts, ends))
    return out


def main():
    threads = load(sys.argv[1])
    caller = caller_of(threads)
    events = threads[caller]
    times = [ns for ns, _ in events]
    workers = [t for t in threads if t != caller and any(e == "task+" for _, e in threads[t])]
    worker = threads[workers[0]] if workers else []
    worker_times = [ns for ns, _ in worker]
    ops = op_extents(events)
    stats = collections.defaultdict(lambda: collections.defaultdict(list))
    order = []
    for i, (label, start, end) in enumerate(ops):
        if label not in stats:
            order.append(label)
        s = stats[label]
        s["op"].append(end - start)
        if i + 1 < len(ops):
            s["gap"].append(ops[i + 1][1] - end)
        inner = between(events, times, start, end)
        for k, v in job_stats(inner, between(worker, worker_times, start, end)).items():
            s[k].append(v)
    print(f"caller thread: {caller}; worker: {workers[0] if workers else 'none'}; {len(ops)} ops")
    print("| label | calls | " + " | ".join(COLUMNS) + " |")
    print("| --- | ---: |" + " ---: |" * len(COLUMNS))
    for label in order:
        s = stats[label]
        cell = lambda c: f"{statistics.median(s[c]) / 1e3:.2f}" if s[c] else ""
        print(f"| {label} | {len(s['op'])} | " + " | ".join(cell(c) for c in COLUMNS) + " |")
    attention = [start for label, start, _ in ops if label.startswith("attention")]
    if len(attention) > 2:
        begin, end = attention[len(attention) // 2], attention[len(attention) // 2 + 1]
        print("\none layer, microseconds from its first event:")
        for name, evs in [(caller, events)] + [(w, threads[w]) for w in workers]:
            line = " ".join(f"{e}@{(ns - begin) / 1e3:.1f}" for ns, e in evs if begin <= ns < end)
            print(f"{name}: {line}")


if __name__ == "__main__":
    main()
