"""
A deferrable resumable job whose id is a tuple (e.g. ``(cluster, job_number)``) completes once
its job succeeded. Task state gives the id back as a list (JSON has no tuples), while
the trigger's event keeps the tuple (Airflow serialises tuples in trigger events), so
``execute_complete`` compares them as task state keeps them, as JSON: ``("c", 42)`` is ``["c",
42]`` there, and another id still is another job.

Task state is stood in for by a dict holding what the state API would store: the codec's text.
"""

from __future__ import annotations

import logging

import pytest
from airflow.serialization.serialized_objects import BaseSerialization
from airflow_task_state import codec
from airflow_task_state.resumable import DeferrableResumableJobMixin
from airflow_task_state.worker import resumable

pytestmark = pytest.mark.any_database


class _StoredAsJson:
    """task_state as the state API keeps it: each value stored as its JSON text."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def set(self, key, value, **_):
        self.texts[key] = codec.encode(value)

    def get(self, key, default=None):
        return codec.decode(self.texts[key]) if key in self.texts else default


class _ClusterJob(DeferrableResumableJobMixin):
    log = logging.getLogger("cluster-job")

    def submit_job(self, context):
        return ("cluster-a", 42)

    def job_trigger(self, job_id, context):
        self.watched = job_id
        return object()

    def defer(self, *, trigger, method_name, timeout):
        self.deferred = True


def test_a_tuple_job_id_that_succeeded_completes(monkeypatch):
    monkeypatch.setattr(resumable, "task_state", _StoredAsJson())
    operator = _ClusterJob()
    operator.execute({})
    assert operator.deferred
    # The trigger reports on the job it was given, and its event crosses Airflow's serialisation.
    event = BaseSerialization.deserialize(
        BaseSerialization.serialize({"status": "succeeded", "job_id": operator.watched})
    )
    result = operator.execute_complete({}, event)
    assert list(result) == ["cluster-a", 42]
    # A report on another job is still refused, saying why.
    other = BaseSerialization.deserialize(
        BaseSerialization.serialize({"status": "succeeded", "job_id": ("cluster-b", 42)})
    )
    with pytest.raises(RuntimeError, match="the trigger reported on job"):
        operator.execute_complete({}, other)
