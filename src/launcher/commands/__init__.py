"""One module per CLI verb.

Each module exposes `NAME` (the verb), `HELP` (one line), `add_arguments(parser)` and
`run(args) -> int`. `cli` imports them lazily by name so that `render` or `metrics` never import
the Kubernetes client.
"""

# verb -> module name under launcher.commands, in the order `--help` lists them
VERBS: dict[str, str] = {
    "validate": "validate",
    "render": "render",
    "doctor": "doctor",
    "submit": "submit",
    "sweep": "sweep",
    "status": "status",
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
    "rbac": "rbac",
    "schema": "schema",
    "completion": "completion",
}
