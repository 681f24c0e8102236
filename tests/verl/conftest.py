"""Tests against the real verl 0.9.1 package (`make verl-env`, then `make verl-test`).

Every test under tests/verl carries the `verl` marker (`pytestmark` below; the `unit` target deselects
it). Nothing here skips: when verl, torch or hydra is missing the session fails with the command that installs them, so
a CI run that forgot `make verl-env` is red, not green-with-skips.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

VERL_VERSION = "0.9.1"


# Applied to every test below by tests/conftest.py, which also leaves this directory out of collection
# when `-m` deselects `verl` (`make unit`): its modules import verl's dependencies at import time.
pytestmark = pytest.mark.verl


@pytest.fixture(scope="session", autouse=True)
def _hermetic_hf(tmp_path_factory):
    """No hub access and no writes to ~/.cache: datasets/transformers caches go to a temp dir, offline.

    Set before the first test here imports `datasets` (it reads these at import time).
    """
    cache = tmp_path_factory.mktemp("hf")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HOME", str(cache))
        mp.setenv("HF_DATASETS_CACHE", str(cache / "datasets"))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        yield


@pytest.fixture(scope="session", autouse=True)
def _verl_installed():
    """Fail (not skip) the whole directory when the verl test environment is missing or wrong."""
    missing = [m for m in ("verl", "torch", "hydra", "omegaconf", "tensordict", "transformers", "datasets")
               if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"missing {missing}: the verl tests need `make verl-env`", pytrace=False)
    version = importlib.metadata.version("verl")
    if version != VERL_VERSION:
        pytest.fail(f"verl {version} installed; these tests pin verl {VERL_VERSION} (`make verl-env`)", pytrace=False)
