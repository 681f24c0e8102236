"""The in-pod program: `python -m launcher.entrypoint --config /etc/grpo/spec.yaml [...]`.

Modules:
- `__main__`: arguments, role detection, data preparation (`gsm8k.prepare_gsm8k`), `--dry-run`;
- `environment`: the variables verl/Ray need in a pod (`env_for`), container probes, redaction;
- `runner`: child processes (own process group, live output, SIGTERM/SIGINT forwarding, grace
  period then SIGKILL, 128+N exit statuses);
- `ray_cluster`: the multi-node PyTorchJob bootstrap (Ray head on rank 0, workers on the others,
  exit status handed to the workers through the GCS key-value store);
- `resume`: the resume decision on every start (fresh, resume from the newest complete checkpoint of
  this run, or already finished), the attempt record and the finished marker on the run's volume;
- `gsm8k`: GSM8K in verl's parquet schema;
- `smoke`, `smoke_checks`, `smoke_dist`: the smoke workload (`workload: smoke`), run in verl's place
  in the same pods and roles; `nccl_check`: the NCCL (or gloo) all-reduce over every GPU, also a CLI.

Roles: `single-node` (verl starts Ray itself), `ray-head` / `ray-worker` (PyTorchJob with
resources.nodes > 1), `ray-job-driver` (RayJob: attach through RAY_ADDRESS, never start Ray).
"""
