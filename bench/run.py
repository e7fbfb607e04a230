"""Run every benchmark under bench/ and write docs/BENCHMARKS.md.

Each benchmark is a script `bench/bench_*.py` that prints its figures and ends
with one line `SUMMARY: <text>`. This runner records the machine, each
benchmark's output and the summaries.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def machine() -> list[str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "unknown"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return [
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- cpu: {cpu} × {os.cpu_count()}",
        f"- memory: {mem}",
        f"- os: {platform.platform()}",
        f"- python: {platform.python_version()}",
    ]


def write_doc(summaries: list[str], sections: list[str], pending: list[str]) -> Path:
    doc = [
        "# Benchmarks",
        "",
        "Written by `make bench` (bench/run.py); figures are from the machine below.",
        "",
        *machine(),
        "",
        "| benchmark | summary |",
        "|---|---|",
        *summaries,
        *(f"| {name} | not run yet |" for name in pending),
        "",
        *sections,
    ]
    out = ROOT / "docs" / "BENCHMARKS.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(doc))
    return out


def main(argv: list[str]) -> int:
    only = set(argv)
    scripts = sorted(p for p in (ROOT / "bench").glob("bench_*.py") if not only or p.stem in only)
    sections: list[str] = []
    summaries: list[str] = []
    failed = 0
    for i, script in enumerate(scripts):
        print(f"== {script.stem}", flush=True)
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT)
        took = time.monotonic() - t0
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr[-4000:])
        summary = next(
            (
                ln.removeprefix("SUMMARY:").strip()
                for ln in reversed(proc.stdout.splitlines())
                if ln.startswith("SUMMARY:")
            ),
            None,
        )
        if proc.returncode != 0 or summary is None:
            failed += 1
            summary = f"FAILED (exit {proc.returncode})"
        summaries.append(f"| {script.stem} | {summary} |")
        output = proc.stdout.strip()
        sections += [f"## {script.stem}", "", f"Ran in {took:.0f}s.", "", "```", output, "```", ""]
        # Written after every benchmark: a run cut short still records what finished.
        out = write_doc(summaries, sections, [p.stem for p in scripts[i + 1 :]])
    print(f"wrote {out.relative_to(ROOT)}" if scripts else "no benchmarks found")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
