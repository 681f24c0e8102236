"""`grpo_verl_cpu.reward`'s shaping term (no verl needed): docker/verl-cpu, the CPU training groundwork.

verl's own GSM8K score inside `compute_score` is checked in test_cpu_verl.py (marked `verl`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# grpo_verl_cpu is not part of the launcher package: docker/verl-cpu is where it lives
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docker" / "verl-cpu"))
from grpo_verl_cpu import reward as CR  # noqa: E402


@pytest.mark.parametrize(
    ("text", "share"),
    [
        ("", 0.0),
        ("   \n\t", 0.0),
        ("abc", 0.0),
        ("42", 1.0),
        ("a1", 0.5),
        ("x = 1 2 3 y", 0.5),  # whitespace is not counted: "x=123y" has 6 characters, 3 of them digits
        ("#### 72", 2 / 6),
        ("٣", 0.0),  # a non-ASCII digit is not an ASCII digit
        ("1.5", 2 / 3),
    ],
)
def test_digit_share(text, share):
    assert CR.digit_share(text) == pytest.approx(share)


@pytest.mark.parametrize(
    ("gsm8k_score", "text", "score"),
    [
        (1.0, "anything #### 72", 1.0),  # a correct answer keeps verl's score
        (0.0, "#### 72", 0.5 * 2 / 6),
        (0.0, "no digits at all", 0.0),
        (0.0, "1234", 0.5),  # the shaped score never reaches a correct answer's
        (0.0, "a" * 400 + "99", 0.5 * 2 / 300),  # only the last 300 characters count, as in verl
    ],
)
def test_shaped(gsm8k_score, text, score):
    assert CR.shaped(gsm8k_score, text) == pytest.approx(score)


def test_shaping_stays_below_a_correct_answer():
    assert CR.SHAPING_WEIGHT < 1.0
    assert max(CR.shaped(0.0, t) for t in ("0", "9" * 1000, "1 2 3")) == CR.SHAPING_WEIGHT
