"""Run reports and comparisons, generated from a run directory's `metrics.jsonl`.

- `load`: run directory -> `Run` (rows sorted by step, optional spec as a plain dict)
- `stats`: windows, per-key statistics, total throughput, Pearson r with a bootstrap CI
- `diagnose`: zero-signal steps and recommendations
- `build`: the `report.json` document (`analyze`), files (`write_report`), extra `Section`s
- `plots`, `markdown`: PNGs and `report.md`
- `compare`: several runs side by side

Never imports the Kubernetes client (ARCHITECTURE.md, "Walls").
"""

from launcher.report.build import SECTION_PROVIDERS, Section, analyze, write_report
from launcher.report.load import Run, load_run

__all__ = ["SECTION_PROVIDERS", "Run", "Section", "analyze", "load_run", "write_report"]
