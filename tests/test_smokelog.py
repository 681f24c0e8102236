"""Parsing the smoke workload's `[smoke]` lines (launcher.smokelog)."""
from __future__ import annotations

import pytest

from launcher import smokelog as S


@pytest.mark.parametrize("line, want", [
    ("[smoke] check user ok uid=1000 gid=1000", ("user", True, "uid=1000 gid=1000")),
    ("[smoke] check shm FAIL /dev/shm is 64Mi, need 1Gi (resources.shm_size)",
     ("shm", False, "/dev/shm is 64Mi, need 1Gi (resources.shm_size)")),
    ("[smoke] check verl-config ok", ("verl-config", True, "")),
    ("[smoke] check rootfs ok   \r", ("rootfs", True, "")),
    ("(pid=4242) [smoke] check ray ok 2 nodes joined", ("ray", True, "2 nodes joined")),
    ("2026-01-01T00:00:00.1Z [smoke] check allreduce FAIL timed out after 30s connecting to 10.0.0.5:29500",
     ("allreduce", False, "timed out after 30s connecting to 10.0.0.5:29500")),
    ("[smoke] result ok", ("result", True, "")),
    ("[smoke] result FAIL shm allreduce", ("result", False, "shm allreduce")),
])
def test_parse_line(line, want):
    assert S.parse_line(line) == want


@pytest.mark.parametrize("line", [
    "step:1 - critic/score/mean:0.5",
    "[smoke] starting",
    "[smoke] check shm maybe 1Gi",
    "[smoke] check  ok",
    "[smoke]check user ok",
    "[smoke] result",
    "[smoke] result okay",
    "",
])
def test_other_lines_are_ignored(line):
    assert S.parse_line(line) is None


def test_collect_combines_pods_last_line_wins_and_orders_checks():
    rep = S.collect({
        "master-0": ["noise", "[smoke] check user ok uid=1000", "[smoke] check shm FAIL 64Mi",
                     "[smoke] check shm ok 1Gi", "[smoke] check zeta ok", "[smoke] check allreduce ok 2 ranks",
                     "[smoke] result ok"],
        "worker-0": ["[smoke] check user ok uid=1000", "[smoke] check allreduce FAIL connect timed out",
                     "[smoke] result FAIL allreduce,data"],
        "worker-1": [],
    })
    assert rep.names == ["user", "shm", "allreduce", "zeta"]
    assert rep.verdict("user") is True
    assert rep.verdict("shm") is True  # the later line replaced the earlier FAIL
    assert rep.verdict("allreduce") is False
    assert rep.verdict("nccl") is None
    assert [c.pod for c in rep.reports("allreduce") if not c.ok] == ["worker-0"]
    assert rep.result is False
    assert rep.pods["worker-0"].failed == ("allreduce", "data")
    assert rep.pods["master-0"].failed == ()
    assert rep.without_result == ["worker-1"]


def test_no_lines_no_verdict():
    rep = S.collect({"master-0": ["Traceback (most recent call last):"]})
    assert rep.names == [] and rep.result is None and rep.without_result == ["master-0"]
    assert S.collect({}).result is None
