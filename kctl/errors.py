"""One exception family for everything an operator can act on.

Every error carries a message and a hint; the CLI catches ``KctlError`` in
exactly one place and prints both, without a traceback unless ``-v``.
Library errors (docker, confluent-kafka, kazoo) are translated at the
boundary of the module that talks to that system.
"""

from __future__ import annotations


class KctlError(Exception):
    """An error the operator can act on."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class SpecError(KctlError):
    """The cluster spec is invalid; nothing has been written or started."""

    exit_code = 2

    def __init__(self, problems: list[str], hint: str | None = None, path: str | None = None) -> None:
        where = f" in {path}" if path else ""
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid cluster spec{where} ({len(problems)} problem(s)):\n{lines}", hint)
        self.problems = problems


class UsageError(KctlError):
    """A command was called with options that do not make sense together."""

    exit_code = 2


class DockerUnavailable(KctlError):
    """The Docker engine or the Compose plugin cannot be reached."""


class ClusterError(KctlError):
    """The cluster is not in a state that allows the operation."""


class TimeoutReached(KctlError):
    """A wait ran out of time; the message names what it waited for and what it saw."""
