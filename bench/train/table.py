#!/usr/bin/python3
"""Renders the JSON lines of bench/train/run.sh as a markdown table.

Usage: table.py RESULTS.jsonl. Each cell is the best whole-run images/s over
the rounds (the run least disturbed by other load), with every round's
figure in brackets so the noise is visible.
"""

import json
import sys

LABELS = (("mspipe", "mspipe"), ("torch-glibc", "PyTorch, glibc malloc"), ("torch-tuned", "PyTorch, tuned malloc"))


def load(path):
    runs = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"table.py: {path}:{number}: {e}")
            key = "mspipe" if r["side"] == "mspipe" else ("torch-glibc" if r["allocator"] == "glibc" else "torch-tuned")
            runs.setdefault((r["threads"], key), []).append(r)
    return runs


def cell(rs):
    if not rs:
        return "-"
    figures = [r["images_per_sec"] for r in rs]
    return "%.0f (%s)" % (max(figures), " / ".join("%.0f" % v for v in figures))


def best(rs):
    return max(r["images_per_sec"] for r in rs) if rs else None


def ratio(a, b):
    return "%.2f×" % (a / b) if a and b else "-"


def main(path):
    runs = load(path)
    threads = sorted({t for t, _ in runs})
    print("| threads | mspipe img/s | PyTorch img/s (glibc malloc) | PyTorch img/s (tuned malloc) "
          "| mspipe / PyTorch glibc | mspipe / PyTorch tuned |")
    print("|---:|---:|---:|---:|---:|---:|")
    for t in threads:
        m, g, u = (runs.get((t, k), []) for k, _ in LABELS)
        print(f"| {t} | {cell(m)} | {cell(g)} | {cell(u)} | {ratio(best(m), best(g))} | {ratio(best(m), best(u))} |")
    print()
    print("| threads | " + " | ".join(f"{label}: page faults/step" for _, label in LABELS) + " |")
    print("|---:|" + "---:|" * len(LABELS))
    for t in threads:
        cols = []
        for key, _ in LABELS:
            rs = runs.get((t, key), [])
            cols.append(" / ".join("%.0f" % r["page_faults_per_step"] for r in rs) if rs else "-")
        print(f"| {t} | " + " | ".join(cols) + " |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: table.py RESULTS.jsonl")
    main(sys.argv[1])
