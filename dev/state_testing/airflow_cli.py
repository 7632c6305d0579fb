"""Running real `airflow` commands (and other programs), in a new process, checking how they end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_airflow(
    *args: str, check: bool = True, timeout: float = 600, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a real `airflow` command in a new process, with the test run's environment."""
    airflow = Path(sys.executable).with_name("airflow")
    result = subprocess.run(
        [str(airflow), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ,
        input=input if input is not None else "",
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"`airflow {' '.join(args)}` exited {result.returncode}\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    return result


def run_checked(
    command: list[str | Path], *, env: dict[str, str], label: str, check: bool = True, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run *command* with exactly *env*; unless it succeeds (or not *check*), fail saying how it ended."""
    result = subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"{label}: `{' '.join(map(str, command))}` exited {result.returncode}\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    return result
