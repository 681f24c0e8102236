"""One line of `launcher doctor`'s output (`Check`: status, finding, fix) and the verb's exit code."""

from __future__ import annotations

from dataclasses import dataclass

OK, FAIL, WARN = "ok", "fail", "warn"
MARKS = {OK: "✓", FAIL: "✗", WARN: "!"}


@dataclass
class Check:
    """One line of doctor's output."""

    name: str
    status: str  # OK | FAIL | WARN
    finding: str
    fix: str = ""

    @property
    def mark(self) -> str:
        return MARKS[self.status]

    def line(self, width: int = 14) -> str:
        text = f"{self.mark} {self.name:<{width}} {self.finding}"
        if self.fix:
            text += f" — fix: {self.fix}"
        return " ".join(text.split("\n"))

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "finding": self.finding, "fix": self.fix or None}


def exit_code(checks: list[Check]) -> int:
    """0 when nothing failed (warnings allowed), 1 when a check failed."""
    return 1 if any(c.status == FAIL for c in checks) else 0

