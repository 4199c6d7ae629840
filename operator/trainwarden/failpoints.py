"""Failpoints: named places where a fault-injection run may crash the operator on purpose.

etcd's robustness tests crash etcd at chosen points (gofail) rather than at random moments
only; `make faults` (faults/) does the same to prove that a kill between a decision and
its write loses nothing and doubles nothing. Off unless `trainwarden run --failpoint
NAME=kill` names one (never set in the Helm chart): a disabled failpoint costs a dict
lookup.

Actions: `kill` (SIGKILL this process, as the OOM killer or a node failure would: no
cleanup, no lease release, no final write).
"""

import os
import signal
import sys
from collections.abc import Iterable

from trainwarden import logs

log = logs.get(__name__)
ACTIONS = frozenset({"kill"})
POINTS = {
    "budget-before-record": "an exhausted budget decided to suspend: before the record",
    "budget-before-suspend": "the suspension is recorded in status: before the patch",
    "budget-before-resume": "a resume is decided: before the workload is patched",
    "budget-before-final-status": "suspensions or resumes were made: before status says so",
    "idle-before-reclaim": "an idle workload is due for reclaim: before the action",
    "pruner-before-record": "a pruner Job was created: before status records its uid",
}
"""Every failpoint the operator has, with where it is (a typo in a fault run fails loudly)."""
_active: dict[str, str] = {}


def parse(specs: Iterable[str]) -> dict[str, str]:
    """`NAME=ACTION` strings into a mapping; ValueError names what is wrong."""
    parsed = {}
    for spec in specs:
        name, _, action = spec.partition("=")
        if name not in POINTS:
            raise ValueError(f"unknown failpoint {name!r} (known: {', '.join(sorted(POINTS))})")
        if action not in ACTIONS:
            raise ValueError(f"failpoint {name}: unknown action {action!r} (known: kill)")
        parsed[name] = action
    return parsed


def configure(points: dict[str, str]) -> None:
    """Arm the failpoints (the composition root, once at start)."""
    _active.clear()
    _active.update(points)
    if points:
        log.warning("failpoints armed: this operator crashes on purpose", failpoints=points)


def hit(name: str) -> None:
    """Reached failpoint `name`: carry out its action if it is armed."""
    action = _active.get(name)
    if action is None:
        return
    log.warning("failpoint reached", failpoint=name, action=action)
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)
