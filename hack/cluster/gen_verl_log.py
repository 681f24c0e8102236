#!/usr/bin/env python3
"""Write a simple verl GRPO console log (verl 0.9.1 v1 trainer, Ray-prefixed lines) in CRI log format.

Usage: gen_verl_log.py OUT [--steps N] [--pid PID]
Used by up.sh for the namespace-wide default log of namespace `default` when hack/simlog.py is not available.
Key set and order follow shared/notes/verl.md section 5.4 (values synthetic but consistent).
"""
import argparse
import datetime as dt
import random


def cri(ts: dt.datetime, line: str, stream: str = "stdout") -> str:
    return f"{ts.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {stream} F {line}\n"


def step_line(step: int, rng: random.Random) -> str:
    acc = min(0.95, 0.55 + 0.012 * step + rng.uniform(-0.05, 0.05))
    rlen = 190.0 - step * 0.8 + rng.uniform(-8, 8)
    gen, olp, upd, wts = 9.8 + rng.uniform(-1, 1), 1.1, 6.9 + rng.uniform(-.5, .5), 1.3
    step_s = gen + olp + 0.02 + upd + wts
    tokens = int(16 * (rlen + 115.25))
    kv = [
        ("global_seqlen/min", 2900.0), ("global_seqlen/max", 3100.0), ("global_seqlen/minmax_diff", 200.0),
        ("global_seqlen/balanced_min", 2990.0), ("global_seqlen/balanced_max", 3010.0), ("global_seqlen/mean", 3000.0),
        ("actor/entropy", round(0.41 - 0.004 * step, 4)), ("training/rollout_probs_diff_valid", 1.0),
        ("training/rollout_probs_diff_max", 0.52), ("training/rollout_probs_diff_mean", 0.004),
        ("training/rollout_probs_diff_std", 0.01), ("training/rollout_actor_probs_pearson_corr", 0.998),
        ("actor/pg_clipfrac", 0.0), ("actor/ppo_kl", 1e-05), ("actor/pg_clipfrac_lower", 0.0),
        ("actor/pg_loss", round(rng.uniform(-0.03, 0.01), 4)), ("actor/loss", round(rng.uniform(-0.03, 0.01), 4)),
        ("actor/grad_norm", round(rng.uniform(0.4, 0.9), 3)), ("actor/lr", 1e-06),
        ("actor/perf/max_memory_allocated_gb", 31.2), ("actor/perf/max_memory_reserved_gb", 40.5),
        ("actor/perf/cpu_memory_used_gb", 60.1), ("perf/mfu/actor", 0.12),
        ("training/global_step", step), ("training/epoch", 0),
        ("critic/score/mean", round(acc, 4)), ("critic/score/max", 1.0), ("critic/score/min", 0.0),
        ("critic/rewards/mean", round(acc, 4)), ("critic/rewards/max", 1.0), ("critic/rewards/min", 0.0),
        ("critic/advantages/mean", 0.0016260640695691109), ("critic/advantages/max", 0.7071057558059692),
        ("critic/advantages/min", -0.7071057558059692),
        ("response_length/mean", round(rlen, 2)), ("response_length/max", 256.0), ("response_length/min", 134.0),
        ("response_length/clip_ratio", 0.0625), ("response/aborted_ratio", 0.0),
        ("prompt_length/mean", 115.25), ("prompt_length/max", 139.0), ("prompt_length/min", 91.0),
        ("prompt_length/clip_ratio", 0.0),
        ("num_turns/min", "np.int32(2)"), ("num_turns/max", "np.int32(2)"), ("num_turns/mean", "np.float64(2.0)"),
        ("timing_s/gen", round(gen, 3)), ("timing_s/old_log_prob", olp), ("timing_s/adv", 0.02),
        ("timing_s/update_actor", round(upd, 3)), ("timing_s/step", round(step_s, 3)), ("timing_s/update_weights", wts),
        ("perf/total_num_tokens", tokens), ("perf/time_per_step", round(step_s, 3)),
        ("perf/throughput", tokens / (step_s * 2)),
        ("training/num_turns/mean", "np.float64(2.0)"), ("training/num_turns/max", "np.int64(2)"),
        ("training/num_turns/min", "np.int64(2)"),
    ]
    return f"step:{step} - " + " - ".join(f"{k}:{v}" for k, v in kv)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--pid", type=int, default=123)
    a = ap.parse_args()
    rng = random.Random(3)
    t = dt.datetime(2026, 1, 1, 0, 0, 0, tzinfo=dt.timezone.utc)
    p = f"(TaskRunnerV1 pid={a.pid})"
    lines = [
        "2026-01-01 00:00:00,000\tINFO worker.py:2029 -- Started a local Ray instance.",
        f"{p} Creating file logger at /tmp/metrics.jsonl",
        f"{p} step:0 - val-aux/openai/gsm8k/reward/mean@1:np.float64(0.52) - val-core/openai/gsm8k/acc/mean@1:np.float64(0.52)"
        " - val-aux/num_turns/min:np.int64(1) - val-aux/num_turns/max:np.int64(1) - val-aux/num_turns/mean:np.float64(1.0)",
    ]
    lines += [f"{p} {step_line(s, rng)}" for s in range(1, a.steps + 1)]
    lines.append(f"{p} 'Final validation metrics: None'")
    with open(a.out, "w") as f:
        for i, line in enumerate(lines):
            f.write(cri(t + dt.timedelta(seconds=20 * i), line))


if __name__ == "__main__":
    main()
