"""Write what the scanners should see into a directory.

checkov's Kubernetes checks cover built-in workload kinds only, so a PyTorchJob's or RayJob's pod
templates would go unchecked. Besides every rendered object (exp3/exp4, both backends, GitOps and
plain), this writes each job's pod templates as standalone `Pod` objects: the pods the operators
will create from them, so the pod-security checks run on what actually runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from launcher.config import load_spec
from launcher.render import render, to_yaml

ROOT = Path(__file__).resolve().parents[2]


def pod_templates(job: dict) -> list[tuple[str, dict]]:
    """(replica or group name, pod template) of a PyTorchJob or RayJob."""
    if job["kind"] == "PyTorchJob":
        return [(k.lower(), v["template"]) for k, v in job["spec"]["pytorchReplicaSpecs"].items()]
    if job["kind"] == "RayJob":
        rc = job["spec"]["rayClusterSpec"]
        return [("head", rc["headGroupSpec"]["template"])] + [(g["groupName"], g["template"])
                                                              for g in rc["workerGroupSpecs"]]
    return []


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    for exp in ("grpo-exp3", "grpo-exp4"):
        for backend in ("pytorchjob", "rayjob"):
            spec = load_spec(ROOT / "configs" / f"{exp}.yaml", ["resources.nodes=2"] if backend == "rayjob" else [],
                             backend)
            objects = render(spec)
            (out / f"{exp}-{backend}.yaml").write_text(to_yaml(objects))
            for obj in objects:
                for role, template in pod_templates(obj):
                    pod = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {**template["metadata"], "name": f"{obj['metadata']['name']}-{role}",
                                        "namespace": obj["metadata"]["namespace"]},
                           "spec": template["spec"]}
                    (out / f"pod-{exp}-{backend}-{role}.yaml").write_text(yaml.safe_dump(pod, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
