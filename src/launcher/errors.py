"""Exit codes and the error types that map onto them.

Every verb returns one of these codes; `cli.main` turns a raised `LauncherError` into its message on
stderr and its code, so no traceback reaches a user for an expected failure.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_RUN_FAILED = 1  # the run itself failed (job Failed, wait saw a failure)
EXIT_BAD_INPUT = 2  # the user's input is wrong; nothing was sent to a cluster
EXIT_CLUSTER = 3  # the cluster is unreachable or refused the request
EXIT_TIMEOUT = 124  # `wait --timeout` ran out while the run was still going (the code timeout(1) uses)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports it)
EXIT_BROKEN_PIPE = 141  # stdout's reader went away, e.g. `| head` (128 + SIGPIPE, as coreutils exit)

# code -> meaning, in the order `--help` and the README list them (one source for both)
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_RUN_FAILED: "the run failed (submit --follow, wait, logs -f, watch), or --on-stall delete deleted it",
    EXIT_BAD_INPUT: "bad input: a config, flag or file is invalid; nothing was sent to a cluster",
    EXIT_CLUSTER: "the cluster is unreachable or refused a request",
    EXIT_TIMEOUT: "wait --timeout ran out before the run finished (it is still running)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
    EXIT_BROKEN_PIPE: "stdout was closed by its reader (e.g. piped to head); output was cut short",
}


def exit_codes_epilog() -> str:
    """The exit code table as `--help` epilog text."""
    return "exit codes:\n" + "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES.items())


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
