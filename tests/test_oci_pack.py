"""hack/cluster/oci_pack.py: the single-binary image archives of the real node (pause, toolbox)."""

from __future__ import annotations

import importlib.util
import io
import json
import tarfile
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "oci_pack", Path(__file__).resolve().parents[1] / "hack" / "cluster" / "oci_pack.py")
oci_pack = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(oci_pack)


def _members(layer: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(layer)) as t:
        return {m.name: m for m in t.getmembers()}


def test_binary_at_the_image_root() -> None:
    # the pause image: /pause has no parent directory (CI failed on this shape once)
    members = _members(oci_pack.layer_tar(b"\x7fELF", "/pause"))
    assert list(members) == ["pause"]
    assert members["pause"].mode == 0o755 and members["pause"].mtime == 0


@pytest.mark.parametrize("path,parent", [("/bin/busybox", "bin"), ("/busybox", "")])
def test_links_sit_beside_the_binary(path: str, parent: str) -> None:
    members = _members(oci_pack.layer_tar(b"x", path, links=("sh", "busybox", "nslookup")))
    prefix = f"{parent}/" if parent else ""
    assert set(members) == {f"{prefix}busybox", f"{prefix}sh", f"{prefix}nslookup"}
    assert members[f"{prefix}sh"].issym() and members[f"{prefix}sh"].linkname == "busybox"


def test_archive_is_deterministic_and_names_the_ref(tmp_path: Path) -> None:
    a, b = tmp_path / "a.tar", tmp_path / "b.tar"
    d1 = oci_pack.pack(b"bin", path="/pause", entrypoint=["/pause"], user="65535:65535", ref="r/pause:1", out=str(a))
    d2 = oci_pack.pack(b"bin", path="/pause", entrypoint=["/pause"], user="65535:65535", ref="r/pause:1", out=str(b))
    assert d1 == d2 and a.read_bytes() == b.read_bytes()
    with tarfile.open(a) as t:
        index = json.load(t.extractfile("index.json"))
    assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == "r/pause:1"
    assert index["manifests"][0]["digest"] == d1
