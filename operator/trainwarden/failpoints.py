"""Failpoints: named places where a fault-injection run may crash the operator on purpose.

etcd's robustness tests crash etcd at chosen points (gofail) rather than at random moments
only; `make faults` (faults/) does the same to prove that a kill between a decision and
its write loses nothing and doubles nothing. Off unless `trainwarden run --failpoint
NAME=kill` names one (never set in the Helm chart): a disabled failpoint costs a dict
lookup.

Actions: `kill` (SIGKILL this process, as the OOM killer or a node failure would: no
cleanup, no lease release, no final write). One failpoint is not a place but a state:
`clock-skew=+300` (or `-300`) moves this process's own clock that many seconds away from
the API server's (clock.py reads it), to test what a skewed node's clock does.
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
    "clock-skew": "this process's clock runs SECONDS ahead (+) or behind (-) the real one",
    "volumes-before-delete": "an orphaned claim is annotated: before its DELETE",
    "pruner-before-record": "a pruner Job was created: before status records its uid",
}
"""Every failpoint the operator has, with where it is (a typo in a fault run fails loudly)."""
SKEW = "clock-skew"
_active: dict[str, str] = {}


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"failpoint {SKEW}: {value!r} is not a number of seconds") from None
    if seconds != seconds or abs(seconds) > 86400 * 365:  # NaN, or absurd
        raise ValueError(f"failpoint {SKEW}: {value!r} is out of range")
    return seconds


def parse(specs: Iterable[str]) -> dict[str, str]:
    """`NAME=ACTION` strings into a mapping; ValueError names what is wrong."""
    parsed = {}
    for spec in specs:
        name, _, action = spec.partition("=")
        if name not in POINTS:
            raise ValueError(f"unknown failpoint {name!r} (known: {', '.join(sorted(POINTS))})")
        if name == SKEW:
            _seconds(action)  # a number, or ValueError now rather than at the first "now"
        elif action not in ACTIONS:
            raise ValueError(f"failpoint {name}: unknown action {action!r} (known: kill)")
        parsed[name] = action
    return parsed


def configure(points: dict[str, str]) -> None:
    """Arm the failpoints (the composition root, once at start)."""
    _active.clear()
    _active.update(points)
    if points:
        log.warning("failpoints armed: this operator crashes on purpose", failpoints=points)


def skew() -> float:
    """Seconds this process's clock is moved by `clock-skew` (0 unless armed)."""
    value = _active.get(SKEW)
    return _seconds(value) if value is not None else 0.0


def hit(name: str) -> None:
    """Reached failpoint `name`: carry out its action if it is armed."""
    action = _active.get(name)
    if action != "kill":
        return
    log.warning("failpoint reached", failpoint=name, action=action)
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)
