"""hack/image/import.sh against a real containerd 1.6 (the real node's, from hack/cluster/install-node-deps.sh), on a
scratch root and socket of its own: no control plane, no kubelet, and small images built here instead of the CPU
image, so each re-import takes a fraction of a second.

The failure it guards against (CI, 2026-12-06): a re-import after a launcher change sends only the layers the node
has not unpacked, and between the moment the name moves to the new manifest and the end of its unpack, nothing held
the previous image's snapshots. A garbage collection in that window took the base layers, whose blobs an earlier
import had discarded, and every later pod failed with "failed to extract layer ... content digest not found".
Here a collection runs in a loop beside the imports, as containerd runs one after any deletion on a busy node.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster  # the node's containerd and ctr, installed with the cluster (not its control plane)

ROOT = Path(__file__).resolve().parents[2]
IMPORT_SH = ROOT / "hack" / "image" / "import.sh"
REF = "ghcr.io/grpo-launcher/verl-grpo:0.0.0-import-test"


def _blob(root: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / "sha256" / digest).write_bytes(data)
    return f"sha256:{digest}", len(data)


def _layer(name: str, seed: str, size: int) -> bytes:
    """An uncompressed tar layer holding one file of `size` bytes (deterministic, so a rebuild is the same layer)."""
    data = (hashlib.sha256(seed.encode()).digest() * (size // 32 + 1))[:size]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mtime = len(data), 0
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def write_layout(root: Path, ref: str, layers: list[bytes]) -> str:
    """An OCI image layout like hack/image/build.sh writes (one image named `ref`); returns its manifest digest."""
    shutil.rmtree(root, ignore_errors=True)
    descs = []
    for data in layers:
        digest, size = _blob(root, data)
        descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest, "size": size})
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/x"]},
                         "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in descs]}}).encode()
    config_digest, config_size = _blob(root, config)
    manifest, size = _blob(root, json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "layers": descs,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": config_size}}).encode())
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest, "size": size,
        "annotations": {"org.opencontainers.image.ref.name": ref}}]}))
    return manifest


@pytest.fixture
def containerd():
    """A containerd of our own (CRI off): yields a function running `ctr -n k8s.io ARGS...` against it."""
    for tool in ("containerd", "ctr"):
        assert shutil.which(tool), f"{tool} missing: hack/cluster/install-node-deps.sh installs it"
    # short: a unix socket path has a 108-byte limit, and pytest's tmp_path can be long
    base = Path(tempfile.mkdtemp(prefix="ctd-", dir="/tmp"))
    sock = base / "c.sock"
    (base / "config.toml").write_text(f"""version = 2
root = "{base}/root"
state = "{base}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"
""")
    log = open(base / "containerd.log", "w")
    proc = subprocess.Popen(["containerd", "--config", str(base / "config.toml")], stdout=log, stderr=log)

    def ctr(*args: str, check: bool = True, stdin: bytes | None = None) -> str:
        done = subprocess.run(["ctr", "--address", str(sock), "-n", "k8s.io", *args], input=stdin,
                              capture_output=True, timeout=120)
        assert not check or done.returncode == 0, f"ctr {' '.join(args)}: {done.stderr.decode()}"
        return done.stdout.decode()

    try:
        while subprocess.run(["ctr", "--address", str(sock), "version"], capture_output=True).returncode != 0:
            if proc.poll() is not None:
                pytest.fail(f"containerd exited: {(base / 'containerd.log').read_text()[-2000:]}")
            time.sleep(0.1)
        ctr.sock = sock
        yield ctr
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
        subprocess.run(["umount", "-R", str(base / "root")], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _import(ctr, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GRPO_CACHE": str(cache), "GRPO_CPU_IMAGE": REF}
    return subprocess.run([str(IMPORT_SH), str(ctr.sock)], capture_output=True, text=True, env=env, timeout=300)


def test_a_reimport_keeps_the_base_layers_while_the_garbage_collector_runs(containerd, tmp_path):
    """Two builds that differ in their top layer, imported in turn while a collection loops beside them: each import
    after the first sends the top layer alone, unpacks onto the snapshots the node had, and leaves one name and no
    layer blobs behind. Before import.sh held the previous image, about a quarter of such imports failed."""
    ctr = containerd
    layout = tmp_path / "cache" / "images" / "verl-grpo-cpu.oci"
    base = [_layer("base", "base", 1 << 20), _layer("venv", "venv", 1 << 18)]
    # a second image, sharing nothing, for the collector loop to create and delete (a deletion triggers the GC)
    write_layout(tmp_path / "other", "example.com/other:1", [_layer("o", "other", 4096)])
    other = subprocess.run(["tar", "-C", str(tmp_path / "other"), "-cf", "-", "oci-layout", "index.json", "blobs"],
                           capture_output=True, check=True).stdout
    ctr("images", "import", "-", stdin=other)

    stop = threading.Event()

    def collect() -> None:
        while not stop.is_set():
            ctr("images", "tag", "--force", "example.com/other:1", "example.com/gc:1", check=False)
            ctr("images", "rm", "--sync", "example.com/gc:1", check=False)

    collector = threading.Thread(target=collect, daemon=True)
    collector.start()
    manifests = []
    try:
        for i in range(16):
            manifests.append(write_layout(layout, REF, [*base, _layer("launcher", f"build {i % 2}", 4096)]))
            done = _import(ctr, tmp_path / "cache")
            assert done.returncode == 0, f"import {i} failed:\n{done.stdout}\n{done.stderr}"
            if i:
                # manifest, config and the launcher layer: the base layers stayed unpacked the whole time
                assert "3 blob(s)" in done.stderr and "importing every layer" not in done.stderr, done.stderr
    finally:
        stop.set()
        collector.join(timeout=60)
        ctr("images", "rm", "example.com/gc:1", check=False)

    names = ctr("images", "ls", "-q").split()
    assert sorted(names) == sorted([REF, "example.com/other:1"]), names  # the keep name went with the import
    assert ctr("images", "ls").count(manifests[-1]) == 1
    # ready for the CRI: the top snapshot exists, and the layer blobs are gone again (one copy of each layer: the
    # snapshot)
    top = subprocess.run(["python3", str(ROOT / "hack/image/layout.py"), "top", str(layout)], capture_output=True,
                         text=True, check=True).stdout.strip()
    ctr("snapshots", "info", top)
    blobs = {line.split()[0] for line in ctr("content", "ls").splitlines()[1:]}
    assert not blobs & {f"sha256:{hashlib.sha256(layer).hexdigest()}" for layer in base}
