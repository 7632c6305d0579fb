"""
A newcomer's machine, for tests/test_install_from_wheels.py: a home folder of its own, a clone of
the repository whose ``dist/`` holds the wheels ``dev/build-wheels`` built, and terminals (bash)
that run the commands of docs/try-it.md as written, with nothing of the test run's environment:
no ``AIRFLOW_*`` variable, no virtualenv: ``HOME``, a system ``PATH``, and how the machine reaches
package indexes (CA bundles, proxies).

Two commands are played by uv, which installs what pip would, from its cache (a real pip would
download Airflow on every run): ``python3 -m venv DIR`` and ``pip``. ``dev/build-wheels`` in the
clone does nothing: the wheels are already in its ``dist/``.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

from state_testing.deployer_venv import REPO, _base_python, uv

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def _stand_ins() -> str:
    """Bash functions that stand in for pip and ``python3 -m venv``, defined before each command."""
    cache = subprocess.run([uv(), "cache", "dir"], capture_output=True, text=True, check=True).stdout.strip()
    # UV_COMPILE_BYTECODE: pip compiles what it installs, and uv does not by default.
    uv_command = f"UV_CACHE_DIR={cache} UV_COMPILE_BYTECODE=1 {uv()}"
    return (
        "python3() {\n"
        '    if [ "$#" = 3 ] && [ "$1" = -m ] && [ "$2" = venv ]; then\n'
        f'        {uv_command} venv -q --python {_base_python()} "$3"\n'
        "    else\n"
        '        command python3 "$@"\n'
        "    fi\n"
        "}\n"
        f'pip() {{ {uv_command} pip "$@"; }}\n'
    )


def _network_settings() -> dict[str, str]:
    """How this machine reaches package indexes (CA bundles, proxies): a newcomer's shell has them."""
    return {
        name: value
        for name, value in os.environ.items()
        if re.search(r"proxy|ssl_cert|ca_bundle|_ca_certs", name, re.IGNORECASE)
    }


class Terminal:
    """One terminal of the newcomer: commands run in it one after the other, keeping what they export."""

    def __init__(self, machine: NewcomerMachine) -> None:
        self.machine = machine
        self.env = {"HOME": str(machine.home), "PATH": SYSTEM_PATH, "LANG": "C.UTF-8", **_network_settings()}

    def run(self, code: str, *, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """Run *code* as typed here (any failing command fails it); its output, and its exports kept."""
        exported = self.machine.root / "exported"
        script = f"{self.machine.stand_ins}set -eo pipefail\n{code}\nenv -0 > {exported}\n"
        result = subprocess.run(
            ["bash", "-c", script],
            env=self.env,
            cwd=self.machine.clone,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if result.returncode != 0:
            raise AssertionError(
                f"exited {result.returncode}:\n{code}\n--- stdout\n{result.stdout[-4000:]}\n"
                f"--- stderr\n{result.stderr[-4000:]}"
            )
        pairs = exported.read_text().split("\0")
        self.env = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
        return result

    def start(self, code: str, log: Path) -> subprocess.Popen[bytes]:
        """Start *code* here and leave it running, in a process group of its own, output to *log*."""
        with log.open("wb") as output:
            return subprocess.Popen(
                ["bash", "-c", f"{self.machine.stand_ins}{code}"],
                env=self.env,
                cwd=self.machine.clone,
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )


class NewcomerMachine:
    """A home folder and a clone of the repository under *root*, the wheels of *dist* in the clone."""

    def __init__(self, root: Path, dist: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.clone = root / "clone"
        self.home.mkdir(parents=True)
        (self.clone / "dev").mkdir(parents=True)
        (self.clone / "dist").symlink_to(dist)
        (self.clone / "constraints").symlink_to(REPO / "constraints")
        build_wheels = self.clone / "dev" / "build-wheels"
        build_wheels.write_text("#!/bin/sh\n# The test ran dev/build-wheels already: see dist/.\n")
        build_wheels.chmod(0o755)
        self.stand_ins = _stand_ins()

    def terminal(self) -> Terminal:
        return Terminal(self)


def refuse_taken_ports(*ports: int) -> None:
    """Fail, saying which, if a port ``airflow standalone`` listens on is taken on this machine."""
    taken = []
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                taken.append(port)
    if taken:
        raise AssertionError(
            f"port {', '.join(map(str, taken))} is taken on this machine: `airflow standalone`, as "
            "docs/try-it.md starts it, listens on 8080 (the API server) and 8793 and 8794 (the "
            "scheduler's and the triggerer's logs). Stop what listens there (another run of this "
            "test, an Airflow of your own) and run it again."
        )


def wait_for_line(process: subprocess.Popen[bytes], log: Path, line: str, timeout: float) -> None:
    """Wait until *log* holds *line*; fail with the log's end if *process* ends or time runs out."""
    deadline = time.monotonic() + timeout
    while line.encode() not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            ended = process.returncode is not None
            what = f"exited {process.returncode}" if ended else f"not in {timeout:.0f} s"
            tail = log.read_bytes()[-6000:].decode(errors="replace")
            raise AssertionError(f"{line!r} never came ({what}); the end of its output:\n{tail}")
        time.sleep(1)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop *process* and everything it started (its process group), as closing its terminal would."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        process.wait(timeout=60)
        return
    deadline = time.monotonic() + 60
    # poll() reaps the group's leader: a zombie still counts as a member of its group.
    while process.poll() is None or _group_alive(process.pid):
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            break
        time.sleep(0.5)
    process.wait(timeout=60)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True
