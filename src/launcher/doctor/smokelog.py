"""The smoke workload's report lines, parsed (pure: no I/O, no Kubernetes).

Inside the pods the smoke workload (`workload: smoke`, `launcher.entrypoint.smoke`) prints:

    [smoke] start role=<role> backend=<backend> nodes=<N> gpus_per_node=<G> cpus=<C> steps=<S> host=<host>
    [smoke] check <name> ok|FAIL <detail>
    step:<N> - smoke/allreduce_ms:<float> - smoke/ray_task_ms:<float> - smoke/world_size:<int> - timing_s/step:<float>
    [smoke] result ok
    [smoke] result FAIL <failed check names, comma-separated>

Check names carry no spaces (`launcher.entrypoint.smoke_checks`): a base name, optionally a part
after `:` (`writable:tmp`, `writable:storage`) and a host after `@` for a check one pod ran on
another pod's Ray node (`ray_task@<host>`, `user@<host>`, `writable:shm@<host>`). `SmokeCheck.base`
groups them: doctor reports one check per base name with each pod's or host's detail.

`launcher doctor --smoke` reads these from every pod's log and turns them into its own checks. A line
may carry a prefix (a Ray worker's `(pid=123)`, a timestamp), so the marker is searched anywhere in
the line; anything else in the log is ignored (`[smoke] pad ...` lines included). When a pod reports
a check twice, the last line wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

MARKER = "[smoke]"
# The checks' base names in the order doctor reports them: this pod (`pod_checks`), the driver's
# verl/Ray checks, the all-reduce across the pods (`nccl_allreduce` on GPU pods only), then the run.
POD_CHECKS = ("user", "root_readonly", "writable", "shm_size", "dataset")
CHECK_ORDER = (*POD_CHECKS, "verl_config", "ray_init", "ray_nodes", "ray_task",
               "rendezvous", "allreduce", "nccl_allreduce", "memory", "steps")

_NAME = r"[A-Za-z0-9][A-Za-z0-9_.:@-]*"
_LINE = re.compile(
    rf"\[smoke\] (?:check (?P<name>{_NAME}) (?P<status>ok|FAIL)"
    r"|(?P<result>result) (?P<rstatus>ok|FAIL))(?:[ \t]+(?P<detail>.*?))?[ \t]*$"
)
_START = re.compile(r"\[smoke\] start((?:[ \t]+[A-Za-z_]+=\S*)+)[ \t]*$")
_ERROR = re.compile(r"\[smoke\] error: (?P<detail>.*?)[ \t]*$")
# verl's console metric line as the smoke driver prints it: `step:N - key:value - ...`.
_METRIC = re.compile(r"(?:^|\s)step:(?P<step>\d+)(?P<rest>(?: - [A-Za-z0-9_/.@-]+:\S+)*)[ \t]*$")


def split_name(name: str) -> tuple[str, str, str]:
    """`writable:shm@host-1` -> ("writable", "shm", "host-1"); `ray_nodes` -> ("ray_nodes", "", "")."""
    check, _, host = name.partition("@")
    base, _, part = check.partition(":")
    return base, part, host


@dataclass(frozen=True)
class SmokeCheck:
    """One `[smoke] check` line of one pod."""

    pod: str
    name: str
    ok: bool
    detail: str = ""

    @property
    def base(self) -> str:
        return split_name(self.name)[0]

    @property
    def part(self) -> str:
        return split_name(self.name)[1]

    @property
    def host(self) -> str:
        """The host the check ran on when another pod's driver ran it there (`<name>@<host>`), else ''."""
        return split_name(self.name)[2]


@dataclass
class PodSmoke:
    """What one pod reported: its checks by name, its start line, metric lines and final verdict."""

    pod: str
    checks: dict[str, SmokeCheck] = field(default_factory=dict)
    result: bool | None = None  # None: no result line
    failed: tuple[str, ...] = ()
    start: dict[str, str] = field(default_factory=dict)
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)  # step -> key -> value
    errors: list[str] = field(default_factory=list)  # `[smoke] error: ...` (a config the workload refused)


@dataclass
class SmokeReport:
    """Every pod's smoke lines; `verdict(base)` combines one check (all its parts and hosts) across the pods."""

    pods: dict[str, PodSmoke] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """Every full check name any pod reported, grouped by base name in `CHECK_ORDER` (unknown after)."""
        seen = {n for p in self.pods.values() for n in p.checks}
        return sorted(seen, key=lambda n: (_rank(split_name(n)[0]), n))

    @property
    def bases(self) -> list[str]:
        """The base names any pod reported: the known ones in `CHECK_ORDER`, unknown ones after, by name."""
        seen = {c.base for p in self.pods.values() for c in p.checks.values()}
        return sorted(seen, key=lambda b: (_rank(b), b))

    def reports(self, base: str) -> list[SmokeCheck]:
        """Every line of that base name (every part, every host), pod by pod in log order."""
        return [c for p in self.pods.values() for c in p.checks.values() if c.base == base]

    def verdict(self, base: str) -> bool | None:
        """False when any line of the check failed, True when every one passed, None when no pod ran it."""
        got = self.reports(base)
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

    def metric(self, key: str) -> list[float]:
        """One metric's values over every pod's metric lines, by step."""
        return [m[key] for p in self.pods.values() for _, m in sorted(p.metrics.items()) if key in m]


def _rank(base: str) -> int:
    return CHECK_ORDER.index(base) if base in CHECK_ORDER else len(CHECK_ORDER)


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


def parse_start(line: str) -> dict[str, str] | None:
    """The `key=value` fields of a `[smoke] start ...` line; None for any other line."""
    m = _START.search(line.rstrip("\r\n")) if MARKER in line else None
    if not m:
        return None
    return dict(kv.split("=", 1) for kv in m.group(1).split())


def parse_metrics(line: str) -> tuple[int, dict[str, float]] | None:
    """`(step, {key: value})` of a metric line (`step:N - key:value - ...`, numbers only); None otherwise."""
    if "step:" not in line or MARKER in line:
        return None
    m = _METRIC.search(line.rstrip("\r\n"))
    if not m:
        return None
    values: dict[str, float] = {}
    for item in m.group("rest").split(" - ")[1:]:
        key, _, value = item.rpartition(":")
        try:
            values[key] = float(value)
        except ValueError:
            return None
    return int(m.group("step")), values


def parse_pod(pod: str, lines: Iterable[str]) -> PodSmoke:
    out = PodSmoke(pod)
    for line in lines:
        got = parse_line(line)
        if got is None:
            start = parse_start(line)
            if start is not None:
                out.start = start
                continue
            metric = parse_metrics(line)
            if metric is not None:
                out.metrics[metric[0]] = metric[1]
                continue
            if MARKER in line and (err := _ERROR.search(line.rstrip("\r\n"))):
                out.errors.append(err.group("detail"))
            continue
        name, ok, detail = got
        if name == "result":
            out.result = ok
            out.failed = tuple(x for x in re.split(r"[\s,]+", detail) if x) if not ok else ()
        else:
            out.checks.pop(name, None)  # a repeated check moves to where it was last reported
            out.checks[name] = SmokeCheck(pod, name, ok, detail)
    return out


def collect(lines_by_pod: Mapping[str, Iterable[str]]) -> SmokeReport:
    """The report of a run from each pod's log lines (pods with no line at all are kept: they said nothing)."""
    return SmokeReport({pod: parse_pod(pod, lines) for pod, lines in lines_by_pod.items()})
