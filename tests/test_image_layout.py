"""hack/image/layout.py: the CPU image's OCI layout directory (ref, prune, and which blobs an import needs)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "layout", Path(__file__).resolve().parents[1] / "hack" / "image" / "layout.py")
layout = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(layout)

REF = "ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu"


def _put(root: Path, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = root / "blobs" / "sha256" / digest.split(":")[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


def _image(root: Path, layers: list[bytes]) -> tuple[str, list[str]]:
    """Write an image (uncompressed layers: digest == diff ID) and point index.json at it; (manifest, layers)."""
    digests = [_put(root, data) for data in layers]
    config = _put(root, json.dumps({"rootfs": {"type": "layers", "diff_ids": digests}}).encode())
    manifest = _put(root, json.dumps({
        "schemaVersion": 2, "config": {"digest": config, "size": 1},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d, "size": 1} for d in digests],
    }).encode())
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest, "size": 1,
        "annotations": {"org.opencontainers.image.ref.name": REF}}]}))
    return manifest, digests


def test_chain_ids_follow_the_oci_definition():
    a, b, c = (f"sha256:{x * 64}" for x in "abc")
    ab = "sha256:" + hashlib.sha256(f"{a} {b}".encode()).hexdigest()
    assert layout.chain_ids([a, b, c]) == [a, ab, "sha256:" + hashlib.sha256(f"{ab} {c}".encode()).hexdigest()]


def test_ref_names_the_image(tmp_path, capsys):
    manifest, _ = _image(tmp_path, [b"base", b"venv"])
    assert layout.main(["ref", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == [manifest, REF]


def test_prune_keeps_only_the_current_image(tmp_path):
    _image(tmp_path, [b"base", b"venv", b"launcher v1"])
    manifest, layers = _image(tmp_path, [b"base", b"venv", b"launcher v2"])  # a rebuild after a src/ change
    assert len(list((tmp_path / "blobs/sha256").iterdir())) == 8
    layout.main(["prune", str(tmp_path)])
    left = {f"sha256:{p.name}" for p in (tmp_path / "blobs/sha256").iterdir()}
    doc = json.loads((tmp_path / "blobs/sha256" / manifest.split(":")[1]).read_text())
    assert left == {manifest, doc["config"]["digest"], *layers}


def test_an_import_sends_only_the_layers_the_node_has_not_unpacked(tmp_path):
    manifest, layers = _image(tmp_path, [b"base", b"venv", b"launcher v2"])
    config = json.loads((tmp_path / "blobs/sha256" / manifest.split(":")[1]).read_text())["config"]["digest"]
    chains = layout.chain_ids(layers)
    rel = [f"blobs/sha256/{d.split(':')[1]}" for d in layers]
    meta = {"oci-layout", "index.json", f"blobs/sha256/{manifest.split(':')[1]}", f"blobs/sha256/{config.split(':')[1]}"}
    # a new node: everything
    assert set(layout.import_files(tmp_path, set())) == meta | set(rel)
    # a node that unpacked base + venv (a previous build): only the launcher's layer travels
    assert set(layout.import_files(tmp_path, {chains[0], chains[1], "sha256:" + "f" * 64})) == meta | {rel[2]}
    # snapshots are matched by chain ID, not by a layer's own digest: the same venv on another base is not "had"
    assert set(layout.import_files(tmp_path, {layers[1], layers[2]})) == meta | set(rel)


def test_prune_drops_the_image_skopeo_left_unnamed(tmp_path):
    """skopeo's `copy ... oci:DIR:REF` over an existing REF keeps the old entry in index.json without its name: an
    import would take that first (stale) image and its 7 GB of blobs would stay."""
    old, _ = _image(tmp_path, [b"base", b"venv", b"model 0600"])
    old_entry = json.loads((tmp_path / "index.json").read_text())["manifests"][0]
    del old_entry["annotations"]
    manifest, layers = _image(tmp_path, [b"base", b"venv", b"model 0644"])
    index = json.loads((tmp_path / "index.json").read_text())
    index["manifests"].insert(0, old_entry)
    (tmp_path / "index.json").write_text(json.dumps(index))
    layout.main(["prune", str(tmp_path)])
    assert [d["digest"] for d in json.loads((tmp_path / "index.json").read_text())["manifests"]] == [manifest]
    assert not (tmp_path / "blobs/sha256" / old.split(":")[1]).exists()
    assert layout.manifests(tmp_path)[0]["digest"] == manifest


def test_top_is_the_snapshot_an_unpacked_image_has(tmp_path, capsys):
    """import.sh and node.sh call an image unpacked when this snapshot exists: the CRI's own test. Once a node had the
    name at the new manifest without it (s7, 2026-12-06), and every pod failed to extract a discarded layer."""
    _, layers = _image(tmp_path, [b"base", b"venv", b"launcher v2"])
    assert layout.main(["top", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == layout.chain_ids(layers)[-1] != layers[-1]
