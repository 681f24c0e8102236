"""The environment of a TrainJob's node pod, as the API server and Kubeflow Trainer v2.2 give it.

From the rendered TrainingRuntime's container `node` (fieldRefs resolved as the kubelet resolves them for a
pod `<job>-node-0-<rank>-<suffix>`), plus what Trainer's torch plugin upserts
(`pkg/runtime/framework/plugins/torch/torch.go` EnforceMLPolicy): PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK
(a fieldRef to the Indexed Job's completion index), PET_MASTER_ADDR=<job>-node-0-0.<job>, PET_MASTER_PORT=29500.
Secret references are left out (no Secret here).
"""

from __future__ import annotations

import re

from launcher.render.manifests import render

TORCH_MASTER_PORT = "29500"  # constants.ContainerTrainerPort


def node_container(objects: list[dict]) -> dict:
    runtime = next(o for o in objects if o["kind"] == "TrainingRuntime")
    rjob = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    return next(c for c in rjob["template"]["spec"]["template"]["spec"]["containers"] if c["name"] == "node")


def trainjob_pod_env(spec, rank: int, *, base: dict | None = None) -> dict[str, str]:
    objects = render(spec)
    job = objects[-1]
    name = job["metadata"]["name"]
    pod = f"{name}-node-0-{rank}-x7k2p"
    fields = {"metadata.name": pod, "metadata.namespace": job["metadata"]["namespace"],
              "status.podIP": f"10.0.0.{10 + rank}",
              "metadata.annotations['batch.kubernetes.io/job-completion-index']": str(rank)}
    env: dict[str, str] = dict(base or {})
    items = list(node_container(objects)["env"])
    items += [
        {"name": "PET_NNODES", "value": str(job["spec"]["trainer"]["numNodes"])},
        {"name": "PET_NPROC_PER_NODE", "value": str(job["spec"]["trainer"]["numProcPerNode"])},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
        {"name": "PET_MASTER_ADDR", "value": f"{name}-node-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": TORCH_MASTER_PORT},
    ]
    for item in items:
        if "value" in item:
            # $(VAR) references to variables defined earlier, as the kubelet expands them
            env[item["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), item["value"])
        elif "fieldRef" in item.get("valueFrom", {}):
            env[item["name"]] = fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return env
