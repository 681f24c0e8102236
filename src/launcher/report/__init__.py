"""Run reports and comparisons, generated from a run directory's `metrics.jsonl`.

- `load`: run directory -> `Run` (rows sorted by step, optional spec as a plain dict)
- `stats`: windows, per-key statistics, total throughput, Pearson r with a bootstrap CI
- `diagnose`: zero-signal steps and recommendations
- `build`: the `report.json` document (`analyze`), files (`write_report`), extra `Section`s
- `plots`, `markdown`: PNGs and `report.md`
- `compare`: several runs side by side
- `evaluation`: the GSM8K base-vs-trained section (eval.json), registered in `SECTION_PROVIDERS`
- `attempts`: the attempts-and-restarts section (attempts.json), registered in `SECTION_PROVIDERS`
- `incidents`: the incidents section (incidents/*/incident.json), likewise

Never imports the Kubernetes client (ARCHITECTURE.md, "Walls").
"""

from launcher.report.build import SECTION_PROVIDERS, Section, analyze, write_report
from launcher.report.load import Run, load_run
from launcher.report import eval  # registers the GSM8K evaluation section in SECTION_PROVIDERS
from launcher.report import attempts  # registers the attempts-and-restarts section
from launcher.report import incidents  # registers the incidents section

__all__ = ["SECTION_PROVIDERS", "Run", "Section", "analyze", "attempts", "evaluation", "incidents", "load_run", "write_report"]
