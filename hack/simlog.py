"""Synthetic verl 0.9.1 GRPO console logs, for tests, benchmarks and a fake cluster (KWOK) to serve.

The output imitates a v1-trainer pod log (see `/work/shared/notes/verl.md` §5): Ray driver lines,
a pprint of the config from `(TaskRunnerV1 pid=N)` with Ray's ANSI-cyan prefix, tqdm
`Training Progress` updates joined by `\\r`, one `step:N - ...` line per step with the full exp3
key set in verl's order (§5.4) and value types (§5.5: plain floats from `MetricsAggregator`, numpy
scalars for `num_turns/*`, `training/num_turns/*` and `val-*`), an optional step-0 validation line,
and the closing `'Final validation metrics: None'`.

Values are rendered exactly like verl's `concat_dict_to_str` (`pprint.pformat(v)`, which for a
number is `repr(v)`; a test checks the two agree). Everything is deterministic given `seed`.

    python hack/simlog.py --steps 25 --n 2 --max-response-length 256 --gpus 2 --seed 0 \\
        [--val-before-train] [--pace SECONDS] [--cri] [-o FILE]

`--cri` writes the CRI log-file format (`<RFC3339Nano> stdout F <line>`) that the kubelet, and
KWOK's log serving, read.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import numbers
import random
import sys
import time
from collections.abc import Iterator

import numpy as np

ESC = "\x1b"
_T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def concat_dict_to_str(metrics: dict, step: int) -> str:
    """verl 0.9.1's `concat_dict_to_str`, with `repr` for `pprint.pformat` (identical for numbers)."""
    out = [f"step:{step}"]
    for k, v in metrics.items():
        if isinstance(v, numbers.Number):
            out.append(f"{k}:{v!r}")
    return " - ".join(out)


def _plain(v):
    """Ground-truth Python value of a metric (numpy scalars unwrapped)."""
    return v.item() if isinstance(v, np.generic) else v


def _val_metrics(rng: random.Random, acc: float, n_val: int = 1319) -> dict:
    a = round(sum(rng.random() < acc for _ in range(200)) / 200 * n_val) / n_val
    return {
        "val-aux/openai/gsm8k/reward/mean@1": np.float64(a),
        "val-core/openai/gsm8k/acc/mean@1": np.float64(a),
        "val-aux/num_turns/min": np.int64(1),
        "val-aux/num_turns/max": np.int64(1),
        "val-aux/num_turns/mean": np.float64(1.0),
    }


def _train_metrics(rng: random.Random, step: int, steps: int, *, n: int, batch_size: int,
                   max_response_length: int, gpus: int) -> dict:
    """One step's metrics: the exp3 key set and order of verl.md §5.4, plausible evolving values."""
    progress = step / max(steps, 1)
    p_correct = min(0.95, 0.45 + 0.35 * progress + rng.gauss(0, 0.05))
    # Zero-signal step (every group scored identically: no advantage, no gradient) ~1 in 8
    zero_signal = rng.random() < 0.125
    scores, resp, prompts = [], [], []
    for _ in range(batch_size):
        if zero_signal:
            s = float(rng.random() < p_correct)
            group = [s] * n
        else:
            group = [float(rng.random() < p_correct) for _ in range(n)]
        plen = rng.randint(80, 150)
        for s in group:
            scores.append(s)
            prompts.append(plen)
            r = int(rng.gauss(200 - 60 * progress, 45))
            resp.append(max(20, min(max_response_length, r)))
    # GRPO advantage: (score - group mean) / (unbiased group std + eps), broadcast over the response
    adv = []
    for g in range(batch_size):
        grp = scores[g * n:(g + 1) * n]
        mean = sum(grp) / n
        std = math.sqrt(sum((x - mean) ** 2 for x in grp) / (n - 1)) if n > 1 else 0.0
        adv.extend((x - mean) / (std + 1e-6) for x in grp)
    tok = sum(resp)
    adv_mean = sum(a * r for a, r in zip(adv, resp)) / tok
    total_tokens = tok + sum(prompts)
    # token counts per DP rank before / after balancing (ints that verl turns into floats)
    per_rank = [round(total_tokens / gpus * (1 + rng.uniform(-0.04, 0.04))) for _ in range(gpus)]
    bal = [round(total_tokens / gpus + rng.uniform(-10, 10)) for _ in range(gpus)]
    gen = tok * rng.uniform(0.0028, 0.0034) + 2.0
    old_lp = rng.uniform(0.9, 1.3)
    adv_t = rng.uniform(0.01, 0.03)
    upd = total_tokens * rng.uniform(0.0012, 0.0016)
    upd_w = rng.uniform(1.1, 1.5)
    step_s = gen + old_lp + adv_t + upd + upd_w + (35.0 if step == 1 else 0.0)  # step 1: warm-up/compile
    grad = 0.0 if zero_signal else abs(rng.gauss(0.5, 0.2))
    pg_loss = 0.0 if zero_signal else rng.gauss(0.0, 0.02)
    clip = 0.0 if zero_signal else max(0.0, rng.gauss(0.002, 0.002))
    kl = 0.0 if zero_signal else abs(rng.gauss(2e-5, 1e-5))
    n_samples = len(resp)
    return {
        "global_seqlen/min": float(min(per_rank)),
        "global_seqlen/max": float(max(per_rank)),
        "global_seqlen/minmax_diff": float(max(per_rank) - min(per_rank)),
        "global_seqlen/balanced_min": float(min(bal)),
        "global_seqlen/balanced_max": float(max(bal)),
        "global_seqlen/mean": float(total_tokens / gpus),
        "actor/entropy": rng.uniform(0.3, 0.5) * (1 - 0.3 * progress),
        "training/rollout_probs_diff_valid": 1.0,
        "training/rollout_probs_diff_max": rng.uniform(0.3, 0.7),
        "training/rollout_probs_diff_mean": rng.uniform(0.003, 0.006),
        "training/rollout_probs_diff_std": rng.uniform(0.008, 0.015),
        "training/rollout_actor_probs_pearson_corr": rng.uniform(0.995, 0.999),
        "actor/pg_clipfrac": clip,
        "actor/ppo_kl": kl,
        "actor/pg_clipfrac_lower": 0.0,
        "actor/pg_loss": pg_loss,
        "actor/loss": pg_loss,
        "actor/grad_norm": grad,
        "actor/lr": 1e-06,
        "actor/perf/max_memory_allocated_gb": 31.2 + rng.uniform(0, 0.5),
        "actor/perf/max_memory_reserved_gb": 40.5,
        "actor/perf/cpu_memory_used_gb": 60.1 + rng.uniform(-0.5, 0.5),
        "perf/mfu/actor": rng.uniform(0.1, 0.14),
        "training/global_step": step,
        "training/epoch": 0,
        "critic/score/mean": sum(scores) / n_samples,
        "critic/score/max": max(scores),
        "critic/score/min": min(scores),
        "critic/rewards/mean": sum(scores) / n_samples,
        "critic/rewards/max": max(scores),
        "critic/rewards/min": min(scores),
        "critic/advantages/mean": adv_mean,
        "critic/advantages/max": max(adv),
        "critic/advantages/min": min(adv),
        "critic/returns/mean": adv_mean,
        "critic/returns/max": max(adv),
        "critic/returns/min": min(adv),
        "response_length/mean": tok / n_samples,
        "response_length/max": float(max(resp)),
        "response_length/min": float(min(resp)),
        "response_length/clip_ratio": sum(r == max_response_length for r in resp) / n_samples,
        "response_length_non_aborted/mean": tok / n_samples,
        "response_length_non_aborted/max": float(max(resp)),
        "response_length_non_aborted/min": float(min(resp)),
        "response_length_non_aborted/clip_ratio": sum(r == max_response_length for r in resp) / n_samples,
        "response/aborted_ratio": 0.0,
        "prompt_length/mean": sum(prompts) / n_samples,
        "prompt_length/max": float(max(prompts)),
        "prompt_length/min": float(min(prompts)),
        "prompt_length/clip_ratio": 0.0,
        "num_turns/min": np.int32(2),
        "num_turns/max": np.int32(2),
        "num_turns/mean": np.float64(2.0),
        "timing_s/gen": gen,
        "timing_s/old_log_prob": old_lp,
        "timing_s/adv": adv_t,
        "timing_s/update_actor": upd,
        "timing_s/step": step_s,
        "timing_s/update_weights": upd_w,
        "timing_per_token_ms/update_actor": upd * 1000 / total_tokens,
        "timing_per_token_ms/gen": gen * 1000 / tok,
        "timing_per_token_ms/adv": adv_t * 1000 / total_tokens,
        "perf/total_num_tokens": total_tokens,
        "perf/time_per_step": step_s,
        "perf/throughput": total_tokens / (step_s * gpus),
        "training/num_turns/mean": np.float64(2.0),
        "training/num_turns/max": np.int64(2),
        "training/num_turns/min": np.int64(2),
    }


def step_metrics(*, steps: int = 25, n: int = 2, max_response_length: int = 256, gpus: int = 2,
                 seed: int = 0, batch_size: int = 8, val_before_train: bool = False) -> Iterator[tuple[int, dict]]:
    """(step, metrics) in logging order, values as verl holds them (floats, ints, numpy scalars)."""
    rng = random.Random(seed)
    if val_before_train:
        yield 0, _val_metrics(rng, 0.55)
    for step in range(1, steps + 1):
        yield step, _train_metrics(rng, step, steps, n=n, batch_size=batch_size,
                                   max_response_length=max_response_length, gpus=gpus)


def expected_rows(**kwargs) -> list[dict]:
    """Ground truth for `generate(**kwargs)`: `[{"step": N, key: python value, ...}, ...]`."""
    kwargs = {k: v for k, v in kwargs.items() if k in _STEP_ARGS}
    return [{"step": s, **{k: _plain(v) for k, v in m.items()}} for s, m in step_metrics(**kwargs)]


_STEP_ARGS = {"steps", "n", "max_response_length", "gpus", "seed", "batch_size", "val_before_train"}


def _config_dump(pid: int, steps: int, n: int, max_response_length: int, gpus: int, batch_size: int) -> list[str]:
    """An abbreviated pprint of the resolved config, as the TaskRunner prints it at startup."""
    return [
        "{'actor_rollout_ref': {'actor': {'_target_': 'verl.workers.config.FSDPActorConfig',",
        "                                 'checkpoint': {'async_save': False,",
        "                                                'load_contents': ['model', 'optimizer', 'extra'],",
        "                                                'save_contents': ['model', 'optimizer', 'extra']},",
        "                                 'clip_ratio': 0.2,",
        "                                 'entropy_coeff': 0,",
        "                                 'loss_agg_mode': 'token-mean',",
        "                                 'optim': {'lr': 1e-06, 'weight_decay': 0.01},",
        f"                                 'ppo_mini_batch_size': {batch_size},",
        "                                 'use_kl_loss': False},",
        f"                       'rollout': {{'n': {n}, 'name': 'vllm', 'temperature': 1.0}}}},",
        " 'algorithm': {'adv_estimator': 'grpo', 'use_kl_in_reward': False},",
        f" 'data': {{'max_prompt_length': 512, 'max_response_length': {max_response_length},",
        f"          'train_batch_size': {batch_size}}},",
        " 'trainer': {'experiment_name': 'exp3', 'logger': ['console'],",
        f"             'n_gpus_per_node': {gpus}, 'nnodes': 1, 'project_name': 'verl_grpo_gsm8k',",
        f"             'save_freq': -1, 'test_freq': -1, 'total_training_steps': {steps}}}}}",
    ]


def _bar(done: int, total: int, elapsed: float) -> str:
    frac = done / total if total else 1.0
    fill = "█" * int(frac * 10)
    rate = elapsed / done if done else 0.0
    left = rate * (total - done)
    clock = lambda s: f"{int(s // 60):02d}:{int(s % 60):02d}"  # noqa: E731
    tail = f"{clock(elapsed)}<{clock(left)}, {rate:.2f}s/it" if done else "00:00<?, ?it/s"
    return f"Training Progress: {int(frac * 100):3d}%|{fill:<10}| {done}/{total} [{tail}]"


def generate(*, steps: int = 25, n: int = 2, max_response_length: int = 256, gpus: int = 2, seed: int = 0,
             batch_size: int = 8, val_before_train: bool = False, cri: bool = False, color: bool = True,
             pace: float = 0.0) -> Iterator[str]:
    """Yield the log's physical lines, each ending in `\\n` (tqdm updates inside a line use `\\r`).

    With `cri=True` every line is prefixed `<timestamp> <stdout|stderr> F ` (timestamps advance by
    each step's `timing_s/step`). `pace` sleeps that many seconds before each step line.
    """
    rng = random.Random(seed + 1)  # separate stream: noise never shifts the metric values
    pid = rng.randint(2000, 30000)
    prefix = f"{ESC}[36m(TaskRunnerV1 pid={pid}){ESC}[0m " if color else f"(TaskRunnerV1 pid={pid}) "
    clock = [0.0]

    def out(text: str, stream: str = "stdout") -> str:
        if not cri:
            return text + "\n"
        ts = _T0 + dt.timedelta(seconds=clock[0])
        return f"{ts.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {stream} F {text}\n"

    def driver(level: str, where: str, msg: str) -> str:
        ts = (_T0 + dt.timedelta(seconds=clock[0])).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
        return out(f"{ts}\t{level} {where} -- {msg}", "stderr")

    yield driver("INFO", "authentication_token_setup.py:50",
                 "Generated new authentication token and saved to /root/.ray/auth_token")
    clock[0] += 2.8
    yield driver("WARNING", "authentication_token_setup.py:85",
                 "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out. "
                 "For more information, see https://docs.ray.io/en/latest/ray-security/token-auth.html")
    clock[0] += 4.9
    yield driver("INFO", "worker.py:2029", "Started a local Ray instance. View the dashboard at "
                 f"{ESC}[1m{ESC}[32mhttp://127.0.0.1:8265 {ESC}[39m{ESC}[22m")
    yield out("[validate_config] All configuration checks passed successfully!")
    for line in _config_dump(pid, steps, n, max_response_length, gpus, batch_size):
        yield out(prefix + line)
    clock[0] += 60.0
    bar: list[str] = [_bar(0, steps, 0.0)]
    elapsed = 0.0
    for step, metrics in step_metrics(steps=steps, n=n, max_response_length=max_response_length, gpus=gpus,
                                      seed=seed, batch_size=batch_size, val_before_train=val_before_train):
        if pace:
            time.sleep(pace)
        if step:
            dur = float(metrics["timing_s/step"])
            clock[0] += dur + 0.5
            elapsed += dur + 0.5
        else:
            clock[0] += 30.0
        yield out(prefix + concat_dict_to_str(metrics, step))
        if step:
            bar.append(_bar(step, steps, elapsed))
            # tqdm's \r updates reach the log only when Ray sees a newline: a few steps per line
            if step % 5 == 0 or step == steps:
                yield out(prefix + "\r".join(bar), "stderr")
                bar = []
    yield out(prefix + "'Final validation metrics: None'")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: write a synthetic log to stdout or `-o FILE`."""
    p = argparse.ArgumentParser(prog="python -m simlog", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--n", type=int, default=2, help="rollouts per prompt (GRPO group size)")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per step (data.train_batch_size)")
    p.add_argument("--max-response-length", type=int, default=256)
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--val-before-train", action="store_true", help="emit the step-0 validation line")
    p.add_argument("--pace", type=float, default=0.0, metavar="SECONDS", help="sleep before each step line")
    p.add_argument("--cri", action="store_true", help="CRI log-file format (what KWOK serves)")
    p.add_argument("--no-color", action="store_true", help="plain Ray prefix (RAY_COLOR_PREFIX=0)")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    a = p.parse_args(argv)
    if a.steps < 0 or a.n < 1 or a.batch_size < 1 or a.gpus < 1 or a.max_response_length < 20:
        p.error("need --steps >= 0, --n >= 1, --batch-size >= 1, --gpus >= 1, --max-response-length >= 20")
    lines = generate(steps=a.steps, n=a.n, max_response_length=a.max_response_length, gpus=a.gpus, seed=a.seed,
                     batch_size=a.batch_size, val_before_train=a.val_before_train, cri=a.cri,
                     color=not a.no_color, pace=a.pace)
    f = open(a.output, "w", encoding="utf-8", newline="") if a.output else sys.stdout
    try:
        for line in lines:
            f.write(line)
            if a.pace:
                f.flush()  # so a follower sees the log grow live
    except BrokenPipeError:
        return 0
    finally:
        if a.output:
            f.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
