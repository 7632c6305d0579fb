"""The reference backend's own promises, beyond the kit: listing while others write."""

from __future__ import annotations

import sys
import threading

from airflow_shared.state import TaskScope
from airflow_shared.state.testing import MemoryStateBackend


def test_keys_can_be_listed_while_other_threads_write():
    backend = MemoryStateBackend()
    listed = TaskScope("dag", "run", "task", 0, dag_run_uid="uid-1")
    backend.set(listed, "mine", "v")
    # Enough entries that one listing spans many thread switches.
    for n in range(2000):
        backend.set(TaskScope("dag", "run", "task", n + 1, dag_run_uid="uid-1"), "k", "v")

    stop = threading.Event()
    errors: list[BaseException] = []

    def write(writer: int) -> None:
        n = 0
        try:
            while not stop.is_set():
                n += 1
                backend.set(TaskScope("dag", "run", f"writer_{writer}", n, dag_run_uid="uid-1"), "k", "v")
        except BaseException as error:  # re-raised in the test thread
            errors.append(error)

    def list_keys() -> None:
        try:
            for _ in range(50):
                assert backend.keys(listed) == ["mine"]
        except BaseException as error:  # re-raised in the test thread
            errors.append(error)

    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, to make the race likely
    try:
        writers = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        lister = threading.Thread(target=list_keys)
        for thread in (*writers, lister):
            thread.start()
        lister.join()
        stop.set()
        for thread in writers:
            thread.join()
    finally:
        sys.setswitchinterval(switch_interval)
    assert errors == []
