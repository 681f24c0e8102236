"""Edit to running pod: a change under src/launcher/ until a pod of the rebuilt CPU image runs on the real node.

    python bench/bench_image_edit.py [--runs N]

Each run appends a comment line to src/launcher/__init__.py (restored afterwards, and the image rebuilt to match),
then times, in order:
  image   `make -s image-cpu`: buildah reruns the launcher's steps, skopeo writes only their layers to the layout;
  import  `hack/cluster/up.sh` (GRPO_REAL_NODE=1): each real node imports the new image, streaming only the layers
          whose snapshot it lacks;
  pod     a pod of that image on grpo-node-0 (`sleep`), created until Running.
Baseline, measured in the same run: what a re-import streamed before the layout (the whole image, 7.6 GB):
`layout.py files` without the node's snapshots, read as one tar stream into /dev/null. That is a lower bound of
the old re-import (containerd also wrote and unpacked it: a cold import measures ~170 s here).
Needs the local cluster with its real nodes up (`GRPO_REAL_NODE=1 make cluster-up`) and the image built.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("GRPO_CACHE", Path.home() / ".cache" / "grpo-launcher"))
KUBECONFIG = Path(os.environ.get("GRPO_CLUSTER_DIR", CACHE / "cluster")) / "kubeconfig"
KUBECTL = CACHE / "bin" / "tools" / "kubectl"
LAYOUT = CACHE / "images" / "verl-grpo-cpu.oci"
IMAGE = "ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu"
EDITED = ROOT / "src" / "launcher" / "__init__.py"


def timed(cmd: list[str], **kw) -> float:
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT, **kw)
    return time.monotonic() - t0


def kubectl(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(KUBECTL), "--kubeconfig", str(KUBECONFIG), *args], check=True,
                          capture_output=True, text=True, **kw)


def pod_running(name: str) -> float:
    spec = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "grpo-node-0", "restartPolicy": "Never",
                     "tolerations": [{"key": "grpo.launcher.io/real-node", "operator": "Exists"}],
                     "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "Never",
                                     "command": ["sleep", "60"]}]}}
    t0 = time.monotonic()
    kubectl("apply", "-f", "-", input=json.dumps(spec))
    kubectl("wait", "--for=jsonpath={.status.phase}=Running", f"pod/{name}", "--timeout=300s")
    took = time.monotonic() - t0
    kubectl("delete", "pod", name, "--wait=false")
    return took


def full_stream() -> tuple[float, float]:
    """The baseline: every blob of the image, as an import that ignored the node's snapshots streamed it."""
    files = subprocess.run([sys.executable, str(ROOT / "hack/image/layout.py"), "files", str(LAYOUT)],
                           check=True, capture_output=True, text=True).stdout.split()
    size = sum((LAYOUT / f).stat().st_size for f in files) / 1e6
    t0 = time.monotonic()
    subprocess.run(f"tar -C {LAYOUT} -cf - {' '.join(files)} | cat >/dev/null", shell=True, check=True)
    return time.monotonic() - t0, size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"GRPO_REAL_NODE": "1"}
    original = EDITED.read_text()
    rows = []
    try:
        for i in range(args.runs):
            EDITED.write_text(original + f"# bench_image_edit {time.time_ns()}\n")
            image = timed(["make", "-s", "image-cpu"])
            imp = timed([str(ROOT / "hack/cluster/up.sh")], env=env)
            pod = pod_running(f"bench-image-edit-{i}-{os.getpid()}")
            rows.append({"image_s": image, "import_s": imp, "pod_s": pod, "total_s": image + imp + pod})
            print(json.dumps({k: round(v, 1) for k, v in rows[-1].items()}), flush=True)
    finally:
        EDITED.write_text(original)
        subprocess.run(["make", "-s", "image-cpu"], cwd=ROOT, capture_output=True)
        subprocess.run([str(ROOT / "hack/cluster/up.sh")], env=env, capture_output=True)
    stream_s, mb = full_stream()
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"edit -> running pod: median {med['total_s']:.1f} s (image {med['image_s']:.1f} s, import "
          f"{med['import_s']:.1f} s, pod {med['pod_s']:.1f} s) over {len(rows)} run(s)")
    print(f"baseline: reading the whole image's stream ({mb:.0f} MB) alone takes {stream_s:.1f} s; "
          f"import / that = {med['import_s'] / stream_s:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
