"""docker/requirements-tracking.lock: the MLflow client the pods need, complete together with requirements.lock."""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docker"))
from check_lock import read_hashes, read_pins  # noqa: E402


def test_tracking_lock_pins_mlflow_skinny_with_hashes_and_nothing_twice():
    tracking = read_pins(ROOT / "docker/requirements-tracking.lock")
    main = read_pins(ROOT / "docker/requirements.lock")
    assert tracking["mlflow-skinny"] == "3.17.2"
    assert main["tensorboard"] == "2.21.0"  # tracking.tensorboard: torch's SummaryWriter needs it (through verl)
    assert not set(tracking) & set(main)
    hashes = read_hashes(ROOT / "docker/requirements-tracking.lock")
    assert all(hashes[name] for name in tracking)
    assert re.search(r"^mlflow-skinny==3\.17\.2$", (ROOT / "docker/requirements-tracking.in").read_text(), re.M)


def test_every_dependency_of_the_tracking_pins_is_pinned():
    """With --no-deps, a dependency missing from both locks would be missing in the image."""
    pins = {**read_pins(ROOT / "docker/requirements.lock"), **read_pins(ROOT / "docker/requirements-tracking.lock")}
    env = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
    checked = 0
    for name in read_pins(ROOT / "docker/requirements-tracking.lock"):
        dist = importlib.metadata.distribution(name)  # the test environment has the same versions
        assert dist.version == pins[name], f"{name}: test env {dist.version}, lock {pins[name]}"
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            dep = canonicalize_name(req.name)
            assert dep in pins, f"{name} needs {text}: pinned in neither lock"
            checked += 1
    assert checked > 20
