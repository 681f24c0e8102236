#!/usr/bin/env python3
"""`.ci/run`'s closing table: where this CI run's time went.

usage: hack/ci/times.py --total SECONDS --caches cold|warm --timings FILE --real-runs FILE

Reads the lanes' times (JSON lines {"phase", "lane", "seconds", "rc"} from hack/lanes.py and hack/ci/timed.sh, which
adds the lane's CPU time, "cpu_seconds") and
the real-run ledger (tests/real_run_ledger.py: one line per real verl run the suite started, as the real nodes'
pods logged it) and prints a short table. Standard library only: it runs on exit, whatever was installed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _lines(path: str) -> list[dict]:
    p = Path(path)
    if not p.is_file():
        return []
    out = []
    for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a killed writer
    return out


def _mmss(seconds: float) -> str:
    return f"{int(seconds) // 60:d} min {int(seconds) % 60:02d} s"


def table(total: float, caches: str, timings: list[dict], runs: list[dict]) -> list[str]:
    """The table's lines."""
    out = [f"== CI time: {_mmss(total)} in all ({total:.0f} s of CI's 5400), caches {caches} at the start"]
    if timings:
        out.append(f"   {'phase':<10} {'lane':<26} {'time':>14}  {'CPU':>14}  result")
        for t in timings:
            result = "ok" if t.get("rc") == 0 else f"exit {t.get('rc')}"
            cpu = _mmss(t["cpu_seconds"]) if t.get("cpu_seconds") is not None else "-"
            out.append(f"   {t.get('phase', '?'):<10} {t.get('lane', '?'):<26} {_mmss(t.get('seconds', 0)):>14}  "
                       f"{cpu:>14}  {result}")
    if runs:
        busy = sum(r["seconds"] for r in runs)
        out.append(f"   real verl runs: {len(runs)}, {_mmss(busy)} of run time (one after another on the real-node "
                   f"worker unless their lanes overlap)")
        for r in sorted(runs, key=lambda r: -r["seconds"]):
            out.append(f"     {_mmss(r['seconds']):>14}  {r['steps']:3d} steps  {r['job'][:44]:<44} {r['test'][:70]}")
    else:
        out.append("   real verl runs: 0 recorded")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total", type=float, required=True)
    ap.add_argument("--caches", default="unknown")
    ap.add_argument("--timings", required=True)
    ap.add_argument("--real-runs", required=True)
    a = ap.parse_args(argv)
    print("\n".join(table(a.total, a.caches, _lines(a.timings), _lines(a.real_runs))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
