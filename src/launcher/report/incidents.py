"""The report's "Incidents" section: one row per stall the watchdog captured (`launcher.run.incidents`).

Registered in `SECTION_PROVIDERS` on import; a run without incidents gets no section. The data lands in
`report.json["sections"]["incidents"]`.
"""

from __future__ import annotations

from launcher.report.build import SECTION_PROVIDERS, Section
from launcher.run.incidents import describe, load_incidents


def incidents_section(run_dir) -> Section | None:
    """The section for a run directory's incidents/; None when it has none."""
    found = load_incidents(run_dir)
    if not found:
        return None
    lines = [f"{len(found)} stall(s) captured by the follower's watchdog (stacks of every process, the pods' last "
             "lines and state under `incidents/<id>/`).", "",
             "| incident | after step | class | why | action |", "|---|---|---|---|---|"]
    for i in found:
        verdict = i.get("verdict") or {}
        step = (i.get("last_step") or {}).get("step")
        why = str(verdict.get("why", "")).replace("|", "\\|")
        lines.append(f"| `{i['id']}` | {'–' if step is None else step} | {verdict.get('class', 'unknown')} | {why} | "
                     f"{i.get('action') or 'report'} |")
    return Section(key="incidents", title="Incidents", markdown="\n".join(lines),
                   data={"incidents": [{k: v for k, v in i.items() if k != "path"} for i in found],
                         "lines": [describe(i) for i in found]})


def provider(run, doc: dict) -> Section | None:
    """SECTION_PROVIDERS entry: the run directory's incidents/."""
    return incidents_section(run.path)


if provider not in SECTION_PROVIDERS:
    SECTION_PROVIDERS.append(provider)
