"""supervisord's command line in a node container: the one place that knows ``supervisorctl``.

Its argv (:func:`argv`), the reading of its ``status`` (:func:`parse_status`) and of a stop's or start's answer
(:func:`checked`). The engines run it (:meth:`kctl.runtime.engine.base.Engine.supervise`,
:meth:`~kctl.runtime.engine.base.Engine.process_states`) and the status path's one exec for FATAL programs
(:func:`kctl.runtime.docker_api.supervisor_gave_up`); nothing else builds a supervisorctl command or reads its
output.
"""

from __future__ import annotations

from kctl import contract
from kctl.errors import KctlError

# The command, in the node image (Debian's supervisor package).
CTL = "supervisorctl"
# The program states supervisord reports (supervisor.states.ProcessStates): a status line's second word.
STATES = ("STOPPED", "STARTING", "RUNNING", "BACKOFF", "STOPPING", "EXITED", "FATAL", "UNKNOWN")
# What a stop or start answers, with a non-zero exit, when the program already is as asked: no failure.
ALREADY = ("ALREADY_STARTED", "NOT_RUNNING")


def argv(action: str, *programs: str) -> list[str]:
    """``supervisorctl ACTION PROGRAMS...`` against the node image's supervisord (its config file names the
    socket)."""
    return [CTL, "-c", contract.SUPERVISORD_CONF, action, *programs]


def shown(action: str, *programs: str) -> str:
    """The command as an operator would type it in the node, for messages."""
    return " ".join([CTL, action, *programs])


def parse_status(text: str) -> dict[str, str]:
    """Pure: program -> state from ``supervisorctl status`` (``kafka   RUNNING   pid 7, uptime 0:10:00``), in the
    order printed. Lines that are no program's status (``controller: ERROR (no such process)``, a socket's error
    on stderr) are left out."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) > 1 and words[1] in STATES:
            out[words[0]] = words[1]
    return out


def checked(host: str, action: str, program: str, code: int, text: str) -> str:
    """A stop's or start's answer (``text``, stripped) when it succeeded or the program already was as asked;
    else the KctlError that says so."""
    if code != 0 and not any(word in text for word in ALREADY):
        raise KctlError(f"{host}: `{shown(action, program)}` failed (exit {code}): {text[-500:]}",
                        hint=f"see `kctl logs {host} --service supervisor` and `kctl logs {host} --service"
                             f" {program}`")
    return text
