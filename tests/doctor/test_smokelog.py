"""Parsing the smoke workload's `[smoke]` lines (launcher.doctor.smokelog), in the format launcher.entrypoint.smoke prints."""
from __future__ import annotations

from pathlib import Path

import pytest

from launcher.doctor import smokelog as S

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("line, want", [
    ("[smoke] check user ok uid=1000 gid=1000 user=verl (expected 1000:1000)",
     ("user", True, "uid=1000 gid=1000 user=verl (expected 1000:1000)")),
    ("[smoke] check shm_size FAIL /dev/shm 64.0MiB (smoke.min_shm 1Gi = 1024.0MiB; resources.shm_size 64Mi)",
     ("shm_size", False, "/dev/shm 64.0MiB (smoke.min_shm 1Gi = 1024.0MiB; resources.shm_size 64Mi)")),
    ("[smoke] check writable:storage FAIL /workspace: EACCES Permission denied",
     ("writable:storage", False, "/workspace: EACCES Permission denied")),
    ("[smoke] check writable:tmp ok /tmp   \r", ("writable:tmp", True, "/tmp")),
    ("[smoke] check ray_task@smoke-cpu-doctor-1a2b3c4d-worker-0 ok ip=10.244.1.7 node=5f3e2a1b in 41ms",
     ("ray_task@smoke-cpu-doctor-1a2b3c4d-worker-0", True, "ip=10.244.1.7 node=5f3e2a1b in 41ms")),
    ("(pid=4242) [smoke] check shm_size@worker-0 ok /dev/shm 256.0MiB",
     ("shm_size@worker-0", True, "/dev/shm 256.0MiB")),
    ("[smoke] check root_readonly ok / EROFS, /opt EROFS", ("root_readonly", True, "/ EROFS, /opt EROFS")),
    ("2026-01-01T00:00:00.1Z [smoke] check rendezvous FAIL rank 1 could not rendezvous with "
     "x-master-0:23456 within 20s: the pods cannot reach each other",
     ("rendezvous", False, "rank 1 could not rendezvous with x-master-0:23456 within 20s: "
                           "the pods cannot reach each other")),
    ("[smoke] check verl_config ok", ("verl_config", True, "")),
    ("[smoke] result ok", ("result", True, "")),
    ("[smoke] result FAIL rendezvous,steps", ("result", False, "rendezvous,steps")),
])
def test_parse_line(line, want):
    assert S.parse_line(line) == want


@pytest.mark.parametrize("line", [
    "step:1 - smoke/allreduce_ms:0.5 - timing_s/step:1.0",
    "[smoke] start role=single-node backend=pytorchjob nodes=1",
    "[smoke] pad step=1 line=1/2 xxxxxxxx",
    "[smoke] check shm_size maybe 1Gi",
    "[smoke] check  ok",
    "[smoke]check user ok",
    "[smoke] result",
    "[smoke] result okay",
    "[nccl_check] result ok backend=gloo world_size=2",
    "",
])
def test_other_lines_are_not_checks(line):
    assert S.parse_line(line) is None


@pytest.mark.parametrize("name, want", [
    ("writable:shm@grpo-x-worker-0", ("writable", "shm", "grpo-x-worker-0")),
    ("ray_task@10.244.1.7", ("ray_task", "", "10.244.1.7")),
    ("writable:home", ("writable", "home", "")),
    ("nccl_allreduce", ("nccl_allreduce", "", "")),
])
def test_split_name(name, want):
    assert S.split_name(name) == want


def test_start_and_metric_lines():
    assert S.parse_start("[smoke] start role=ray-head backend=pytorchjob nodes=2 gpus_per_node=0 cpus=1 steps=3 "
                         "host=smoke-cpu-doctor-1a2b-master-0") == {
        "role": "ray-head", "backend": "pytorchjob", "nodes": "2", "gpus_per_node": "0", "cpus": "1", "steps": "3",
        "host": "smoke-cpu-doctor-1a2b-master-0"}
    assert S.parse_start("[smoke] check user ok") is None
    assert S.parse_metrics("step:2 - smoke/allreduce_ms:0.731 - smoke/ray_task_ms:3.25 - smoke/world_size:2 - "
                           "timing_s/step:1.012") == (2, {"smoke/allreduce_ms": 0.731, "smoke/ray_task_ms": 3.25,
                                                          "smoke/world_size": 2.0, "timing_s/step": 1.012})
    assert S.parse_metrics("step:3") == (3, {})
    assert S.parse_metrics("[smoke] pad step=1 line=1/1 xxx") is None
    assert S.parse_metrics("step:1 - smoke/allreduce_ms:nan-ish") is None


def test_collect_groups_by_base_name_last_line_wins_and_orders_checks():
    rep = S.collect({
        "master-0": ["noise", "[smoke] start role=ray-head backend=pytorchjob nodes=2 host=j-master-0",
                     "[smoke] check user ok uid=1000", "[smoke] check shm_size FAIL /dev/shm 64.0MiB",
                     "[smoke] check writable:tmp ok /tmp", "[smoke] check writable:storage ok /workspace",
                     "[smoke] check zeta ok", "[smoke] check rendezvous ok gloo rank 0 of 2",
                     "[smoke] check shm_size ok /dev/shm 256.0MiB", "[smoke] check ray_task@j-master-0 ok ip=a",
                     "[smoke] check ray_task@j-worker-0 ok ip=b", "[smoke] check writable:storage@j-worker-0 FAIL "
                     "/workspace: EACCES", "[smoke] check verl_config ok 9 overrides",
                     "step:1 - smoke/allreduce_ms:1.5 - smoke/world_size:2",
                     "step:2 - smoke/allreduce_ms:0.5 - smoke/world_size:2",
                     "[smoke] result FAIL writable:storage@j-worker-0"],
        "worker-0": ["[smoke] check user ok uid=1000", "[smoke] check rendezvous FAIL connect timed out",
                     "[smoke] result FAIL rendezvous,steps"],
        "worker-1": ["[smoke] error: bad config"],
    })
    assert rep.bases == ["user", "writable", "shm_size", "verl_config", "ray_task", "rendezvous", "zeta"]
    assert rep.names == ["user", "writable:storage", "writable:storage@j-worker-0", "writable:tmp", "shm_size",
                         "verl_config", "ray_task@j-master-0", "ray_task@j-worker-0", "rendezvous", "zeta"]
    assert rep.verdict("user") is True
    assert rep.verdict("shm_size") is True  # the later line replaced the earlier FAIL
    assert rep.verdict("writable") is False  # one part on one host failed
    assert [(c.pod, c.part, c.host) for c in rep.reports("writable")] == [
        ("master-0", "tmp", ""), ("master-0", "storage", ""), ("master-0", "storage", "j-worker-0")]
    assert rep.verdict("rendezvous") is False
    assert rep.verdict("nccl_allreduce") is None
    assert [c.pod for c in rep.reports("rendezvous") if not c.ok] == ["worker-0"]
    assert rep.result is False
    assert rep.pods["worker-0"].failed == ("rendezvous", "steps")
    assert rep.pods["master-0"].failed == ("writable:storage@j-worker-0",)
    assert rep.pods["master-0"].start["role"] == "ray-head"
    assert rep.metric("smoke/allreduce_ms") == [1.5, 0.5]
    assert rep.pods["worker-1"].errors == ["bad config"]
    assert rep.without_result == ["worker-1"]


def test_no_lines_no_verdict():
    rep = S.collect({"master-0": ["Traceback (most recent call last):"]})
    assert rep.names == [] and rep.bases == [] and rep.result is None and rep.without_result == ["master-0"]
    assert S.collect({}).result is None


def test_check_order_covers_what_the_workload_prints(tmp_path):
    """The pod checks' base names come from the workload itself (launcher.entrypoint.smoke_checks), in order."""
    from launcher.spec.load import load_spec
    from launcher.entrypoint import smoke_checks as C

    spec = load_spec(REPO / "configs" / "smoke-cpu.yaml", [f"storage.mount_path={tmp_path}", f"data.dir={tmp_path}/d"])
    printed = [c.line() for c in C.pod_checks(spec, {"HOME": str(tmp_path)}, shm_path=str(tmp_path), tmp=str(tmp_path))]
    rep = S.collect({"p": printed})
    assert rep.bases == list(S.POD_CHECKS) == ["user", "root_readonly", "writable", "shm_size", "dataset"]
    assert [c.part for c in rep.reports("writable")] == ["tmp", "home", "shm", "storage"]
    host = C.Check("writable:tmp", True, "/tmp").on("h")
    assert S.parse_line(host.line()) == ("writable:tmp@h", True, "/tmp")
    assert S.CHECK_ORDER.index("rendezvous") < S.CHECK_ORDER.index("allreduce") < S.CHECK_ORDER.index("nccl_allreduce")
