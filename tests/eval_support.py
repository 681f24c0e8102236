"""A realistic evaluation-job pod log for tests: entrypoint markers around verl's validation lines.

Validation lines are verl's format (`simlog.concat_dict_to_str`, numpy reprs) behind Ray's coloured
`(TaskRunnerV1 pid=N)` prefix, among the noise a real run prints, exactly where
`launcher.entrypoint.eval` puts its `[eval]` lines.
"""

from __future__ import annotations

import numpy as np

from launcher.spec.contract import done_line, marker_line, questions_line, questions_payload
from simlog import concat_dict_to_str

HEADLINE = "val-core/openai/gsm8k/acc/mean@1"


def per_question(n: int, acc: float, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(x) for x in (rng.random(n) < acc)]


def val_metrics(acc: float) -> dict:
    return {"val-aux/openai/gsm8k/reward/mean@1": np.float64(acc), HEADLINE: np.float64(acc),
            "val-aux/num_turns/min": np.int64(1), "val-aux/num_turns/max": np.int64(1),
            "val-aux/num_turns/mean": np.float64(1.0)}


def eval_log(*, n: int = 200, base: list[int] | None = None, ckpt: list[int] | None = None, step: int = 25,
             base_model: str = "Qwen/Qwen2.5-3B-Instruct",
             ckpt_model: str = "/workspace/checkpoints/verl_grpo_gsm8k/grpo-exp3/global_step_25/actor/hf_merged",
             questions: bool = True) -> list[str]:
    """The stdout lines of an eval pod that evaluated the base model then the checkpoint."""
    base = per_question(n, 0.55, 1) if base is None else base
    ckpt = per_question(n, 0.70, 2) if ckpt is None else ckpt
    lines: list[str] = []
    for label, model, scores, st in (("base", base_model, base, None), ("checkpoint", ckpt_model, ckpt, step)):
        lines.append(marker_line(label, model=model, step=st))
        lines.append("[validate_config] All configuration checks passed successfully!")
        lines.append("\x1b[36m(TaskRunnerV1 pid=4242)\x1b[0m Initial validation metrics: {...}")
        acc = sum(scores) / len(scores)
        lines.append("\x1b[36m(TaskRunnerV1 pid=4242)\x1b[0m " + concat_dict_to_str(val_metrics(acc), 0))
        if questions:
            rows = [{"input": f"question {i}", "gts": str(i), "score": float(s)} for i, s in enumerate(scores)]
            lines.append(questions_line(questions_payload(label, rows)))
        lines.append(done_line(label, 0))
    return lines


def sorted_by_id(scores: list[int]) -> list[int]:
    """`scores` in the order `questions_payload` lists them (sorted question ids)."""
    from launcher.spec.contract import question_id

    ids = [question_id(f"question {i}", str(i)) for i in range(len(scores))]
    return [s for _, s in sorted(zip(ids, scores))]
