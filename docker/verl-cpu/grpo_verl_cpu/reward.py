"""The reward of CPU runs with the built-in tiny model: verl's GSM8K score plus a digit-shaping term.

Why: a random tiny model never writes "#### <right number>", so verl's GSM8K rule scores every
response 0, every GRPO advantage is 0 and nothing is learned (notes/verl-cpu.md). This reward keeps
verl's score where it is earned and otherwise gives a small dense term the tiny model can climb:

    correct  (verl's gsm8k.compute_score, strict "#### N" == ground truth)  -> 1.0
    otherwise                                    SHAPING_WEIGHT * digit_share(last 300 characters)

`digit_share` is the fraction of the response's non-whitespace characters that are ASCII digits
(0 for an empty response). It rewards what a GSM8K answer is made of (numbers), so GRPO has non-zero
advantages whenever the two samples of a prompt differ in how many digits they write, and the mean
score rises as the policy writes more digits. The shaped score stays below
`SHAPING_WEIGHT` = 0.5 < 1.0, so a correct answer always beats any amount of digits. It is a
deterministic function of the text; the last 300 characters are scored, as verl's GSM8K extraction
looks only there.

verl calls it as `reward.custom_reward_function.path=pkg://grpo_verl_cpu.reward` and
`reward.custom_reward_function.name=compute_score`. The result is a dict: `score` (what GRPO uses)
and `acc` (verl's unshaped GSM8K score, so validation's `acc` stays GSM8K accuracy). Data sources
other than GSM8K get verl's default scoring, unshaped.
"""

from __future__ import annotations

from typing import Any

GSM8K = "openai/gsm8k"
SHAPING_WEIGHT = 0.5
# verl's GSM8K extraction looks only at the last 300 characters (verl.utils.reward_score.gsm8k).
CLIP_CHARS = 300
_DIGITS = frozenset("0123456789")


def digit_share(text: str) -> float:
    """Fraction of the non-whitespace characters of `text` that are ASCII digits; 0.0 when none."""
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return 0.0
    return sum(c in _DIGITS for c in chars) / len(chars)


def shaped(gsm8k_score: float, solution_str: str) -> float:
    """The score GRPO sees: verl's score when it is positive, else the digit-shaping term."""
    if gsm8k_score > 0:
        return float(gsm8k_score)
    return SHAPING_WEIGHT * digit_share(solution_str[-CLIP_CHARS:])


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **_: Any) -> dict[str, float]:
    """verl's custom reward function interface (keyword arguments; extra ones are ignored)."""
    if data_source != GSM8K:
        from verl.utils.reward_score import default_compute_score

        result = default_compute_score(data_source, solution_str, ground_truth, extra_info)
        score = float(result["score"] if isinstance(result, dict) else result)
        return {"score": score, "acc": score}
    from verl.utils.reward_score import gsm8k

    correct = float(gsm8k.compute_score(solution_str, ground_truth))
    return {"score": shaped(correct, solution_str), "acc": correct}
