"""Failpoints (make faults): off unless armed, a typo fails loudly, and an armed one
kills the process where it stands."""

import os
import signal
import subprocess
import sys

import pytest

from trainwarden import failpoints


def test_parse_accepts_known_points_and_refuses_typos() -> None:
    assert failpoints.parse(["budget-before-suspend=kill"]) == {"budget-before-suspend": "kill"}
    with pytest.raises(ValueError, match="unknown failpoint"):
        failpoints.parse(["budget-before-suspnd=kill"])
    with pytest.raises(ValueError, match="unknown action"):
        failpoints.parse(["budget-before-suspend=panic"])


def test_no_failpoint_does_anything_unless_armed() -> None:
    """Every known point, hit in a process where none is armed: the process lives on
    (in a child, so a failpoint that did fire could not take the test run with it)."""
    code = (
        "from trainwarden import failpoints\n"
        "failpoints.configure({})\n"
        "for point in sorted(failpoints.POINTS):\n"
        "    failpoints.hit(point)\n"
        "print(len(failpoints.POINTS), 'hit', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=os.environ
    )
    assert (done.returncode, done.stdout.split()[1:]) == (0, ["hit"]), done.stderr
    assert int(done.stdout.split()[0]) == len(failpoints.POINTS)


def test_an_armed_failpoint_sigkills_the_process() -> None:
    code = (
        "from trainwarden import failpoints\n"
        "failpoints.configure({'budget-before-record': 'kill'})\n"
        "failpoints.hit('budget-before-suspend')\n"
        "print('past the unarmed one', flush=True)\n"
        "failpoints.hit('budget-before-record')\n"
        "print('never')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=os.environ
    )
    assert done.returncode == -signal.SIGKILL
    assert "past the unarmed one" in done.stdout
    assert "never" not in done.stdout


def test_the_command_line_refuses_an_unknown_failpoint() -> None:
    from trainwarden.cli import main

    assert main(["run", "--failpoint", "nowhere=kill"]) == 2
