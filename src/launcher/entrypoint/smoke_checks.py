"""The smoke workload's checks of one pod, each a `Check` printed as one line.

    [smoke] check <name> ok|FAIL <detail>

Names carry no spaces (`writable:tmp`, `shm_size`, `uid@<host>` for a check run on another pod).
Pod checks (`pod_checks`): `user`, `root_readonly`, `writable:{tmp,home,shm,storage}`, `shm_size`,
`dataset`; the verl check (`verl_config`) composes verl's own Hydra config from the launcher's
override list and runs verl's `validate_config` as `python -m verl.trainer.main_ppo` would.
Every filesystem and identity access is a parameter, so tests use temporary directories and fakes.
"""

from __future__ import annotations

import errno
import os
import pwd
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from launcher.spec import quantity as Q
from launcher.spec.model import ExperimentSpec

PREFIX = "[smoke]"




@dataclass(frozen=True)
class Check:
    """One verdict: a name without spaces, pass/fail, and what was seen."""

    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{PREFIX} check {self.name} {'ok' if self.ok else 'FAIL'} {self.detail}"

    def on(self, host: str) -> "Check":
        """The same check, named for the pod it ran on (`<name>@<host>`)."""
        return Check(f"{self.name}@{host}", self.ok, self.detail)


def quantity_bytes(text: str) -> int:
    """A Kubernetes quantity ("64Mi", "1G", "500m") in bytes, rounded down."""
    return int(Q.parse(text))


def mib(n: int) -> str:
    return f"{n / 2**20:.1f}MiB"


# --------------------------------------------------------------------------------------------------
# One pod


def check_user(spec: ExperimentSpec, *, uid: int | None = None, gid: int | None = None,
               username: Callable[[int], str] | None = None) -> Check:
    """The container runs as security.run_as_user / run_as_group (and the image names that user)."""
    uid = os.getuid() if uid is None else uid
    gid = os.getgid() if gid is None else gid
    try:
        name = (username or (lambda u: pwd.getpwuid(u).pw_name))(uid)
    except KeyError:
        name = "<no passwd entry>"
    want = (spec.security.run_as_user, spec.security.run_as_group)
    return Check("user", (uid, gid) == want, f"uid={uid} gid={gid} user={name} (expected {want[0]}:{want[1]})")


def _create_errno(directory: str, opener: Callable[..., int], remove: Callable[[str], None]) -> int | None:
    """errno of creating a new file in `directory`, None if it was created (and removed again)."""
    path = os.path.join(directory, f".smoke-{uuid.uuid4().hex[:8]}")
    try:
        fd = opener(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError as exc:
        return exc.errno
    os.close(fd)
    remove(path)
    return None


def check_root_readonly(spec: ExperimentSpec, dirs: Sequence[str] = ("/", "/opt"),
                        opener: Callable[..., int] = os.open, remove: Callable[[str], None] = os.unlink) -> Check:
    """With security.read_only_root_filesystem, creating a file in / and /opt fails with EROFS.

    EACCES is not enough: a non-root user cannot write / on a writable root either.
    """
    if not spec.security.read_only_root_filesystem:
        return Check("root_readonly", True, "not required (security.read_only_root_filesystem is false)")
    seen = {d: _create_errno(d, opener, remove) for d in dirs}
    ok = all(e == errno.EROFS for e in seen.values())
    shown = ", ".join(f"{d} {'created' if e is None else errno.errorcode.get(e, e)}" for d, e in seen.items())
    return Check("root_readonly", ok, shown + ("" if ok else " (expected EROFS everywhere)"))


def check_writable(label: str, directory: str | None) -> Check:
    """A file can be created, written, fsync'ed, read back and removed in `directory`."""
    name = f"writable:{label}"
    if not directory:
        return Check(name, False, "no such directory configured")
    path = Path(directory) / f".smoke-{uuid.uuid4().hex[:8]}"
    try:
        with open(path, "wb") as f:
            f.write(b"smoke\n")
            f.flush()
            os.fsync(f.fileno())
        ok = path.read_bytes() == b"smoke\n"
        path.unlink()
    except OSError as exc:
        return Check(name, False, f"{directory}: {errno.errorcode.get(exc.errno, exc.errno)} {exc.strerror}")
    return Check(name, ok, directory)


def check_shm(spec: ExperimentSpec, path: str = "/dev/shm") -> Check:
    """/dev/shm (statvfs) is at least smoke.min_shm; the detail reports its size."""
    want = quantity_bytes(spec.smoke.min_shm)
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return Check("shm_size", False, f"{path}: {exc.strerror}")
    size = st.f_frsize * st.f_blocks
    return Check("shm_size", size >= want,
                 f"{path} {mib(size)} (smoke.min_shm {spec.smoke.min_shm} = {mib(want)}; resources.shm_size "
                 f"{spec.resources.shm_size})")


def check_dataset(spec: ExperimentSpec) -> Check:
    """The init container's parquet files exist and pyarrow reads them (rows and columns)."""
    import pyarrow.parquet as pq

    parts, ok = [], True
    for label, path in (("train", spec.data.train_path), ("val", spec.data.val_path)):
        try:
            table = pq.read_table(path)
        except Exception as exc:  # missing file, not parquet: both mean the init container did not do its job
            ok = False
            parts.append(f"{label} {path}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            continue
        if label == "train" and (table.num_rows == 0 or "prompt" not in table.column_names):
            ok = False
        parts.append(f"{label} {path} {table.num_rows} rows")
    return Check("dataset", ok, ", ".join(parts))


def pod_checks(spec: ExperimentSpec, env: Mapping[str, str], *, shm_path: str = "/dev/shm",
               root_dirs: Sequence[str] = ("/", "/opt"), tmp: str = "/tmp") -> list[Check]:
    """Every check of this pod, in order: identity, filesystems, /dev/shm, dataset."""
    return [
        check_user(spec),
        check_root_readonly(spec, root_dirs),
        check_writable("tmp", tmp),
        check_writable("home", env.get("HOME")),
        check_writable("shm", shm_path),
        check_writable("storage", spec.storage.mount_path),
        check_shm(spec, shm_path),
        check_dataset(spec),
    ]


# --------------------------------------------------------------------------------------------------
# verl's config


def validation_overrides(spec: ExperimentSpec, overrides: Sequence[str]) -> tuple[list[str], str]:
    """The override list verl validates, and a note of what was substituted for a CPU-only pod.

    verl divides by `trainer.n_gpus_per_node`; a CPU pod counts as one worker, exactly as
    `spec.check_rules` counts it.
    """
    if not spec.resources.cpu_only:
        return list(overrides), ""
    out = [o if not o.startswith("trainer.n_gpus_per_node=") else "trainer.n_gpus_per_node=1" for o in overrides]
    return out, " (0 GPUs: validated with trainer.n_gpus_per_node=1, one worker per CPU pod)"


def verl_installed() -> bool:
    """verl itself is importable (a directory named verl on the path is a namespace package without an origin)."""
    import importlib.util

    found = importlib.util.find_spec("verl")
    return found is not None and found.origin is not None


def check_verl_config(spec: ExperimentSpec, overrides: Sequence[str]) -> Check:
    """Compose verl's `ppo_trainer` with Hydra from verl's installed config dir and run main_ppo's validation."""
    import importlib.util
    import warnings

    try:
        if not verl_installed():
            return Check("verl_config", False, "verl is not installed in this image")
        found = importlib.util.find_spec("verl")
        from hydra import compose, initialize_config_dir

        used, note = validation_overrides(spec, overrides)
        config_dir = str(Path(found.origin).parent / "trainer" / "config")
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            cfg = compose(config_name="ppo_trainer", overrides=used)
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
        from verl.utils.device import auto_set_device

        auto_set_device(cfg)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "Disabled critic ...": expected for GRPO
            use_ref, use_critic = need_reference_policy(cfg), need_critic(cfg)
        validate_config(config=cfg, use_reference_policy=use_ref, use_critic=use_critic)
    except Exception as exc:  # Hydra's composition errors and verl's ValueError/AssertionError alike
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return Check("verl_config", False, f"{type(exc).__name__}: {first}")
    import verl

    return Check("verl_config", True, f"{len(used)} overrides composed and validated by verl {verl.__version__} "
                                      f"(device {cfg.trainer.device}){note}")
