"""The smoke workload's report lines, parsed (pure: no I/O, no Kubernetes).

Inside the pods the smoke workload (`workload: smoke`) prints one line per check and one verdict:

    [smoke] check <name> ok|FAIL <detail>
    [smoke] result ok|FAIL <failed checks>

`launcher doctor --smoke` reads these from every pod's log and turns them into its own checks. A line
may carry a prefix (a Ray worker's `(pid=123)`, a timestamp), so the marker is searched anywhere in
the line; anything else in the log is ignored. When a pod reports a check twice, the last line wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

MARKER = "[smoke]"
# The checks the smoke workload runs, in the order doctor reports them. `allreduce` is the CPU
# (gloo) all-reduce between the pods, `nccl` the GPU one; a run reports one of the two.
CHECK_ORDER = ("user", "rootfs", "writable", "shm", "data", "verl-config", "ray", "allreduce", "nccl")

_LINE = re.compile(
    r"\[smoke\] (?:check (?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*) (?P<status>ok|FAIL)"
    r"|(?P<result>result) (?P<rstatus>ok|FAIL))(?:[ \t]+(?P<detail>.*?))?[ \t]*$"
)


@dataclass(frozen=True)
class SmokeCheck:
    """One `[smoke] check` line of one pod."""

    pod: str
    name: str
    ok: bool
    detail: str = ""


@dataclass
class PodSmoke:
    """What one pod reported: its checks by name and its final verdict (None: no result line)."""

    pod: str
    checks: dict[str, SmokeCheck] = field(default_factory=dict)
    result: bool | None = None
    failed: tuple[str, ...] = ()


@dataclass
class SmokeReport:
    """Every pod's smoke lines; `verdict(name)` combines one check across the pods."""

    pods: dict[str, PodSmoke] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """Checks any pod reported: the known ones in `CHECK_ORDER`, unknown ones after, by name."""
        seen = {n for p in self.pods.values() for n in p.checks}
        return [n for n in CHECK_ORDER if n in seen] + sorted(seen - set(CHECK_ORDER))

    def reports(self, name: str) -> list[SmokeCheck]:
        return [p.checks[name] for p in self.pods.values() if name in p.checks]

    def verdict(self, name: str) -> bool | None:
        """False when any pod failed the check, True when every pod that ran it passed, None when none ran it."""
        got = self.reports(name)
        if not got:
            return None
        return all(c.ok for c in got)

    @property
    def result(self) -> bool | None:
        """The overall verdict: False if any pod printed `result FAIL`, None if no pod printed a result."""
        results = [p.result for p in self.pods.values() if p.result is not None]
        if not results:
            return None
        return all(results)

    @property
    def without_result(self) -> list[str]:
        """Pods that printed smoke lines (or none) but never their `result` line."""
        return [p.pod for p in self.pods.values() if p.result is None]


def parse_line(line: str) -> tuple[str, bool, str] | None:
    """`(name, ok, detail)` of a check line, `("result", ok, failed checks)` of the verdict; None otherwise."""
    if MARKER not in line:
        return None
    m = _LINE.search(line.rstrip("\r\n"))
    if not m:
        return None
    if m.group("result"):
        return "result", m.group("rstatus") == "ok", m.group("detail") or ""
    return m.group("name"), m.group("status") == "ok", m.group("detail") or ""


def parse_pod(pod: str, lines: Iterable[str]) -> PodSmoke:
    out = PodSmoke(pod)
    for line in lines:
        got = parse_line(line)
        if got is None:
            continue
        name, ok, detail = got
        if name == "result":
            out.result = ok
            out.failed = tuple(x for x in re.split(r"[\s,]+", detail) if x) if not ok else ()
        else:
            out.checks[name] = SmokeCheck(pod, name, ok, detail)
    return out


def collect(lines_by_pod: Mapping[str, Iterable[str]]) -> SmokeReport:
    """The report of a run from each pod's log lines (pods with no line at all are kept: they said nothing)."""
    return SmokeReport({pod: parse_pod(pod, lines) for pod, lines in lines_by_pod.items()})
