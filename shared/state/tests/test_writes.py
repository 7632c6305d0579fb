"""A StateWriter checks its own fields as it is built, so no backend is ever handed a bad one."""

from __future__ import annotations

import pytest
from airflow_shared.state import StateWriter, WriterKind

#: Writers that break the contract, each built when the test runs.
BAD_WRITERS = {
    "task-no-task-id": (lambda: StateWriter(WriterKind.TASK, "dag", "run", None, -1, 1), ValueError),
    "task-no-try": (lambda: StateWriter(WriterKind.TASK, "dag", "run", "task", -1, None), ValueError),
    "task-bad-index": (lambda: StateWriter(WriterKind.TASK, "dag", "run", "task", -2, 1), ValueError),
    "task-bool-index": (lambda: StateWriter(WriterKind.TASK, "dag", "run", "task", True, 1), TypeError),
    "api-dag-id": (lambda: StateWriter(WriterKind.API, dag_id="dag"), ValueError),
    "bad-kind": (lambda: StateWriter("operator"), ValueError),  # type: ignore[arg-type]
}


@pytest.mark.parametrize(("make_writer", "error"), BAD_WRITERS.values(), ids=BAD_WRITERS)
def test_a_writer_that_breaks_the_contract_cannot_be_built(make_writer, error):
    with pytest.raises(error):
        make_writer()
