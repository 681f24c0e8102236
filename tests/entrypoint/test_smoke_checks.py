"""The smoke workload's pieces without a cluster, Ray or torch: checks on fakes, line formats, metric lines."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from launcher.spec.load import load_spec
from launcher.entrypoint import nccl_check as N
from launcher.entrypoint import smoke as S
from launcher.entrypoint import smoke_checks as C
from launcher.entrypoint.__main__ import main as entrypoint_main
from launcher.metrics import LogParser, parse_line

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "configs" / "smoke-cpu.yaml"
FIXTURE = REPO / "tests" / "fixtures" / "gsm8k"


def _spec(*sets: str):
    return load_spec(SMOKE, list(sets))


# --------------------------------------------------------------------------------------------------
# Line formats


def test_check_line_format_and_remote_name():
    c = C.Check("writable:tmp", True, "/tmp")
    assert c.line() == "[smoke] check writable:tmp ok /tmp"
    bad = C.Check("user", False, "uid=0").on("pod-a")
    assert bad.line() == "[smoke] check user@pod-a FAIL uid=0"


def test_report_result_line_lists_failed_checks_and_sets_the_exit_status(capsys):
    r = S.Report()
    r.add(C.Check("a", True, "x"))
    assert r.finish() == 0 and capsys.readouterr().out.splitlines()[-1] == "[smoke] result ok"
    r.add(C.Check("b", False, "y"))
    r.add(C.Check("c@pod", False, "z"))
    assert r.finish() == 1
    assert capsys.readouterr().out.splitlines()[-1] == "[smoke] result FAIL b,c@pod"


@pytest.mark.parametrize("text,expected", [("64Mi", 64 * 2**20), ("1Gi", 2**30), ("1G", 10**9), ("500m", 0),
                                           ("1.5Ki", 1536), ("100", 100)])
def test_quantity_bytes(text, expected):
    assert C.quantity_bytes(text) == expected


def test_quantity_bytes_refuses_garbage():
    with pytest.raises(ValueError):
        C.quantity_bytes("lots")


# --------------------------------------------------------------------------------------------------
# Pod checks on fakes


def test_user_check_compares_with_the_spec():
    spec = _spec()
    ok = C.check_user(spec, uid=1000, gid=1000, username=lambda u: "verl")
    assert ok.ok and ok.detail == "uid=1000 gid=1000 user=verl (expected 1000:1000)"
    root = C.check_user(spec, uid=0, gid=0, username=lambda u: "root")
    assert not root.ok

    def no_entry(uid):
        raise KeyError(uid)

    assert "user=<no passwd entry>" in C.check_user(spec, uid=1000, gid=1000, username=no_entry).detail


def _fs(err: int | None, tmp: Path) -> dict:
    """A fake root: every create fails with `err`, or (None) lands in `tmp` as if / were writable."""
    def opener(path, flags, mode):
        if err is not None:
            raise OSError(err, os.strerror(err))
        return os.open(tmp / Path(path).name, flags, mode)
    return {"opener": opener, "remove": lambda path: os.unlink(tmp / Path(path).name)}


def test_root_readonly_needs_erofs_everywhere(tmp_path):
    spec = _spec()
    ok = C.check_root_readonly(spec, ("/", "/opt"), **_fs(errno.EROFS, tmp_path))
    assert ok.ok and ok.detail == "/ EROFS, /opt EROFS"
    # EACCES says only that this user may not write there, not that the filesystem is read-only
    denied = C.check_root_readonly(spec, ("/",), **_fs(errno.EACCES, tmp_path))
    assert not denied.ok and "EACCES" in denied.detail and "expected EROFS" in denied.detail
    writable = C.check_root_readonly(spec, ("/",), **_fs(None, tmp_path))
    assert not writable.ok and "/ created" in writable.detail
    assert list(tmp_path.iterdir()) == []  # the probe file was removed again
    relaxed = C.check_root_readonly(_spec("security.read_only_root_filesystem=false"), ("/",),
                                    **_fs(None, tmp_path))
    assert relaxed.ok and "not required" in relaxed.detail


def test_writable_check(tmp_path):
    assert C.check_writable("tmp", str(tmp_path)).ok
    assert list(tmp_path.iterdir()) == []
    missing = C.check_writable("storage", str(tmp_path / "absent"))
    assert not missing.ok and missing.name == "writable:storage" and "ENOENT" in missing.detail
    assert not C.check_writable("home", None).ok


def test_shm_check_compares_statvfs_with_min_shm(tmp_path):
    st = os.statvfs(tmp_path)
    size = st.f_frsize * st.f_blocks
    assert C.check_shm(_spec("smoke.min_shm=1Ki"), str(tmp_path)).ok
    too_small = C.check_shm(_spec(f"smoke.min_shm='{size + 2**30}'"), str(tmp_path))
    assert not too_small.ok and too_small.name == "shm_size" and f"{size / 2**20:.1f}MiB" in too_small.detail
    assert not C.check_shm(_spec(), str(tmp_path / "absent")).ok


def test_dataset_check_reads_what_the_init_container_wrote(tmp_path):
    from launcher.entrypoint.gsm8k import prepare_gsm8k

    spec = _spec(f"data.dir={tmp_path}", f"data.source_dir={FIXTURE}")
    assert not C.check_dataset(spec).ok  # nothing prepared yet
    prepare_gsm8k(spec, allow_download=False)
    c = C.check_dataset(spec)
    assert c.ok, c.detail
    assert c.detail == f"train {tmp_path}/train.parquet 24 rows, val {tmp_path}/test.parquet 12 rows"
    (tmp_path / "test.parquet").write_bytes(b"not parquet")
    assert not C.check_dataset(spec).ok


def test_pod_checks_names_in_order(tmp_path):
    spec = _spec(f"storage.mount_path={tmp_path}", f"data.dir={tmp_path}/d")
    names = [c.name for c in C.pod_checks(spec, {"HOME": str(tmp_path)}, shm_path=str(tmp_path), tmp=str(tmp_path))]
    assert names == ["user", "root_readonly", "writable:tmp", "writable:home", "writable:shm", "writable:storage",
                     "shm_size", "dataset"]


def test_cpu_pods_validate_verl_with_one_worker_per_pod():
    spec = _spec()
    used, note = C.validation_overrides(spec, ["trainer.n_gpus_per_node=0", "trainer.nnodes=1"])
    assert used == ["trainer.n_gpus_per_node=1", "trainer.nnodes=1"] and "0 GPUs" in note
    gpu = load_spec(REPO / "configs" / "grpo-exp3.yaml", ["workload=smoke"])
    assert C.validation_overrides(gpu, ["trainer.n_gpus_per_node=2"]) == (["trainer.n_gpus_per_node=2"], "")


# --------------------------------------------------------------------------------------------------
# Metric lines: what launcher.metrics makes of them


def test_metric_lines_parse_into_rows():
    line = S.metric_line(2, {"smoke/allreduce_ms": 1.25, "smoke/ray_task_ms": 4.5, "smoke/world_size": 2,
                             "timing_s/step": 1.003})
    assert line == "step:2 - smoke/allreduce_ms:1.25 - smoke/ray_task_ms:4.5 - smoke/world_size:2 - timing_s/step:1.003"
    rec = parse_line(line)
    assert rec.step == 2
    assert rec.metrics == {"smoke/allreduce_ms": 1.25, "smoke/ray_task_ms": 4.5, "smoke/world_size": 2,
                           "timing_s/step": 1.003}
    assert isinstance(rec.metrics["smoke/world_size"], int)


def test_a_smoke_log_gives_one_row_per_step_and_nothing_else():
    lines = ["[smoke] start role=single-node", C.Check("user", True, "uid=1000").line()]
    for step in (1, 2, 3):
        lines += S.pad_lines(step, 3)
        lines.append(S.metric_line(step, {"smoke/allreduce_ms": 0.5 * step, "timing_s/step": 1.0 + step / 10}))
    lines.append("[smoke] result ok")
    parser = LogParser()
    records = parser.feed(("\n".join(lines) + "\n").encode()) + parser.finish()
    assert [(r.step, r.metrics) for r in records] == [
        (1, {"smoke/allreduce_ms": 0.5, "timing_s/step": 1.1}),
        (2, {"smoke/allreduce_ms": 1.0, "timing_s/step": 1.2}),
        (3, {"smoke/allreduce_ms": 1.5, "timing_s/step": 1.3}),
    ]
    assert parser.counters.malformed == 0 and parser.counters.noise == 3 + 9


def test_pad_lines_are_fixed_width_noise():
    pads = S.pad_lines(4, 2)
    assert len(pads) == 2 and all(len(p) == S.PAD_WIDTH for p in pads)
    assert pads[0].startswith("[smoke] pad step=4 line=1/2 ")
    assert all(parse_line(p) is None for p in pads)
    assert S.pad_lines(1, 0) == []


# --------------------------------------------------------------------------------------------------
# nccl_check without torch: arithmetic and arguments


def test_expected_sum_is_computed_without_torch():
    assert [N.expected_sum(w) for w in (1, 2, 3, 8)] == [1.0, 3.0, 6.0, 36.0]
    assert N.expected_sum(4, 3) == 30.0


def test_bus_bandwidth_follows_nccl_tests():
    # 1 GiB over 8 ranks in 100 ms: 2 * 7/8 * 2^30 B / 0.1 s
    assert N.bus_bandwidth_gbps(1024, 8, 100.0) == pytest.approx(2 * 7 / 8 * 2**30 / 0.1 / 1e9)
    assert N.bus_bandwidth_gbps(16, 1, 1.0) == 0.0


def test_nccl_check_arguments():
    cfg = N.parse_args(["--world-size", "4", "--nnodes", "2", "--node-rank", "1", "--backend", "gloo"],
                       {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456"})
    assert (cfg.nproc, cfg.master_addr, cfg.master_port, cfg.backend) == (2, "job-master-0", 23456, "gloo")
    single = N.parse_args(["--world-size", "2", "--backend", "gloo"], {})
    assert single.master_addr == "127.0.0.1" and single.master_port > 0
    for bad in (["--world-size", "3", "--nnodes", "2"], ["--world-size", "2", "--nnodes", "2", "--node-rank", "2"],
                ["--world-size", "2", "--nnodes", "2"]):  # the last: no port for several nodes
        with pytest.raises(SystemExit) as info:
            N.parse_args(bad, {})
        assert info.value.code == 2


def test_nccl_check_lines():
    cfg = N.Config(world_size=2, backend="gloo", size_mb=1)
    results = [N.RankResult(0, True, "gloo", "cpu", 2.0, 3.0, 3.0), N.RankResult(1, False, "gloo", "cpu", error="boom")]
    assert results[0].line() == "[nccl_check] rank 0 ok backend=gloo device=cpu allreduce_ms=2.000 value=3 expected=3"
    assert results[1].line().endswith("error=boom") and " FAIL " in results[1].line()
    assert N.summary_line(cfg, results).startswith("[nccl_check] result FAIL backend=gloo world_size=2 nnodes=1 "
                                                   "size_mb=1 allreduce_ms=2.000 busbw_gbps=")


# --------------------------------------------------------------------------------------------------
# The entrypoint runs the smoke workload in verl's place


def test_dry_run_shows_the_smoke_command(capsys):
    assert entrypoint_main(["--config", str(SMOKE), "--dry-run"], container_env={}) == 0
    out = capsys.readouterr().out
    assert "# role: single-node" in out
    assert f"-m launcher.entrypoint.smoke --config {SMOKE} --role single-node" in out
    assert "verl.trainer.main_ppo" not in out


def test_dry_run_of_a_multi_node_worker_shows_its_participant(capsys):
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "smoke-cpu-x-master-0", "MASTER_PORT": "23456"}
    spec = SMOKE.parent / "smoke-cpu.yaml"
    import tempfile

    import yaml

    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "spec.yaml"
        raw = yaml.safe_load(spec.read_text())
        raw["resources"]["nodes"] = 2
        cfg.write_text(yaml.safe_dump(raw))
        assert entrypoint_main(["--config", str(cfg), "--dry-run"], container_env=env) == 0
    out = capsys.readouterr().out
    assert "# role: ray-worker" in out and "smoke participant" in out and "--role ray-worker" in out


def test_eval_mode_is_refused_for_the_smoke_workload(capsys):
    assert entrypoint_main(["--config", str(SMOKE), "--mode", "eval", "--dry-run"], container_env={}) == 2
    assert "workload smoke trains nothing" in capsys.readouterr().err
