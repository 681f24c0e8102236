"""Exit codes and the error types that map onto them.

Every verb returns one of these codes; `cli.main` turns a raised `LauncherError` into its message on
stderr and its code, so no traceback reaches a user for an expected failure.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_RUN_FAILED = 1  # the run itself failed (job Failed, wait saw a failure)
EXIT_BAD_INPUT = 2  # the user's input is wrong; nothing was sent to a cluster
EXIT_CLUSTER = 3  # the cluster is unreachable or refused the request


class LauncherError(Exception):
    """An expected failure with a one-line message and an exit code."""

    exit_code = EXIT_RUN_FAILED

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class BadInput(LauncherError):
    """The config, a flag or an input file is invalid (exit 2, before any cluster call)."""

    exit_code = EXIT_BAD_INPUT


class ClusterError(LauncherError):
    """The cluster is unreachable or refused a request (exit 3)."""

    exit_code = EXIT_CLUSTER


class RunFailed(LauncherError):
    """The training run failed (exit 1)."""

    exit_code = EXIT_RUN_FAILED
