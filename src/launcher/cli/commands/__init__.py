"""One module per CLI verb.

Each module exposes `HELP` (one line), `add_arguments(parser)` and `run(args) -> int`. `cli` imports
only the module of the verb that runs; `launcher --help` lists every verb from `HELP_LINES` without
importing any (tests/cli/test_cli.py keeps the table equal to the modules' `HELP`).
"""

# verb -> module name under launcher.cli.commands, in the order `--help` lists them
VERBS: dict[str, str] = {
    "validate": "validate",
    "render": "render",
    "doctor": "doctor",
    "submit": "submit",
    "sweep": "sweep",
    "status": "status",
    "gitops-status": "gitops_status",
    "list": "list_runs",
    "wait": "wait",
    "logs": "logs",
    "watch": "watch",
    "delete": "delete",
    "metrics": "metrics",
    "report": "report",
    "compare": "compare",
    "relaunch": "relaunch",
    "diff": "diff",
    "export": "export",
    "eval": "eval",
    "data": "data",
    "rbac": "rbac",
    "schema": "schema",
    "completion": "completion",
}

# verb -> its one-line help, as the module's HELP says: `launcher --help` reads it here so that listing
# the verbs imports none of them (a verb missing here is imported for its HELP instead)
HELP_LINES: dict[str, str] = {
    "validate": "check an experiment config (schema, verl batch rules, Kubernetes names)",
    "render": ("render the Kubernetes manifests of a run (YAML to stdout, -o json|yaml, or one "
                "file per object with -d DIR)"),
    "doctor": ("check that the cluster can run CONFIG (API, operators, Kueue, GPU nodes, RBAC; --smoke: a real job; "
               "--rehearse: two real verl steps of the experiment)"),
    "submit": "submit an experiment (same config twice attaches to the existing run)",
    "sweep": "run a grid of variants of an experiment (--grid KEY=V1,V2): submit, follow together, rank in one report",
    "status": "show a run's state, its pods and why they are stuck (NAME: job or experiment)",
    "gitops-status": ("show which Flux Kustomization, git source and revision created each run "
                      "(derived from Flux's history; NAME: job or experiment)"),
    "list": "list the launcher's runs in a namespace, or in all of them with -A (state, age, experiment)",
    "wait": "wait for a run to finish: exit 0 on success, 1 on failure (last log lines and the reason), 124 on timeout",
    "logs": "show or follow a run's pod logs (saved under runs/<job>/logs, metrics into runs/<job>/metrics.jsonl)",
    "watch": ("watch a run for stalls (each captured as an incident), reward/entropy collapse, clip-ratio jumps and "
              "non-finite loss (--on-stall delete|restart)"),
    "delete": "delete a run (job + its ConfigMap/PVC and a TrainJob's TrainingRuntime, found by label) and wait until its pods are gone",
    "metrics": "parse a saved verl log (or stdin) into metrics.jsonl, metrics.csv and metrics.meta.json",
    "report": "write report.md, report.json and plots for a run from its metrics.jsonl",
    "compare": "compare runs: headline figures, config differences and overlaid plots",
    "relaunch": "submit a recorded run again: same spec (same job name), image pinned to the digest its pods ran",
    "diff": "show what differs between two runs: spec keys (with the verl keys they set), image digests, verl config",
    "export": "write a run's metrics, config and summary figures to MLflow and/or TensorBoard (idempotent)",
    "eval": "evaluate the base model and/or a trained checkpoint on GSM8K's test split (validation-only verl)",
    "data": "copy local parquet files onto the run's volume (data put CONFIG DIR): resumable, verified on arrival",
    "rbac": "print the least-privilege RBAC (Role, RoleBinding, optional read-only ClusterRole) for launcher users",
    "schema": "print the JSON schema of experiment configs (--docs: a field reference in Markdown)",
    "completion": "print a shell completion script (bash, zsh or fish)",
}
