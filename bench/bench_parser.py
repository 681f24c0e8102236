"""Benchmark the verl console-metrics parser against `grep -c 'step:'` on a synthetic log.

    .venv/bin/python bench/bench_parser.py                  # 100M and 1G (default)
    .venv/bin/python bench/bench_parser.py --sizes 50M      # quick run

For each size: write a realistic verl 0.9.1 log with `simlog` to a temp file, time
`LC_ALL=C grep -c 'step:' FILE`, then run the parser (LineSplitter + parse_line via `LogParser`,
1 MiB reads, records built and dropped) in a fresh subprocess so its peak RSS (`ru_maxrss`) belongs
to that size alone. Peak RSS should be the same at every size: the parser holds one chunk and one
capped pending line, never the log. `--before SRC` times another tree's parser on the same file in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHUNK = 1 << 20
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hack"))  # simlog, the generated verl log


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B")
    return int(float(t[:-1]) * units[t[-1]]) if t[-1:] in units else int(t)


def write_log(path: Path, size: int, block_mb: int = 16) -> int:
    """Write `size` bytes of simlog output; returns bytes written.

    One realistic block (~`block_mb` MB: driver lines, config dump, step lines, tqdm `\\r` lines)
    is generated and written repeatedly, so generating a 1 GB log takes seconds, not minutes. Step
    numbers repeat between blocks; the parser's cost does not depend on them.
    """
    import simlog

    parts, n = [], 0
    for line in simlog.generate(steps=10**9, seed=0, val_before_train=True):
        parts.append(line)
        n += len(line)
        if n >= block_mb << 20:
            break
    block = "".join(parts).encode()
    with open(path, "wb") as f:
        written = 0
        while written < size:
            f.write(block)
            written += len(block)
    return os.path.getsize(path)


def parse_child(path: str, src: str | None = None) -> None:
    """Runs in a subprocess: parse the file, print timing, counts and peak RSS as JSON."""
    import resource

    sys.path.insert(0, src or str(Path(__file__).resolve().parents[1] / "src"))
    from launcher.metrics import LogParser

    p = LogParser()
    records = 0
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru0.ru_utime + ru0.ru_stime  # CPU time: the shared 2-core box is often busy
    t = time.perf_counter()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            records += len(p.feed(chunk))
    records += len(p.finish())
    dt = time.perf_counter() - t
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ru.ru_utime + ru.ru_stime - cpu0
    # VmHWM (peak RSS of this address space) rather than ru_maxrss: after fork+exec Linux carries the
    # parent's peak into ru_maxrss, which would charge the benchmark driver's buffers to the parser.
    hwm = next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
    print(json.dumps({"seconds": dt, "cpu_seconds": cpu, "records": records, "counters": p.counters.as_dict(),
                      "peak_rss_kb": hwm}))


def _child(path: Path, src: str | None) -> dict:
    cmd = [sys.executable, __file__, "--_parse", str(path)] + (["--_src", src] if src else [])
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def bench(size: int, tmpdir: Path, before: str | None = None) -> dict:
    path = tmpdir / f"verl-{size}.log"
    t = time.perf_counter()
    nbytes = write_log(path, size)
    gen_s = time.perf_counter() - t
    import resource

    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache for both
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    g = subprocess.run(["grep", "-c", "step:", str(path)], capture_output=True, text=True,
                       env={**os.environ, "LC_ALL": "C"}, check=False)
    grep_s = time.perf_counter() - t
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    grep_cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    res = _child(path, None)
    old = _child(path, before) if before else None
    path.unlink()
    mb = nbytes / 1e6
    return {
        "bytes": nbytes, "gen_s": gen_s, "grep_s": grep_s, "grep_count": int(g.stdout.strip() or 0),
        "parse_s": res["seconds"], "records": res["records"], "lines": res["counters"]["lines"],
        "parse_mb_s": mb / res["seconds"], "parse_lines_s": res["counters"]["lines"] / res["seconds"],
        "grep_mb_s": mb / grep_s, "ratio": res["seconds"] / grep_s, "peak_rss_mb": res["peak_rss_kb"] / 1024,
        "parse_cpu_s": res["cpu_seconds"], "grep_cpu_s": grep_cpu,
        "cpu_ratio": res["cpu_seconds"] / max(grep_cpu, 1e-9), "parse_cpu_mb_s": mb / res["cpu_seconds"],
        "counters": res["counters"], "loadavg": os.getloadavg()[0],
        "before_cpu_s": old and old["cpu_seconds"], "before_s": old and old["seconds"],
        "same_counts": old is None or (old["counters"] == res["counters"] and old["records"] == res["records"]),
        "before_rss_mb": old and old["peak_rss_kb"] / 1024,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100M,1G", help="comma-separated log sizes (default 100M,1G)")
    ap.add_argument("--tmpdir", default=None, help="where to write the temporary logs")
    ap.add_argument("--before", metavar="SRC",
                    help="also run the parser from this source tree (e.g. main's src/) on the same file, same run")
    ap.add_argument("--_parse", help=argparse.SUPPRESS)
    ap.add_argument("--_src", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._parse:
        parse_child(a._parse, a._src)
        return 0
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    rows = []
    with tempfile.TemporaryDirectory(dir=a.tmpdir) as d:
        for s in a.sizes.split(","):
            r = bench(parse_size(s), Path(d), a.before)
            rows.append(r)
            print(f"{r['bytes'] / 1e6:8.1f} MB  lines {r['lines']:>9}  steps {r['records']:>7} (grep {r['grep_count']})"
                  f"  parser {r['parse_s']:6.2f} s = {r['parse_mb_s']:6.1f} MB/s, {r['parse_lines_s'] / 1e3:6.1f} k lines/s"
                  f"  grep {r['grep_s']:5.2f} s = {r['grep_mb_s']:7.1f} MB/s  parser/grep time {r['ratio']:5.1f}x"
                  f"  peak RSS {r['peak_rss_mb']:5.1f} MB", flush=True)
            print(f"{'':11}CPU time: parser {r['parse_cpu_s']:6.2f} s = {r['parse_cpu_mb_s']:6.1f} MB/s, grep "
                  f"{r['grep_cpu_s']:5.2f} s, parser/grep {r['cpu_ratio']:5.1f}x  (load avg {r['loadavg']:.1f}, "
                  f"generate {r['gen_s']:.0f} s)", flush=True)
            if r["before_cpu_s"] is not None:
                print(f"{'':11}before ({a.before}): CPU {r['before_cpu_s']:6.2f} s, parser/grep "
                      f"{r['before_cpu_s'] / max(r['grep_cpu_s'], 1e-9):5.1f}x, peak RSS {r['before_rss_mb']:5.1f} MB; "
                      f"speed-up {r['before_cpu_s'] / r['parse_cpu_s']:.2f}x (CPU); same counts and records: "
                      f"{r['same_counts']}", flush=True)
    peaks = [r["peak_rss_mb"] for r in rows]
    print(f"peak RSS by size: {', '.join(f'{p:.1f} MB' for p in peaks)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
