"""
The shim around a private function of Airflow's task runner (airflow_task_state.worker.task_runner_shim):
these tests fail, naming the shim, on the first Airflow release that renames the function, changes
its signature, stops building the rendered fields it sends with it, or stops redacting secrets.
"""

from __future__ import annotations

import ast
import inspect

import pytest
from airflow.sdk import BaseOperator
from airflow_task_state.worker import task_runner_shim

# Runs in the SQLite pass only: the task runner's code does not depend on the metadata database.
pytestmark = pytest.mark.any_database

SHIM = "airflow_task_state.worker.task_runner_shim"


def _task_runner():
    from airflow.sdk.execution_time import task_runner

    return task_runner


def test_the_task_runner_still_has_the_function_the_shim_calls():
    name = task_runner_shim._PRIVATE_NAME
    serialize = getattr(_task_runner(), name, None)
    assert callable(serialize), (
        f"{SHIM}: Airflow's task runner has no {name}() any more; find what it now sends as the "
        "rendered fields (SetRenderedFields) and call that instead"
    )
    parameters = list(inspect.signature(serialize).parameters)
    assert parameters == ["task"], f"{SHIM}: {name}() now takes {parameters}, not (task)"


def test_the_task_runner_sends_as_rendered_fields_what_that_function_returns():
    """Each SetRenderedFields the task runner sends holds the function's answer, and nothing else."""
    name = task_runner_shim._PRIVATE_NAME
    tree = ast.parse(inspect.getsource(_task_runner()))
    sent = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        # Names bound, in this function, to what the private function returned.
        bound = {
            node.target.id if isinstance(node, ast.NamedExpr) else node.targets[0].id
            for node in ast.walk(function)
            if isinstance(node, ast.NamedExpr | ast.Assign)
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == name
            and isinstance(node.target if isinstance(node, ast.NamedExpr) else node.targets[0], ast.Name)
        }
        for call in ast.walk(function):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "SetRenderedFields":
                [fields] = [keyword.value for keyword in call.keywords if keyword.arg == "rendered_fields"]
                direct = isinstance(fields, ast.Call) and getattr(fields.func, "id", None) == name
                through = isinstance(fields, ast.Name) and fields.id in bound
                sent.append((function.name, direct or through))
    assert sent, f"{SHIM}: Airflow's task runner no longer sends SetRenderedFields itself"
    assert all(built for _, built in sent), (
        f"{SHIM}: the task runner builds rendered fields without {name}() in "
        f"{[where for where, built in sent if not built]}: the handshake's rewrite would differ from them"
    )


class _Templated(BaseOperator):
    template_fields = ("command", "env", "args")

    def __init__(self, *, command: str, env: dict, args: tuple, **kwargs) -> None:
        super().__init__(**kwargs)
        self.command, self.env, self.args = command, env, args


def test_the_rendered_fields_are_json_with_secrets_redacted():
    """What the handshake relies on: the fields as the UI shows them, never a masked secret."""
    from airflow.sdk.log import mask_secret

    secret = "a-task-shim-secret-5e3f"
    mask_secret(secret)
    task = _Templated(
        task_id="templated", command=f"run --token {secret}", env={"B": "2", "A": secret}, args=(1, 2)
    )

    fields = task_runner_shim.rendered_fields(task)

    assert secret not in repr(fields), (
        f"{SHIM}: the task runner's function no longer redacts secrets: {fields}"
    )
    assert fields == {"command": "run --token ***", "env": {"A": "***", "B": "2"}, "args": [1, 2]}, (
        f"{SHIM}: the task runner's function serializes rendered fields differently now: {fields}"
    )


def test_the_task_runner_writes_the_rendered_fields_before_the_listeners_running_hook():
    """
    The proof rides on the task runner's own write (send_along): the listener takes it as written when
    its running hook comes, which holds only if the task runner sends the fields before that hook.
    """
    from airflow.sdk.execution_time.task_runner import _prepare

    source = inspect.getsource(_prepare)
    sent, hook = source.find("SetRenderedFields("), source.find("on_task_instance_running(")
    assert -1 < sent < hook, (
        f"{SHIM}: the task runner's _prepare no longer writes the rendered fields before it calls the "
        "listeners' on_task_instance_running: the first state call must then write the proof itself"
    )


def test_fields_sent_along_go_with_every_write_of_rendered_fields_and_alone_only_when_asked(monkeypatch):
    task_runner = _task_runner()
    # Whatever the test does to the task runner's module is undone after it.
    monkeypatch.setattr(
        task_runner, task_runner_shim._PRIVATE_NAME, getattr(task_runner, task_runner_shim._PRIVATE_NAME)
    )
    monkeypatch.setattr(task_runner_shim, "_airflows_own", None)
    task_runner_shim.send_along(lambda task: {"extra": task.task_id})

    templated = _Templated(task_id="templated", command="run", env={}, args=())
    sent = getattr(task_runner, task_runner_shim._PRIVATE_NAME)(templated)
    assert sent == {"command": "run", "env": {}, "args": [], "extra": "templated"}
    # What the handshake restores as the try ends: the task runner's own fields, without the extra.
    assert task_runner_shim.rendered_fields(templated) == {"command": "run", "env": {}, "args": []}
    # A task without template fields: the task runner writes nothing, and nothing is added.
    assert getattr(task_runner, task_runner_shim._PRIVATE_NAME)(BaseOperator(task_id="plain")) == {}

    # Unless the caller says the write would be made anyway: then its fields go alone, and only while
    # it says so (the handshake: while the accessors are imported).
    setattr(task_runner, task_runner_shim._PRIVATE_NAME, task_runner_shim._airflows_own)
    monkeypatch.setattr(task_runner_shim, "_airflows_own", None)
    imported = [True]
    task_runner_shim.send_along(lambda task: {"extra": task.task_id}, alone=lambda: imported[0])
    sent_for = getattr(task_runner, task_runner_shim._PRIVATE_NAME)
    assert sent_for(BaseOperator(task_id="plain")) == {"extra": "plain"}
    assert sent_for(templated) == {"command": "run", "env": {}, "args": [], "extra": "templated"}
    imported[0] = False
    assert sent_for(BaseOperator(task_id="plain")) == {}

    def failing(task):
        raise RuntimeError("a bug of ours")

    setattr(task_runner, task_runner_shim._PRIVATE_NAME, task_runner_shim._airflows_own)
    monkeypatch.setattr(task_runner_shim, "_airflows_own", None)
    task_runner_shim.send_along(failing)
    # Never the task's failure: its own fields go as they are.
    assert getattr(task_runner, task_runner_shim._PRIVATE_NAME)(templated) == {
        "command": "run",
        "env": {},
        "args": [],
    }
