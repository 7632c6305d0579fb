"""
The task process's side of a try starting and ending: an Airflow listener, registered by the state
plugin, whose hooks Airflow's task runner calls in the task process itself.

As a task process starts, it has the handshake's proof ride on the rendered fields the task runner
writes as the try starts. As the try starts it draws the try's handshake verifier, if that write did
not (so that the processes the task forks share it), and starts the handshake in the background when
the task will need a credential (on Airflow 3.3, a task that sets ``keep_task_state`` records its
choice first, before its code runs, if the proof did not ride along). As the try
ends it commits (success) or drops the staged writes, clears the task's state on success if asked,
and takes the proof out of the rendered fields. The success hook runs after the supervisor has
reported the success, so the API server commits and clears only because the try has succeeded;
Airflow also calls it in the API server when a task instance is marked successful by hand, which is
not a try succeeding: nothing is done then.

A listener must never fail the task: anything that goes wrong is logged, and the state stays.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pluggy

from airflow_task_state import config
from airflow_task_state.airflow_line import AIRFLOW_HAS_STATE_STORE
from airflow_task_state.exceptions import StateOutcomeUnknownError
from airflow_task_state.keep_choice import TASK_ATTRIBUTE
from airflow_task_state.protocol import TASK_SUCCEEDED_PATH
from airflow_task_state.worker import handshake, staging
from airflow_task_state.worker.client import StateClient, start_handshake

log = logging.getLogger(__name__)
hookimpl = pluggy.HookimplMarker("airflow")

#: The attribute a task (an operator class, or one task in the DAG file) sets to opt in or out.
OPT_IN_ATTRIBUTE = "clear_task_state_on_success"


def wants_clear(task: Any) -> bool:
    """Whether *task*'s state should go when it succeeds: its own attribute, else the configuration."""
    chosen = getattr(task, OPT_IN_ATTRIBUTE, None)
    if isinstance(chosen, bool):
        return chosen
    if chosen is not None:
        log.warning(
            "%s.%s is %r, not True or False; following [state] clear_on_success instead",
            getattr(task, "task_id", task),
            OPT_IN_ATTRIBUTE,
            chosen,
        )
    return config.clear_on_success()


def _in_task_process(task_instance: Any) -> bool:
    # The task runner is imported in every task process; the API server has no reason to load it.
    runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    return runner is not None and isinstance(task_instance, runner.RuntimeTaskInstance)


@hookimpl
def on_starting(component: Any) -> None:
    runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    if runner is not None and isinstance(component, getattr(runner, "TaskRunnerMarker", ())):
        with _logged_if_failing(
            logging.WARNING, "Could not prepare the state handshake; the first state call will write it"
        ):
            handshake.ride_along()


@hookimpl
def on_task_instance_running(previous_state: Any, task_instance: Any) -> None:
    if not _in_task_process(task_instance):
        return
    with _logged_if_failing(
        logging.WARNING, "Could not prepare the state handshake; the first state call will"
    ):
        staging.begin(task_instance)
        handshake.prepare(task_instance)
        if AIRFLOW_HAS_STATE_STORE and getattr(task_instance.task, TASK_ATTRIBUTE, None) is not None:
            # Airflow 3.3's own accessors may touch state before the handshake below records the
            # task's keep_task_state, and the API server would discard by the deployment's default.
            handshake.write_proof(task_instance)
        clears = wants_clear(task_instance.task)
        if clears or handshake.ACCESSORS_MODULE in sys.modules:
            start_handshake(task_instance, credential=clears)


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    _try_ended(task_instance, succeeded=True)


@hookimpl
def on_task_instance_failed(previous_state: Any, task_instance: Any, error: Any) -> None:
    _try_ended(task_instance)


@hookimpl
def on_task_instance_skipped(previous_state: Any, task_instance: Any) -> None:
    _try_ended(task_instance)


def _try_ended(task_instance: Any, *, succeeded: bool = False) -> None:
    if not _in_task_process(task_instance):
        return
    task_id = getattr(task_instance, "task_id", task_instance)
    if succeeded:
        # First the staged writes, then the clear a task may ask for: a clear on success empties
        # the task state the commit wrote too (asset state stays), as if they had been written directly.
        try:
            if count := staging.commit(task_instance):
                log.info("Committed %d staged state write(s) of %s after its success", count, task_id)
        except StateOutcomeUnknownError:
            log.error(
                "Could not commit the staged state writes of %s for certain after its success: the API "
                "server may have applied them, all or none (a commit is atomic); read the keys to find "
                "out (the try succeeded all the same)",
                task_id,
                exc_info=True,
            )
        except Exception:
            log.error(
                "Could not commit the staged state writes of %s after its success: NONE of them was "
                "applied (the try succeeded all the same; the next run starts from the state as it was)",
                task_id,
                exc_info=True,
            )
        with _logged_if_failing(
            logging.WARNING,
            "Could not clear the task state of %s after its success; the task succeeded all the same, "
            "and its state stays (remove it with `airflow state clear`)",
            task_id,
        ):
            if wants_clear(task_instance.task):
                client = StateClient(task_instance)
                client.request("POST", TASK_SUCCEEDED_PATH.format(task_instance_id=client.ti_id))
                log.info("Cleared the task state of %s after its success", task_id)
    else:
        with _logged_if_failing(
            logging.WARNING, "Could not drop the staged state writes; they are never applied"
        ):
            if count := staging.drop(task_instance):
                log.info(
                    "Dropped %d staged state write(s) of %s: its try did not succeed, so none is applied",
                    count,
                    task_id,
                )
    try:
        handshake.withdraw(task_instance)
    except Exception:
        log.warning("Could not remove the state handshake's proof from the rendered fields", exc_info=True)


@contextlib.contextmanager
def _logged_if_failing(level: int, message: str, *args: Any) -> Iterator[None]:
    try:
        yield
    except Exception:
        log.log(level, message, *args, exc_info=True)
