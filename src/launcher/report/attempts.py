"""The report's "Attempts and restarts" section: one row per attempt of the run (`launcher.run.attempts`).

Registered in `SECTION_PROVIDERS` on import; a run that was never restarted (one fresh attempt) gets
no section. The data lands in `report.json["sections"]["attempts"]`.
"""

from __future__ import annotations

from launcher.run.attempts import FILE, describe, load, restarts, summarise
from launcher.report.build import SECTION_PROVIDERS, Section


def attempts_section(run_dir) -> Section | None:
    """The section for a run directory's attempts.json; None for a single fresh attempt (or none)."""
    rows = summarise(load(run_dir))
    if not rows or (len(rows) == 1 and rows[0]["action"] == "fresh"):
        return None
    steps = sum(r["steps_lost"] or 0 for r in rows[1:])
    secs = sum(r["time_lost_s"] or 0 for r in rows[1:])
    unknown = any(r["steps_lost"] is None for r in rows[1:])
    lines = [f"{restarts(rows)} restart(s): {steps}{'+' if unknown else ''} step(s) and {secs:g} s lost "
             f"(from the pods' log timestamps, `{FILE}`).", "",
             "| attempt | start | resumed from | steps | steps lost | time lost (s) | pod |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        start = {"resume": f"global_step_{r['resumed_from']}", "fresh": "fresh",
                 "finished": f"finished at {r['resumed_from']}"}[r["action"]]
        span = f"{r['first_step']}–{r['last_step']}" if r["first_step"] is not None else "–"
        lost = "–" if r["attempt"] == 1 else ("?" if r["steps_lost"] is None else str(r["steps_lost"]))
        t = r["time_lost_s"]
        tl = "–" if t is None else (f"{t:g}" if r["time_lost_final"] else f"≥{t:g}")
        lines.append(f"| {r['attempt']} | {r['started'] or '–'} | {start} | {span} | {lost} | {tl} | {r['pod'] or '–'} |")
    lines += ["", "Time lost: how much later the run got past the previous attempt's last step than an "
              "uninterrupted run would have (dead time, rescheduling, reload and the redone steps). "
              "metrics.jsonl keeps each step once, the latest attempt's values winning."]
    return Section(key="attempts", title="Attempts and restarts", markdown="\n".join(lines),
                   data={"restarts": restarts(rows), "steps_lost": None if unknown else steps,
                         "time_lost_s": secs, "attempts": rows, "lines": [describe(r) for r in rows]})


def provider(run, doc: dict) -> Section | None:
    """SECTION_PROVIDERS entry: the run directory's attempts.json."""
    return attempts_section(run.path)


if provider not in SECTION_PROVIDERS:
    SECTION_PROVIDERS.append(provider)
