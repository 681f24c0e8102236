"""The watchdog and exact relaunch on the local control plane (real kube-apiserver, training-operator, KWOK).

Simulated here: the trainer. The pods run on KWOK fake nodes and their log is a simlog-generated verl log
served through KWOK `Logs`; "a run whose log stops advancing" is that served log no longer being appended to
while the pod stays Running. KWOK pods report no imageID (`containerStatuses[].imageID: ""`), so relaunch's
digest pinning is covered on the real node (test_relaunch_on_the_real_node_pins_the_image_id below, which uses
the existing CPU image and needs nothing new inside it).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import kwok_support as ks
from launcher_helpers import job_name, rows, run_launcher, serve_run, submit_args, verl_lines

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
EXP4 = str(REPO / "configs" / "grpo-exp4.yaml")


def _job_exists(info, ns, job) -> bool:
    r = info.kubectl("-n", ns, "get", "pytorchjob", job, "-o", "name", check=False)
    return r.returncode == 0


def _findings(run: Path) -> list[dict]:
    p = run / "findings.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def _stall_args(*extra):
    # simlog's steps take ~20 s of verl time; a bound of max(4 s, 0.1 x median) keeps the test short
    return ["--stall-factor", "0.1", "--stall-min", "4", *extra]


def test_stalled_run_is_flagged_within_the_bound_and_deleted(kube_cluster, namespace, tmp_path):
    ns, runs = namespace, tmp_path / "runs"
    steps, delay = 25, "600s"  # the pod stays Running: only the watchdog ends this run
    job = job_name(ns, steps, delay)
    lines = verl_lines(steps, seed=11)
    stop_at = next(i for i, ln in enumerate(lines) if "step:8 " in ln) + 1  # the log stops after step 8
    served = serve_run(kube_cluster, ns, f"{job}-master-0", lines[:stop_at], initial=stop_at - 4)
    live = served.start(interval=0.3)
    try:
        rc, out, err = run_launcher(submit_args(ns, steps, delay, "--follow", *_stall_args("--on-stall", "delete")),
                                    kube_cluster, runs, timeout=180)
    finally:
        live.stop()
    run = runs / job
    assert rc == 1, err[-3000:]
    assert "run deleted by the watchdog (--on-stall delete): stalled: no new step" in err
    assert err.count("watchdog: stall:") == 1, err[-3000:]
    assert [r["step"] for r in rows(run)] == list(range(1, 9))
    found = _findings(run)
    assert [(f["kind"], f["step"], f["action"]) for f in found] == [("stall", 8, "delete")]
    ev = found[0]["evidence"]
    # flagged once the bound had passed; how soon after is a benchmark's figure (bench/bench_incident.py), not a test's
    assert ev["bound_s"] == pytest.approx(4.0) and ev["idle_s"] >= 4.0
    assert not _job_exists(kube_cluster, ns, job)
    # the run's ConfigMap went with the job, as `launcher delete` does it (a created PVC would be kept: keep_pvc)
    assert kube_cluster.kubectl("-n", ns, "get", "configmap", "-l", f"app.kubernetes.io/instance={job}",
                                "-o", "name").stdout.split() == []


def test_watch_reports_a_stall_once_and_leaves_the_run_alone(kube_cluster, namespace, tmp_path):
    ns, runs = namespace, tmp_path / "runs"
    steps, delay = 25, "20s"
    job = job_name(ns, steps, delay)
    lines = verl_lines(steps, seed=12)
    stop_at = next(i for i, ln in enumerate(lines) if "step:5 " in ln) + 1
    serve_run(kube_cluster, ns, f"{job}-master-0", lines[:stop_at], initial=stop_at)
    rc, out, err = run_launcher(submit_args(ns, steps, delay), kube_cluster, runs)
    assert rc == 0, err
    rc, out, err = run_launcher(["watch", job, "-n", ns, "-o", "json", *_stall_args()], kube_cluster, runs,
                                timeout=120)
    assert rc == 0, err[-3000:]  # report only: the run went on and succeeded
    printed = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert [(p["kind"], p["step"]) for p in printed] == [("stall", 5)]
    assert [(f["kind"], f["action"]) for f in _findings(runs / job)] == [("stall", None)]
    assert "1 finding(s)" in err
    # watching again: the finding is already recorded, so it is not printed twice
    rc, out, err = run_launcher(["watch", job, "-n", ns, *_stall_args()], kube_cluster, runs, timeout=60)
    assert rc == 0 and "watchdog:" not in out, out


def test_relaunch_reproduces_the_job_name_and_diff_names_the_changed_keys(kube_cluster, namespace, tmp_path):
    import simlog

    ns, runs = namespace, tmp_path / "runs"
    steps, delay = 6, "6s"
    job = job_name(ns, steps, delay)
    lines = verl_lines(steps, seed=13)
    serve_run(kube_cluster, ns, f"{job}-master-0", lines, initial=len(lines))
    rc, out, err = run_launcher(submit_args(ns, steps, delay, "--follow"), kube_cluster, runs, timeout=120)
    assert rc == 0, err[-3000:]
    run = runs / job
    images = json.loads((run / "images.json").read_text())["pods"][f"{job}-master-0"]
    assert images["pytorch"]["imageID"] is None  # KWOK: no container, no image digest (see the module docstring)
    verl = json.loads((run / "verl_config.json").read_text())["config"]
    assert verl["actor_rollout_ref"]["rollout"]["n"] == 2
    prov = json.loads((run / "provenance.json").read_text())
    assert prov["job"] == job and prov["launcher_version"]

    rc, out, err = run_launcher(["delete", job, "-n", ns], kube_cluster, runs, timeout=120)
    assert rc == 0, err
    served_again = serve_run(kube_cluster, ns, f"{job}-master-0", lines, initial=len(lines))
    assert served_again
    rc, out, err = run_launcher(["relaunch", str(run), "--follow"], kube_cluster, runs, timeout=120)
    assert rc == 0, err[-3000:]
    assert f"submitted PyTorchJob {job}" in out and "same config, same job name" in err
    assert "no imageID recorded" in err
    prev = runs / f"{job}.prev-1"
    assert prev.is_dir() and (prev / "metrics.jsonl").is_file()
    assert [r["step"] for r in rows(run)] == list(range(1, steps + 1))  # the relaunch's own rows, each once
    assert json.loads((run / "provenance.json").read_text())["relaunched_from"] == str(prev)
    rc, out, err = run_launcher(["diff", str(prev), str(run)], kube_cluster, runs)
    assert rc == 0 and "spec: no differences" in out and "verl config: no differences" in out, out

    # exp4 beside exp3: diff names exactly rollout.n and data.max_response_length
    sets = [f"scheduling.namespace={ns}", f"trainer.total_training_steps={steps}",
            "scheduling.pod_annotations=" + json.dumps({ks.POD_COMPLETE_DELAY: delay})]
    from launcher.spec.load import load_spec

    job4 = load_spec(EXP4, sets).job_name
    lines4 = [ln.rstrip("\n") for ln in simlog.generate(steps=steps, seed=14, n=4, max_response_length=512)]
    serve_run(kube_cluster, ns, f"{job4}-master-0", lines4, initial=len(lines4))
    args4 = ["submit", EXP4, "-n", ns, "--follow", "--set", f"trainer.total_training_steps={steps}",
             "--set", "scheduling.pod_annotations=" + json.dumps({ks.POD_COMPLETE_DELAY: delay})]
    rc, out, err = run_launcher(args4, kube_cluster, runs, timeout=120)
    assert rc == 0, err[-3000:]
    rc, out, err = run_launcher(["diff", job, job4, "-o", "json"], kube_cluster, runs)
    assert rc == 0, err
    d = json.loads(out)
    assert [x["key"] for x in d["spec"]] == ["data.max_response_length", "rollout.n"]
    assert [x["verl"] for x in d["spec"]] == [["data.max_response_length"], ["actor_rollout_ref.rollout.n"]]
    assert sorted(x["key"] for x in d["verl_config"]) == ["actor_rollout_ref.rollout.n", "data.max_response_length"]


@pytest.mark.realnode
@pytest.mark.smallpods
def test_relaunch_on_the_real_node_pins_the_image_id(kube_cluster, namespace, tmp_path):
    """A real container of the existing CPU image (configs/smoke-cpu.yaml): its imageID is recorded, and the
    relaunch runs the same job name with its pods' image set to that imageID, which they report back."""
    import realnode as rn
    from launcher.spec.load import load_spec

    rn.ensure_real_node(kube_cluster)
    ns, runs = namespace, tmp_path / "runs"
    job = load_spec(rn.SMOKE, [f"scheduling.namespace={ns}"]).job_name
    rc, out, err = run_launcher(["submit", rn.SMOKE, "-n", ns, "--follow"], kube_cluster, runs, timeout=600)
    assert rc == 0, err[-3000:]
    run = runs / job
    ran = {c["imageID"] for p in json.loads((run / "images.json").read_text())["pods"].values() for c in p.values()}
    assert len(ran) == 1 and next(iter(ran)).startswith("sha256:"), ran
    image_id = next(iter(ran))
    rc, out, err = run_launcher(["delete", job, "-n", ns], kube_cluster, runs, timeout=300)
    assert rc == 0, err
    rc, out, err = run_launcher(["relaunch", str(run), "--follow"], kube_cluster, runs, timeout=600)
    assert rc == 0, err[-3000:]
    assert f"pinning {rn.CPU_IMAGE} to {image_id}" in err and f"submitted PyTorchJob {job}" in out
    pods = json.loads((run / "images.json").read_text())["pods"]
    assert {c["imageID"] for p in pods.values() for c in p.values()} == {image_id}  # the relaunch ran that image
    live = rn.pods(kube_cluster, ns)
    specs = {c["image"] for p in live for c in p["spec"].get("initContainers", []) + p["spec"]["containers"]}
    assert specs == {image_id}, specs  # ...because its pods asked for it by id, not by the tag
    assert json.loads((run / "provenance.json").read_text())["pinned_images"] == {rn.CPU_IMAGE: image_id}
