"""tests/conftest.py's pytest-xdist scheduler, run for real: pytest -n 3 --dist loadfile on a tree of its own.

The real-node tests must run on two workers: every real verl run on one worker that takes nothing else (CI's
critical path), every `smallpods` test on another; the other modules whole, anywhere.
"""
from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CONFTEST = f"""
import importlib.util, sys
sys.path.insert(0, {str(HERE)!r})
spec = importlib.util.spec_from_file_location("suite_conftest", {str(HERE / "conftest.py")!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
pytest_xdist_make_scheduler = suite.pytest_xdist_make_scheduler  # the hook under test
"""

# Each test records the worker that ran it.
BODY = """
import json, os, pathlib
def record(name):
    with open(pathlib.Path(__file__).parent / "ran.jsonl", "a") as f:
        f.write(json.dumps({"test": name, "worker": os.environ["PYTEST_XDIST_WORKER"]}) + "\\n")
"""


def module(marks: str, tests: dict[str, str]) -> str:
    text = f"import pytest\n{BODY}\npytestmark = [{marks}]\n" if marks else f"import pytest\n{BODY}\n"
    for name, deco in tests.items():
        text += f"\n{deco}\ndef {name}():\n    record({name!r})\n"
    return text


def test_real_verl_runs_get_a_worker_of_their_own_and_small_pods_another(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_train.py").write_text(module("pytest.mark.realnode", {
        f"test_train_{i}": "" for i in range(3)}))
    (tmp_path / "test_mixed.py").write_text(module("pytest.mark.realnode", {
        "test_mixed_train": "", "test_mixed_small": "@pytest.mark.smallpods"}))
    (tmp_path / "test_pods.py").write_text(module("pytest.mark.realnode, pytest.mark.smallpods", {
        "test_pods_a": "", "test_pods_b": ""}))
    (tmp_path / "test_doctor.py").write_text(module("", {
        "test_doctor_kwok": "", "test_doctor_real": "@pytest.mark.realnode",
        "test_doctor_small": "@pytest.mark.realnode\n@pytest.mark.smallpods"}))
    # more KWOK modules than workers, first in the collection and larger than the real-node scopes (xdist hands out
    # the largest first): the training scope must still start first, on a worker of its own
    for i in range(6):
        (tmp_path / f"test_a_kwok_{i}.py").write_text(module("", {f"test_kwok_{i}_{j}": "" for j in range(8)}))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist", "loadfile",
                           "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestUnknownMarkWarning", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = [json.loads(line) for line in (tmp_path / "ran.jsonl").read_text().splitlines()]
    by_worker = collections.defaultdict(set)
    for r in ran:
        by_worker[r["worker"]].add(r["test"])
    assert len(ran) == 3 + 2 + 2 + 3 + 48, ran
    train = {"test_train_0", "test_train_1", "test_train_2", "test_mixed_train", "test_doctor_real"}
    small = {"test_mixed_small", "test_pods_a", "test_pods_b", "test_doctor_small"}
    (train_worker,) = {w for w, tests in by_worker.items() if tests & train}
    (small_worker,) = {w for w, tests in by_worker.items() if tests & small}
    assert by_worker[train_worker] == train, by_worker  # nothing else on the training worker
    assert small_worker != train_worker and small <= by_worker[small_worker], by_worker
    # the rest of each module stays whole on one worker
    for i in range(6):
        assert len({r["worker"] for r in ran if r["test"].startswith(f"test_kwok_{i}_")}) == 1, ran


def test_small_pods_wait_for_a_whole_nodes_test_that_runs_or_waits(tmp_path, monkeypatch):
    """The lock of tests/e2e/realnode_share.py, between threads (each opens the lock file itself, so flock sets
    them apart as it does two workers): a waiting `whole_nodes` goes before any `small_pods` that comes after it."""
    import threading

    sys.path.insert(0, str(HERE / "e2e"))
    import realnode_share

    monkeypatch.setenv("GRPO_CLUSTER_DIR", str(tmp_path))
    monkeypatch.setattr(realnode_share, "POLL_S", 0.01)
    order: list[str] = []
    small_in, release_small, release_whole = threading.Event(), threading.Event(), threading.Event()

    def small(name: str, hold: threading.Event | None = None) -> None:
        with realnode_share.small_pods():
            order.append(f"{name} in")
            if hold is not None:
                small_in.set()
                hold.wait(60)
            order.append(f"{name} out")

    def whole() -> None:
        with realnode_share.whole_nodes():
            order.append("whole in")
            release_whole.wait(60)
            order.append("whole out")

    first = threading.Thread(target=small, args=("small1", release_small))
    first.start()
    assert small_in.wait(60)
    w = threading.Thread(target=whole)
    w.start()
    realnode_share_dir = tmp_path / "realnode-share"
    for _ in range(6000):  # the waiting whole_nodes test has left its file
        if list(realnode_share_dir.glob("want-*")):
            break
        threading.Event().wait(0.01)
    second = threading.Thread(target=small, args=("small2",))
    second.start()
    threading.Event().wait(0.2)
    assert order == ["small1 in"], order  # neither the whole_nodes test nor the later small_pods one got in
    release_small.set()
    for _ in range(6000):
        if "whole in" in order:
            break
        threading.Event().wait(0.01)
    threading.Event().wait(0.2)
    assert order == ["small1 in", "small1 out", "whole in"], order  # small2 waits for the whole_nodes test
    release_whole.set()
    for t in (first, w, second):
        t.join(60)
    assert order == ["small1 in", "small1 out", "whole in", "whole out", "small2 in", "small2 out"], order
    assert not list(realnode_share_dir.glob("want-*"))
