"""Arguments several verbs share, declared once, and the machine-readable shapes of `-o json|yaml`.

The shapes (stable: fields are only ever added, never renamed or removed):

- `Run` (one element of `list`, what `wait` prints at the end, the core of `status`)::

    {"apiVersion": "grpo-launcher/v1", "kind": "Run", "name": job name, "namespace": ...,
     "backend": "pytorchjob" | "rayjob" | "trainjob", "jobKind": "PyTorchJob" | "RayJob" | "TrainJob",
     "experiment": name or null,
     "created": RFC3339 creationTimestamp or null,
     "state": {"phase": Pending|Queued|Suspended|Running|Restarting|Succeeded|Failed|Deleted|Unknown,
               "finished": bool, "succeeded": bool, "reason": str}}

- `list`: `{"apiVersion": "grpo-launcher/v1", "kind": "RunList", "items": [Run, ...]}` (newest first).
- `status`: a Run plus `conditions` (the job's, as the API returns them), `ray` (RayJob only:
  jobDeploymentStatus, jobStatus, rayClusterName), `pods` ([{name, role, phase, restarts, node, problem}])
  and `events` ([{time, type, reason, object, count, message}]); `kueue` for a queued run, `gitops` for a run
  Flux applied (launcher.kube.gitops.describe, the same object as in `gitops-status`).
- `gitops-status`: `{"apiVersion": "grpo-launcher/v1", "kind": "GitOpsStatusList", "fluxInstalled": bool,
  "items": [Run + "gitops", ...]}` (newest first).
- `wait`: the Run as it was when waiting ended, plus `result` (succeeded | failed | timeout) and
  `exitCode` (the code the command exits with).
"""

from __future__ import annotations

import argparse

API_VERSION = "grpo-launcher/v1"
OUTPUT_FORMATS = ("json", "yaml")


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """CONFIG plus `--backend` and repeatable `--set KEY=VALUE`."""
    mark_completion(parser.add_argument("config", metavar="CONFIG",
                                        help="experiment config (YAML), e.g. configs/grpo-exp3.yaml"), "file")
    parser.add_argument("--backend", choices=["pytorchjob", "rayjob", "trainjob"], help="override the config's backend")
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set rollout.n=4 or, as Helm, "
             "--set scheduling.tolerations[0].key=gpu (repeatable); KEY+=VALUE appends to a list",
    )
    parser.add_argument("--verl", dest="sets", action=_VerlOverride, metavar="KEY=VALUE",
                        help="append a verl Hydra override to verl.overrides, e.g. --verl "
                             "actor_rollout_ref.rollout.max_num_batched_tokens=2048 (repeatable; taken as written)")


def load_from_args(args: argparse.Namespace):
    """The validated spec for CONFIG/--set/--backend (raises BadInput, exit 2)."""
    from launcher.spec.load import load_spec

    return load_spec(args.config, args.sets, args.backend)


class _VerlOverride(argparse.Action):
    """`--verl ITEM` is `--set verl.overrides+=ITEM`, in command-line order among the --set items, with ITEM as a
    YAML double-quoted scalar (JSON is one) so it is taken as written, never parsed as YAML."""

    def __call__(self, parser, namespace, values, option_string=None):
        import json

        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []),
                                       f"verl.overrides+={json.dumps(values)}"])


def mark_completion(action: argparse.Action, kind: str) -> argparse.Action:
    """Tag an argument for shell completion ("file" or "dir"); `launcher completion` maps the tag to shtab's
    completer (shtab itself is only imported there: it costs ~60 ms at start-up)."""
    action.completion_kind = kind  # type: ignore[attr-defined]
    return action


def add_output_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """kubectl's `-o/--output FORMAT` for a verb that prints a table or text by default."""
    parser.add_argument("-o", "--output", metavar="FORMAT", default=None,
                        help=f"print {what} as json or yaml instead of text (shape: README, 'Machine-readable output')")


# What kubectl users pass to -o: a verb that writes a directory refuses these as a directory name.
FORMAT_WORDS = frozenset({"json", "yaml", "yml", "wide", "name", "text", "table", "jsonpath", "go-template"})


def add_output_dir_argument(parser: argparse.ArgumentParser, help: str, *, required: bool = False) -> None:
    """`-d/--output-dir DIR` for a verb that writes files; `-o` is kept as its older spelling (see check_output_dir)."""
    parser.add_argument("-d", "--output-dir", "-o", dest="output_dir", metavar="DIR", required=required,
                        help=f"{help} (-o DIR: the older spelling; a format name such as json is refused)")


def add_report_arguments(parser: argparse.ArgumentParser, *, window: str, doc: str, instead: str, out: str) -> None:
    """The flags `report` and `compare` share: `--warmup-steps`, `--json`, `-d/--output-dir`, `--no-plots`."""
    parser.add_argument("--warmup-steps", type=int, default=1, metavar="K",
                        help=f"training steps left out of {window} (default 1)")
    parser.add_argument("--json", action="store_true", help=f"print {doc} to stdout instead of {instead}")
    add_output_dir_argument(parser, out)
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def write_report_files(write, args: argparse.Namespace, out_dir, what: str):
    """`write(out_dir, warmup_steps, plots=...)` for `add_report_arguments`' flags: a negative warm-up or a directory
    that cannot be written is bad input (exit 2), named; returns what `write` returns."""
    from launcher.errors import BadInput

    if args.warmup_steps < 0:
        raise BadInput(f"--warmup-steps must be >= 0, got {args.warmup_steps}")
    try:
        return write(out_dir, args.warmup_steps, plots=not args.no_plots)
    except OSError as exc:
        raise BadInput(f"cannot write {what} into {out_dir}: {exc}") from exc


def check_output_dir(value: str | None) -> str | None:
    """The directory unless it is a format word (`-o json` out of kubectl habit): BadInput (exit 2) naming -d."""
    from launcher.errors import BadInput

    if value is not None and value.strip().lower() in FORMAT_WORDS:
        raise BadInput(f"-d/--output-dir: expected a directory, got {value!r}, which is an output format; this verb "
                       "writes files: name a directory with -d DIR (for a format, `status`/`list`/`wait`/`render` take -o)")
    return value


def check_format(value: str | None, formats=OUTPUT_FORMATS, hint: str = "") -> str | None:
    """The `-o` value if it is one of `formats`, None when not given; else BadInput (exit 2) naming the flag."""
    from launcher.errors import BadInput

    if value is None:
        return None
    if value.lower() in formats:
        return value.lower()
    raise BadInput(f"-o/--output: expected a format, one of {', '.join(formats)}, got {value!r}{hint}")


def emit(obj, fmt: str) -> None:
    """Print `obj` as JSON (indented, key order kept) or YAML on stdout."""
    import json

    if fmt == "json":
        print(json.dumps(obj, indent=2, default=str))
    else:
        import yaml

        print(yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, allow_unicode=True), end="")


def run_object(ref, namespace: str, state) -> dict:
    """The `Run` shape (see the module docstring) for a job as last read and its interpreted state."""
    md = ref.obj.get("metadata") or {}
    return {
        "apiVersion": API_VERSION,
        "kind": "Run",
        "name": ref.name,
        "namespace": md.get("namespace") or namespace,
        "backend": ref.backend,
        "jobKind": ref.resource.kind,
        "experiment": ref.experiment or None,
        "created": md.get("creationTimestamp"),
        "state": {"phase": state.phase, "finished": state.finished, "succeeded": state.succeeded,
                  "reason": state.reason},
    }
