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


def test_cleanup_refuses_arguments_that_make_no_sense():
    from datetime import UTC, datetime

    import pytest

    backend = MemoryStateBackend()
    with pytest.raises(ValueError, match="timezone-aware"):
        backend.cleanup(now=datetime(2030, 1, 1))
    with pytest.raises(TypeError, match="now"):
        backend.cleanup(now="2030-01-01")
    with pytest.raises(ValueError, match="updated_before"):
        backend.cleanup(now=datetime.now(UTC), updated_before=datetime(2030, 1, 1))
    for batch_size in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="batch_size"):
            backend.cleanup(now=datetime.now(UTC), batch_size=batch_size)


def test_capabilities_are_all_declared():
    assert MemoryStateBackend.supports_versions
    assert MemoryStateBackend.supports_expiry
    assert MemoryStateBackend.supports_increment
