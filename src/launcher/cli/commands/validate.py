"""`launcher validate CONFIG`: check a config without touching any cluster."""

from __future__ import annotations

import argparse

from launcher.cli.common import add_config_arguments, load_from_args
from launcher.errors import BadInput

HELP = "check an experiment config (schema, verl batch rules, Kubernetes names)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--show-overrides", action="store_true", help="also print verl's Hydra override list")


def run(args: argparse.Namespace) -> int:
    from launcher.spec.contract import builtin_model, describe_model, describe_source
    from launcher.spec.verl import verl_overrides

    spec = load_from_args(args)
    res = spec.resources
    gpu = f"{res.gpu_type} ({res.gpu_label_scheme} labels)" if res.gpu_type else "GPU (any type)"
    pods = f"{res.nodes} node(s) × " + ("CPU only" if res.cpu_only else f"{res.gpus_per_node} {gpu}")
    work = (f"smoke workload, {spec.smoke.steps} steps" if spec.workload == "smoke" else
            f"batch {spec.data.train_batch_size} × n {spec.rollout.n}, {spec.trainer.total_training_steps} steps")
    # a built-in model says what it is (launcher.spec.contract): a test model must not pass for the real one
    model = f", model {describe_model(spec.model.path)}" if builtin_model(spec.model.path) else ""
    print(f"ok: {args.config} -> {spec.backend} {spec.job_name} in namespace {spec.scheduling.namespace}: {pods}, "
          f"{work}{model}")
    fn = spec.reward.function
    if fn is not None:
        print(f"reward.function: {fn.name} from " + (
            f"{fn.path} ({describe_source(fn.source)}; read as Python, not imported; shipped in the run's ConfigMap)"
            if fn.local else f"{fn.path} (a module in the image)"))
    print(f"health: {health_line(spec.health)}")
    if spec.verl.overrides:
        ok, line = _verl_check(spec, verl_overrides(spec))
        if not ok:
            raise BadInput(f"{args.config}: verl.overrides: {line}")
        print(f"verl.overrides: {len(spec.verl.overrides)} appended; {line}")
    if args.show_overrides:
        print("\n".join(verl_overrides(spec)))
    return 0


def _verl_check(spec, overrides: list[str]) -> tuple[bool, str]:
    """verl's own Hydra compose + validate_config on the whole list where verl is installed (seconds: only when the
    user added overrides; the launcher's own list is proven against verl by tests/verl); else what checks remain."""
    from launcher.entrypoint.smoke_checks import check_verl_config, verl_installed

    if not verl_installed():
        return True, "their syntax checked; verl is not installed here, so verl composes them in the pod"

    check = check_verl_config(spec, overrides)
    return check.ok, (f"composed and validated by verl: {check.detail}" if check.ok
                      else f"verl refused the override list: {check.detail}")


def health_line(h) -> str:
    """The RL health rules the follower's watchdog applies (spec `health:`), one clause each."""
    kl = f"|actor/ppo_kl| > {h.kl_drift.max:g}" if h.kl_drift.max is not None else None
    ent = f"entropy moves > {h.entropy_drift.max_change:g} × its start" if h.entropy_drift.max_change is not None else None
    clip = f"clip ratio ≥ {h.clip_pinned.ratio:g}" if h.clip_pinned.ratio is not None else None
    parts = [("no_signal", "advantages all 0", h.no_signal), ("clip_pinned", clip, h.clip_pinned),
             ("kl_drift", kl, h.kl_drift), ("entropy_drift", ent, h.entropy_drift)]
    stall = h.stall.action + (f" (at most {h.stall.max_restarts}, then delete)" if h.stall.action == "restart" else "")
    return f"stall → incident, {stall}; " + "; ".join(
        f"{name} off" if what is None else f"{name} ({what}, {rule.steps} steps) → {rule.action}"
        for name, what, rule in parts)
