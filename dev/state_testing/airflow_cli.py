"""Running real `airflow` commands, in a new process, with this process's environment (the test run's)."""

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
