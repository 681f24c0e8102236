"""Write what the scanners should see into a directory: usage `scan_views.py OUT_DIR HELM_BIN`.

checkov's Kubernetes checks cover built-in workload kinds only, so a PyTorchJob's or RayJob's pod
templates would go unchecked. Besides every rendered object (exp3/exp4, every backend, the
chart's output and manifests/), this writes each job's pod templates as standalone `Pod` objects:
the pods the operators will create from them, so the pod-security checks run on what actually runs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from launcher.spec.load import load_spec
from launcher.render.manifests import render, to_yaml
from launcher.spec.names import BACKENDS

ROOT = Path(__file__).resolve().parents[2]


def pod_templates(job: dict) -> list[tuple[str, dict]]:
    """(replica, group or replicated-job name, pod template) of a PyTorchJob, RayJob or TrainingRuntime."""
    if job["kind"] == "TrainingRuntime":  # a TrainJob's pods are its runtime's (JobSet replicated jobs)
        return [(r["name"], r["template"]["spec"]["template"]) for r in job["spec"]["template"]["spec"]["replicatedJobs"]]
    if job["kind"] == "PyTorchJob":
        return [(k.lower(), v["template"]) for k, v in job["spec"]["pytorchReplicaSpecs"].items()]
    if job["kind"] == "RayJob":
        rc = job["spec"]["rayClusterSpec"]
        return [("head", rc["headGroupSpec"]["template"])] + [(g["groupName"], g["template"])
                                                              for g in rc["workerGroupSpecs"]]
    return []


def _flatten(docs: list[dict]) -> list[dict]:
    """v1 Lists (the chart's trainjob objects) replaced by their items, as Helm and kubectl send them."""
    return [item for d in docs for item in ((d.get("items") or []) if d.get("kind") == "List" else [d])]


def _write(out: Path, label: str, objects: list[dict]) -> None:
    (out / f"{label}.yaml").write_text(to_yaml(objects))
    for obj in objects:
        for role, template in pod_templates(obj):
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {**template["metadata"], "name": f"{obj['metadata']['name']}-{role}",
                                "namespace": obj["metadata"]["namespace"]},
                   "spec": template["spec"]}
            (out / f"pod-{label}-{role}.yaml").write_text(yaml.safe_dump(pod, sort_keys=False))


def main(out: Path, helm: str) -> int:
    out.mkdir(parents=True, exist_ok=True)
    for exp in ("grpo-exp3", "grpo-exp4"):
        for backend in BACKENDS:
            sets = ["resources.nodes=2"] if backend == "rayjob" else []
            _write(out, f"{exp}-{backend}", render(load_spec(ROOT / "configs" / f"{exp}.yaml", sets, backend)))
    # What GitOps users commit: manifests/<experiment>/.
    for exp_dir in sorted((ROOT / "manifests").glob("grpo-exp*")):
        objects = [o for f in sorted(exp_dir.glob("[0-9][0-9]-*.yaml")) for o in yaml.safe_load_all(f.read_text()) if o]
        _write(out, f"manifests-{exp_dir.name}", objects)
    # The chart is a second renderer: scan what `helm template` produces, pods included.
    for backend in BACKENDS:
        text = subprocess.run([helm, "template", "grpo-exp3", str(ROOT / "charts" / "grpo-exp3"),
                               "--set", f"backend={backend}"], capture_output=True, text=True, check=True).stdout
        _write(out, f"chart-{backend}", _flatten([o for o in yaml.safe_load_all(text) if o]))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2]))
