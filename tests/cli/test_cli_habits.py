"""kubectl and helm habits: `-o json|yaml`, `-d DIR`, `list -A`, `wait`'s own timeout code, shell completion,
and broken pipes (`launcher schema | head`) ending without a traceback.

Cluster verbs run against the recording `FakeApiServer` (the real `Kube` over HTTP); tests/e2e/test_cli_habits_e2e.py
proves the same against the real control plane."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kube_fakes import CLI_NS, FakeApiServer, cli_api, pytorchjob  # noqa: F401 - cli_api: fixture `api`
from launcher.cli.main import build_parser, main
from launcher.errors import EXIT_BROKEN_PIPE, EXIT_CODES, EXIT_TIMEOUT

ROOT = Path(__file__).resolve().parents[2]
EXP3 = str(ROOT / "configs" / "grpo-exp3.yaml")
NS = CLI_NS
JOB = "exp-12345678"
PTJ = f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs"
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}



def job(name=JOB, ns=NS, conditions=(("Running", "True"),)) -> dict:
    obj = pytorchjob(name, conditions=conditions)
    obj["metadata"].update(namespace=ns, creationTimestamp="2026-01-01T00:00:00Z")
    return obj


def serve_job(api: FakeApiServer, obj: dict) -> None:
    api.routes[("GET", f"{PTJ}/{obj['metadata']['name']}")] = (200, obj)
    # lists, and watches (a bookmark, then the fake ends the stream: the follower's informer watches again)
    api.routes[("GET", PTJ)] = (200, lambda q, b: _listed([obj], q))
    api.routes[("GET", f"/api/v1/namespaces/{NS}/pods")] = (200, lambda q, b: _listed([], q))
    api.routes[("GET", f"/api/v1/namespaces/{NS}/events")] = (200, {"items": []})


def _listed(items: list[dict], query: dict) -> dict:
    if query.get("watch"):
        return {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}}
    return {"metadata": {"resourceVersion": "7"}, "items": items}


# render -----------------------------------------------------------------------------------------


def test_render_o_json_and_yaml_print_the_objects(capsys):
    assert main(["render", EXP3, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "List" and [o["kind"] for o in doc["items"]] == ["ConfigMap", "PyTorchJob"]
    assert main(["render", EXP3, "-o", "yaml"]) == 0
    assert [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)] == ["ConfigMap", "PyTorchJob"]
    assert main(["render", EXP3]) == 0
    assert json.loads(json.dumps(list(yaml.safe_load_all(capsys.readouterr().out)))) == doc["items"]


def test_render_o_directory_is_refused_naming_both_options(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["render", EXP3, "-o", "json"]) == 0 and not (tmp_path / "json").exists()
    capsys.readouterr()
    assert main(["render", EXP3, "-o", "out/exp3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: -o/--output: expected a format, one of yaml, json, got 'out/exp3'; "
                   "to write files into a directory use -d/--output-dir DIR")
    assert not (tmp_path / "out").exists()
    assert main(["render", EXP3, "-o", "json", "-d", "x"]) == 2
    assert "choose one" in capsys.readouterr().err and not (tmp_path / "x").exists()
    assert main(["render", EXP3, "--output-dir", "x"]) == 0
    assert sorted(p.name[:3] for p in (tmp_path / "x").iterdir()) == ["00-", "01-"]


@pytest.mark.parametrize("verb", ["metrics", "report", "compare"])
def test_verbs_that_write_a_directory_take_d_and_refuse_a_format_for_o(verb, tmp_path, capsys, monkeypatch):
    """metrics/report/compare write files: `-d/--output-dir DIR`; `-o json` (kubectl habit) is refused by name
    before anything is read or written, not turned into a directory called `json`."""
    import simlog

    monkeypatch.chdir(tmp_path)
    log = tmp_path / "run.log"
    simlog.main(["--steps", "3", "-o", str(log)])
    assert main(["metrics", str(log), "-d", str(tmp_path / "run")]) == 0
    args = {"metrics": [str(log)], "report": [str(tmp_path / "run")],
            "compare": [str(tmp_path / "run"), str(tmp_path / "run")]}[verb]
    capsys.readouterr()
    for word in ("json", "YAML", "wide"):
        assert main([verb, *args, "-o", word]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: -d/--output-dir: expected a directory, got {word!r}, which is an output "
                              "format"), err
        assert not (tmp_path / word).exists()
    extra = ["--no-plots"] if verb != "metrics" else []
    assert main([verb, *args, *extra, "--output-dir", str(tmp_path / "out")]) == 0
    assert any((tmp_path / "out").iterdir())
    assert main([verb, *args, *extra, "-o", str(tmp_path / "older")]) == 0  # the older spelling of -d
    assert any((tmp_path / "older").iterdir())


def test_no_caller_uses_render_o_for_a_directory():
    """Makefile, mk/, hack/, docs and tests call `render -d DIR`; `-o` is only ever a format now."""
    files = [ROOT / "Makefile", ROOT / "README.md", ROOT / "ARCHITECTURE.md", *ROOT.glob("mk/*.mk"),
             *ROOT.glob("hack/*.py"), *ROOT.glob("hack/**/*.sh"), *ROOT.glob("manifests/*.md"),
             *ROOT.glob("tests/**/*.py")]
    bad = re.compile(r"render[^\n]*(?:-o|--output)[ =\",']+(?!json|yaml)[\w./<{$]")
    hits = [f"{f.relative_to(ROOT)}: {m.group(0)}" for f in files for m in bad.finditer(f.read_text())
            if f.name != "test_cli_habits.py"]
    assert hits == []


# -o on status / list / wait ---------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["status", JOB, "-o", "table"], ["list", "-o", "wide"],
                                  ["wait", JOB, "-o", "jsn"], ["wait", JOB, "--timeout", "-1"],
                                  ["list", "-A", "-n", "x"]])
def test_bad_output_flags_exit_2_before_any_request(api, argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert re.search(r"-o/--output|--timeout|-A/--all-namespaces", err)
    assert api.requests == []


def test_status_json_shape(api, capsys):
    serve_job(api, job())
    assert main(["status", JOB, "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {k: out[k] for k in ("apiVersion", "kind", "name", "namespace", "backend", "jobKind", "experiment")} == {
        "apiVersion": "grpo-launcher/v1", "kind": "Run", "name": JOB, "namespace": NS, "backend": "pytorchjob",
        "jobKind": "PyTorchJob", "experiment": "exp"}
    assert out["state"] == {"phase": "Running", "finished": False, "succeeded": False, "reason": ""}
    assert out["pods"] == [] and out["events"] == [] and out["conditions"][0]["type"] == "Running"


def test_list_all_namespaces_table_and_yaml(api, capsys):
    api.routes[("GET", "/apis/kubeflow.org/v1/pytorchjobs")] = (200, {"items": [job("a-1", "ns-a"), job("b-1", "ns-b")]})
    api.routes[("GET", "/apis/ray.io/v1/rayjobs")] = (404, {"kind": "Status", "code": 404})
    assert main(["list", "-A"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "BACKEND", "STATE", "AGE", "EXPERIMENT"]
    assert sorted(ln.split()[:2] for ln in lines[1:]) == [["ns-a", "a-1"], ["ns-b", "b-1"]]
    # one cluster-wide list per backend, never a namespaced one
    assert {p for _, p, _, _ in api.requests} == {"/apis/kubeflow.org/v1/pytorchjobs", "/apis/ray.io/v1/rayjobs",
                                                  "/apis/trainer.kubeflow.org/v1alpha1/trainjobs"}
    assert main(["list", "--all-namespaces", "-o", "yaml"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["kind"] == "RunList" and sorted((i["namespace"], i["name"]) for i in doc["items"]) == [
        ("ns-a", "a-1"), ("ns-b", "b-1")]


def test_wait_timeout_has_its_own_exit_code(api, capsys):
    serve_job(api, job())  # Running, and it stays so
    assert main(["wait", JOB, "--timeout", "0.3", "--interval", "0.1"]) == EXIT_TIMEOUT == 124
    assert "timed out after 0.3s" in capsys.readouterr().err
    assert main(["wait", JOB, "--timeout", "0.2", "--interval", "0.1", "-o", "json"]) == 124
    out = json.loads(capsys.readouterr().out)
    assert out["result"] == "timeout" and out["exitCode"] == 124 and out["state"]["phase"] == "Running"


def test_wait_json_on_success(api, capsys):
    serve_job(api, job(conditions=(("Succeeded", "True"),)))
    assert main(["wait", JOB, "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)  # only the object on stdout: no "succeeded" line mixed in
    assert out["result"] == "succeeded" and out["exitCode"] == 0 and out["state"]["succeeded"] is True


def test_wait_on_a_failed_run_shows_the_saved_log_of_a_retry_pod_that_never_started(api, capsys, tmp_path):
    """The operator's retry of the failed master, Unschedulable once the job failed (CI-like run, 2026-12-05): it has
    no log; `wait` names why it is pending and shows the earlier instance's log, which the follower saved."""
    serve_job(api, job(conditions=(("Failed", "True"),)))
    pod = {"metadata": {"name": f"{JOB}-master-0", "namespace": NS,
                        "labels": {"training.kubeflow.org/job-name": JOB, "training.kubeflow.org/replica-type": "master",
                                   "training.kubeflow.org/replica-index": "0"}},
           "spec": {"containers": [{"name": "pytorch"}]},
           "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                          "reason": "Unschedulable", "message": "0/8 nodes are available"}]}}
    api.routes[("GET", f"/api/v1/namespaces/{NS}/pods")] = (200, lambda q, b: _listed([pod], q))
    logs = tmp_path / JOB / "logs"
    logs.mkdir(parents=True)
    (logs / f"{JOB}-master-0.log").write_text("step:1 - x:1\nRuntimeError: CUDA error: out of memory\n")
    assert main(["wait", JOB, "--runs-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "Unschedulable: 0/8 nodes are available" in err, err
    assert "RuntimeError: CUDA error: out of memory (saved)" in err, err
    assert "no log:" not in err, err


# exit codes -------------------------------------------------------------------------------------


def test_exit_codes_documented_in_help_and_readme(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["wait", "--help"])
    help_text = capsys.readouterr().out
    readme = (ROOT / "README.md").read_text()
    assert len(set(EXIT_CODES)) == len(EXIT_CODES) == 7
    for code, meaning in EXIT_CODES.items():
        assert re.search(rf"^  {code}\s+{re.escape(meaning)}$", help_text, re.M), code
        assert re.search(rf"^\| {code} \| ", readme, re.M), f"README exit code table lacks {code}"


# shell completion -------------------------------------------------------------------------------


def _complete_bash(script: Path, words: list[str]) -> list[str]:
    """Run bash's completion function for `words` (the last one being completed) and return COMPREPLY."""
    line = " ".join(words)
    prog = (f"source {script}; COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; "
            f"COMP_LINE={line!r}; COMP_POINT={len(line)}; _shtab_launcher launcher; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    out = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_bash_completion_completes_verbs_and_flags(tmp_path, capsys):
    script = tmp_path / "launcher.bash"
    assert main(["completion", "bash"]) == 0  # in this process, as zsh's and fish's below: bash is what runs it
    script.write_text(capsys.readouterr().out)
    assert _complete_bash(script, ["launcher", "sub"]) == ["submit"]
    assert sorted(_complete_bash(script, ["launcher", "s"])) == ["schema", "status", "submit", "sweep"]
    assert _complete_bash(script, ["launcher", "list", "--all"]) == ["--all-namespaces"]
    assert _complete_bash(script, ["launcher", "completion", "f"]) == ["fish"]
    assert _complete_bash(script, ["launcher", "submit", "--backend", "ray"]) == ["rayjob"]
    # CONFIG completes file names
    (tmp_path / "exp.yaml").write_text("")
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert "exp.yaml" in _complete_bash(script, ["launcher", "validate", "ex"])
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("shell, marker, broken", [("zsh", "#compdef launcher", "if true; then\n"),
                                                    ("fish", "complete -c launcher", "if true\n")],
                         ids=["zsh", "fish"])
def test_zsh_and_fish_scripts_are_produced(shell, marker, broken, capsys):
    """The script is produced and the shell itself parses it: never skipped, a missing shell fails naming the
    Debian package to install."""
    assert main(["completion", shell]) == 0
    out = capsys.readouterr().out
    assert marker in out and "submit" in out and "all-namespaces" in out
    assert shutil.which(shell), (f"{shell} is not installed, so its completion script's syntax cannot be checked: "
                                 f"install it (Debian: apt-get install {shell})")
    check = ["zsh", "-n"] if shell == "zsh" else ["fish", "--no-execute"]
    p = subprocess.run(check, input=out, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    # the check can fail: the same command refuses a script that does not parse
    assert subprocess.run(check, input=broken, capture_output=True, text=True, timeout=60).returncode != 0


def test_completion_unknown_shell_exits_2(capsys):
    assert main(["completion", "csh"]) == 2
    assert "invalid choice: 'csh'" in capsys.readouterr().err


# broken pipes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["schema"], ["schema", "--docs"], ["completion", "bash"], ["render", EXP3],
                                  ["render", EXP3, "-o", "json"], ["validate", EXP3]])
def test_closed_stdout_exits_141_without_traceback(argv):
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first write: every write fails with EPIPE
    try:
        p = subprocess.run([sys.executable, "-m", "launcher", *argv], stdout=w, stderr=subprocess.PIPE, text=True,
                           env=ENV, timeout=60)
    finally:
        os.close(w)
    assert p.returncode == EXIT_BROKEN_PIPE, p.stderr
    assert p.stderr == ""


@pytest.mark.parametrize("verb", ["schema", "schema --docs", f"render {EXP3} -o json", "completion zsh"])
def test_piped_to_head_has_no_traceback(verb):
    # `head -n 0` exits at once, before Python has written anything: a real pipe whose reader is gone
    p = subprocess.run(["bash", "-c", f"set -o pipefail; {sys.executable} -m launcher {verb} | head -n 0"],
                       capture_output=True, text=True, env=ENV, timeout=60)
    assert p.returncode == EXIT_BROKEN_PIPE, p.stderr
    assert p.stderr == "" and p.stdout == ""
