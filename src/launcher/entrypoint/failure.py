"""Why verl failed, from the last lines it wrote on stderr: transient, a configuration error, or unknown (pure).

- `transient`: the cluster, not the config: a collective timed out or was aborted (NCCL's watchdog, gloo, torch's
  DistBackendError/DistNetworkError/DistStoreError), or Ray lost a node, an actor's node or an object's owner. A
  restart resumes from the newest checkpoint: the operator does it (restart policy OnFailure, within
  `run_policy.backoff_limit`).
- `config`: Hydra/OmegaConf refused an override or a key (verl.overrides, `--verl`), or verl's own config
  validation failed. Retrying cannot help, so the entrypoint leaves a marker and every later start of the same
  run stops at once instead of training again (`launcher.entrypoint.resume`).
- `unknown`: anything else (an exception in user code, a killed process): retried as before.

Transient patterns are tried first: a lost node surfaces as assorted errors after it, never as a Hydra error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

TRANSIENT: tuple[tuple[str, str], ...] = (
    ("NCCL timeout", r"Watchdog caught collective operation timeout|ProcessGroupNCCL\S* .*[Tt]ime(d )?out"),
    ("gloo timeout", r"\[gloo/transport/|Gloo connectFullMesh failed|gloo.*(Timed out|timed out|Connection closed by peer)"),
    ("torch.distributed", r"torch\.distributed\.(DistBackendError|DistNetworkError|DistStoreError)"),
    ("NCCL error", r"NCCL communicator was aborted|NCCL error.*(unhandled system error|remote process exited)"),
    ("lost Ray node", r"NodeDiedError|has been marked dead|node .{0,80} (died|was terminated)|OwnerDiedError|"
                      r"ObjectLostError|raylet (died|is terminated)|ActorUnavailableError"),
)
CONFIG: tuple[tuple[str, str], ...] = (
    ("Hydra override", r"Could not override '|Error merging override|Key '[^']+' is not in struct|"
                       r"omegaconf\.errors\.(ConfigAttributeError|ConfigKeyError|ValidationError|"
                       r"ConfigTypeError|MissingMandatoryValue)|hydra\.errors\.|mismatched input '|"
                       r"no viable alternative at input"),
    ("verl config validation", r"verl/utils/config\.py\", line \d+, in validate_config|"
                               r"omegaconf\.errors\.InterpolationResolutionError"),
)
_TRANSIENT = tuple((name, re.compile(p)) for name, p in TRANSIENT)
_CONFIG = tuple((name, re.compile(p)) for name, p in CONFIG)


@dataclass(frozen=True)
class Failure:
    """`kind` (transient, config, unknown), the pattern's name and the line that matched it."""

    kind: str
    what: str = ""
    line: str = ""

    def describe(self) -> str:
        return f"{self.kind} ({self.what}: {self.line.strip()[:300]})" if self.what else self.kind


def classify_failure(lines: Iterable[str]) -> Failure:
    """The class of verl's failure from its last stderr lines (oldest first)."""
    lines = list(lines)
    for kind, patterns in (("transient", _TRANSIENT), ("config", _CONFIG)):
        for line in lines:
            for name, rx in patterns:
                if rx.search(line):
                    return Failure(kind, name, line)
    return Failure("unknown")
