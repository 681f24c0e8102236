"""What a run directory records (launcher.run.provenance), `launcher diff` and `launcher relaunch --dry-run`
(no cluster: everything here is before the first API call)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from launcher.run import provenance

from launcher.run import diff as rundiff

import simlog
from launcher.cli.main import main
from launcher.spec.load import dump_spec, load_spec
from launcher.render.manifests import render, to_yaml
from launcher.run.dirs import RunDir

ROOT = Path(__file__).resolve().parents[2]
EXP3 = ROOT / "configs" / "grpo-exp3.yaml"
EXP4 = ROOT / "configs" / "grpo-exp4.yaml"
IMAGE_ID = "sha256:" + "2f" * 32


def make_run(root: Path, config: Path, *sets, image_id: str | None = IMAGE_ID, verl_log=True) -> RunDir:
    """A run directory as submit + the follower write it: spec, manifests, provenance, images, verl config."""
    spec = load_spec(config, sets)
    rd = RunDir(root / spec.job_name).ensure()
    rd.write_text(rd.spec, dump_spec(spec))
    rd.write_text(rd.manifests, to_yaml(render(spec)))
    provenance.write_submitted(rd, spec)
    pod = {"metadata": {"name": f"{spec.job_name}-master-0"},
           "status": {"containerStatuses": [{"name": "pytorch", "image": spec.image, "imageID": image_id or ""}],
                      "initContainerStatuses": [{"name": "prepare-data", "image": spec.image,
                                                 "imageID": image_id or ""}]}}
    provenance.ImageRecorder(rd).record(pod)
    if verl_log:
        cap = provenance.VerlConfigCapture()
        for line in simlog.generate(steps=spec.trainer.total_training_steps, n=spec.rollout.n,
                                    max_response_length=spec.data.max_response_length):
            config = cap.feed([line.rstrip("\n")])
            if config:
                provenance.save_verl_config(rd, config, pod["metadata"]["name"])
    return rd


# --- records ------------------------------------------------------------------------------------------------

def test_verl_config_is_captured_from_the_start_up_pprint():
    cap = provenance.VerlConfigCapture()
    lines = [ln.rstrip("\n") for ln in simlog.generate(steps=3, n=4, max_response_length=512)]
    # something else pprinted first, and a brace line that is not a dict, must not confuse it
    noise = ["{'some': 'other dict'}", "(TaskRunnerV1 pid=1) {'x': [1,", "(TaskRunnerV1 pid=1) plain line"]
    got = [c for c in (cap.feed([ln]) for ln in noise + lines) if c]
    assert len(got) == 1
    cfg = got[0]
    assert cfg["actor_rollout_ref"]["rollout"]["n"] == 4 and cfg["data"]["max_response_length"] == 512
    assert cfg["trainer"]["total_training_steps"] == 3
    assert cap.feed(lines) is None  # once


def test_verl_config_is_captured_when_ray_forwards_its_lines_in_pieces():
    """A real 2-node TrainJob's log (grpo-exp3-cpu with a --verl override, CI on a loaded machine): Ray forwarded
    verl's config pprint in pieces (a line cut after `{'distributed': `, `None` and `,` as lines of their own), which
    the capture read as the end of the pprint before, so the run had no verl_config.json."""
    lines = (Path(__file__).resolve().parents[1] / "fixtures" / "verl_config_split_by_ray.log").read_text().splitlines()
    pieces = [ln for ln in lines if ln.startswith("(TaskRunnerV1 pid=307) ") and not ln[23:].startswith((" ", "{'a"))]
    assert len(pieces) > 20  # the fixture still shows what it is for
    cap = provenance.VerlConfigCapture()
    got = [c for c in (cap.feed([ln]) for ln in lines) if c]
    assert len(got) == 1
    cfg = got[0]
    assert cfg["actor_rollout_ref"]["rollout"]["max_num_batched_tokens"] == 2048
    assert cfg["actor_rollout_ref"]["rollout"]["load_format"] == "dummy"  # one of the cut lines
    assert cfg["trainer"]["nnodes"] == 2 and cfg["trainer"]["device"] == "cpu"
    # the same lines with another actor's output between them: each actor's lines are read apart
    mixed = [x for ln in lines for x in (ln, "(WorkerDict pid=9) INFO something else {")]
    cap = provenance.VerlConfigCapture()
    assert [c for c in (cap.feed([ln]) for ln in mixed) if c] == [cfg]
    # a `{'` line that never closes, then a long run of step lines: that reading is dropped, the config still found
    steps = [f"(TaskRunnerV1 pid=307) step:{i} - actor/entropy:1.5 - critic/score/mean:0.1" for i in range(2000)]
    cap = provenance.VerlConfigCapture()
    assert cap.feed(["(TaskRunnerV1 pid=307) {'x': [1,", *steps]) is None
    assert len(cap._candidates) == 0
    assert cap.feed(lines) == cfg


def test_verl_config_is_captured_with_the_process_stderr_between_its_pieces():
    """A real 2-node TrainJob's log (CI-like run on a loaded machine): the TaskRunner's own stderr (logging's
    `INFO:...`, five warnings of two lines each) landed between two pieces of the pprint, and three pieces began
    with `{'` (ref, rollout, optim). Ray also lost one piece there (`{'_target_': '...ProfilerConfig',` after
    `'profiler': `); the fixture puts that one line back, so it shows what the capture must read past."""
    lines = (Path(__file__).resolve().parents[1] / "fixtures" / "verl_config_stderr_between_pieces.log").read_text()
    lines = lines.splitlines()
    assert any(ln.startswith("(TaskRunnerV1 pid=306) INFO:") for ln in lines)  # the fixture still shows what it is for
    assert sum(ln.startswith("(TaskRunnerV1 pid=306) {'") for ln in lines) >= 4
    cap = provenance.VerlConfigCapture()
    got = [c for c in (cap.feed([ln]) for ln in lines) if c]
    assert len(got) == 1
    cfg = got[0]
    assert cfg["actor_rollout_ref"]["rollout"]["max_num_batched_tokens"] == 2048
    assert cfg["actor_rollout_ref"]["actor"]["profiler"]["_target_"] == "verl.utils.profiler.ProfilerConfig"
    assert cfg["trainer"]["nnodes"] == 2 and cfg["trainer"]["total_training_steps"] == 3


def test_literal_parser_takes_non_finite_floats_and_refuses_code():
    assert provenance.parse_literal("{'a': nan, 'b': [-inf, 1e-06], 'c': None, 'd': (1, 'x')}")["b"][0] == -float("inf")
    assert provenance.parse_literal("__import__('os').system('true')") is None
    assert provenance.parse_literal("{'a': open}") is None


def test_images_json_records_what_the_kubelet_reported(tmp_path):
    rd = RunDir(tmp_path / "r").ensure()
    rec = provenance.ImageRecorder(rd)
    pod = {"metadata": {"name": "p"}, "status": {"containerStatuses": [{"name": "c", "image": "img:1", "imageID": ""}]}}
    rec.record(pod)
    assert json.loads(rd.images.read_text())["pods"]["p"]["c"] == {"image": "img:1", "imageID": None}
    pod["status"]["containerStatuses"][0]["imageID"] = "docker-pullable://reg/img@sha256:" + "ab" * 32
    rec.record(pod)
    data = json.loads(rd.images.read_text())
    assert data["pods"]["p"]["c"]["imageID"] == "reg/img@sha256:" + "ab" * 32
    assert provenance.digests_by_image(data) == {"img:1": {"reg/img@sha256:" + "ab" * 32}}


def test_pin_images_changes_only_the_image_of_every_container():
    spec = load_spec(EXP3)
    objects = render(spec)
    pinned = provenance.pin_images(objects, {spec.image: IMAGE_ID})
    text, before = to_yaml(pinned), to_yaml(objects)
    assert f"image: {spec.image}" not in text
    assert f"image: {IMAGE_ID}" in text and text.count(f"image: {IMAGE_ID}") == before.count(f"image: {spec.image}")
    assert text.replace(IMAGE_ID, spec.image) == before  # nothing else changed (labels, hash, ConfigMap)


# --- diff ---------------------------------------------------------------------------------------------------

def test_diff_of_exp3_and_exp4_names_exactly_rollout_n_and_max_response_length(tmp_path):
    a, b = make_run(tmp_path, EXP3), make_run(tmp_path, EXP4)
    d = rundiff.compare(a.path, b.path)
    assert [(x["key"], x["a"], x["b"]) for x in d["spec"]] == [
        ("data.max_response_length", 256, 512), ("rollout.n", 2, 4)]
    assert {x["key"]: x["verl"] for x in d["spec"]} == {
        "data.max_response_length": ["data.max_response_length"], "rollout.n": ["actor_rollout_ref.rollout.n"]}
    assert sorted(x["key"] for x in d["verl_config"]) == ["actor_rollout_ref.rollout.n", "data.max_response_length"]
    assert d["image"]["same_reference"] and d["image"]["same_ran"]
    assert (d["a"]["name"], d["b"]["name"]) == ("grpo-exp3", "grpo-exp4")


def test_diff_cli_text_and_json(tmp_path, capsys):
    a, b = make_run(tmp_path, EXP3), make_run(tmp_path, EXP4, image_id="sha256:" + "11" * 32)
    assert main(["diff", str(a.path), str(b.path)]) == 0
    out = capsys.readouterr().out
    assert "  rollout.n: 2 -> 4   (verl: actor_rollout_ref.rollout.n)" in out
    assert "  data.max_response_length: 256 -> 512   (verl: data.max_response_length)" in out
    assert IMAGE_ID in out and "sha256:" + "11" * 32 in out
    # job names under --runs-dir work too; -o json is the RunDiff shape
    assert main(["diff", a.path.name, b.path.name, "--runs-dir", str(tmp_path), "-o", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "RunDiff" and not d["image"]["same_ran"]
    assert main(["diff", a.path.name, b.path.name, "--runs-dir", str(tmp_path)]) == 0
    assert main(["diff", str(a.path), str(a.path)]) == 0
    same = capsys.readouterr().out
    assert "spec: no differences" in same and "verl config: no differences" in same and "image: same" in same


def test_diff_of_a_missing_run_is_bad_input(tmp_path, capsys):
    assert main(["diff", str(tmp_path / "nope"), str(tmp_path / "nope2")]) == 2
    assert "expected a run directory or a job name" in capsys.readouterr().err


# --- relaunch (before any cluster call) -------------------------------------------------------------------

def _objects(text: str) -> list[dict]:
    return [o for o in yaml.safe_load_all(text) if o]


def _images(objs) -> set[str]:
    out = set()

    def walk(n):
        if isinstance(n, dict):
            for k in ("containers", "initContainers"):
                out.update(c["image"] for c in n.get(k) or [])
            for v in n.values():
                walk(v)
        elif isinstance(n, list):
            for v in n:
                walk(v)

    walk(objs)
    return out


def test_relaunch_dry_run_same_name_and_pinned_digest(tmp_path, capsys):
    rd = make_run(tmp_path, EXP3)
    spec = load_spec(EXP3)
    assert main(["relaunch", str(rd.path), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    objs = _objects(out)
    job = [o for o in objs if o["kind"] == "PyTorchJob"][0]
    assert job["metadata"]["name"] == spec.job_name == rd.path.name
    assert _images(objs) == {IMAGE_ID}
    # a named variation: a new config hash and name, the same pinned image
    assert main(["relaunch", str(rd.path), "--dry-run", "--set", "rollout.n=4"]) == 0
    objs = _objects(capsys.readouterr().out)
    job = [o for o in objs if o["kind"] == "PyTorchJob"][0]
    assert job["metadata"]["name"] == load_spec(EXP3, ["rollout.n=4"]).job_name != spec.job_name
    assert _images(objs) == {IMAGE_ID}
    # --set image=... is a different image: nothing pinned
    assert main(["relaunch", str(rd.path), "--dry-run", "--set", "image=reg/other:2"]) == 0
    assert _images(_objects(capsys.readouterr().out)) == {"reg/other:2"}


def test_relaunch_of_a_kwok_run_says_no_digest_was_reported(tmp_path, capsys):
    rd = make_run(tmp_path, EXP3, image_id=None)
    assert main(["relaunch", str(rd.path), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert _images(_objects(out)) == {load_spec(EXP3).image}
    assert "no imageID recorded" in err and "KWOK" in err


def test_relaunch_refuses_ambiguous_images_and_edited_specs(tmp_path, capsys):
    rd = make_run(tmp_path, EXP3)
    spec = load_spec(EXP3)
    provenance.ImageRecorder(rd).record({"metadata": {"name": "other-pod"}, "status": {"containerStatuses": [
        {"name": "pytorch", "image": spec.image, "imageID": "sha256:" + "99" * 32}]}})
    assert main(["relaunch", str(rd.path), "--dry-run"]) == 2
    assert "2 different images" in capsys.readouterr().err
    rd2 = make_run(tmp_path / "b", EXP3)
    rd2.spec.write_text(rd2.spec.read_text().replace("n: 2", "n: 4", 1))
    assert main(["relaunch", str(rd2.path), "--dry-run"]) == 2
    assert "recorded " + spec.job_name in capsys.readouterr().err
    assert main(["relaunch", str(tmp_path / "missing"), "--dry-run"]) == 2


# --- watchdog flags ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("verb", [["submit", str(EXP3), "--follow"], ["logs", "x", "-f"], ["watch", "x"],
                                  ["relaunch", "RUN", "--follow"]])
def test_bad_watchdog_flags_exit_2_before_any_cluster_call(verb, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    if verb[0] == "relaunch":
        verb = ["relaunch", str(make_run(tmp_path, EXP3).path), "--follow"]
    assert main([*verb, "--stall-factor", "0"]) == 2
    assert "--stall-factor: expected a number > 0, got 0" in capsys.readouterr().err
