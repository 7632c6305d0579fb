"""
Run by Airflow 3.3's interpreter: writes one task-state key through Airflow 3.3's own configured
backend, as 3.3 code would (value as ``json.dumps`` text, like its Execution API), so the test can
make a key conflict with what the upgrade command wants to move.

Arguments: dag_id run_id task_id map_index key value_json
"""

from __future__ import annotations

import json
import sys

from airflow_task_state import TaskScope, get_state_backend


def main(dag_id: str, run_id: str, task_id: str, map_index: str, key: str, value_json: str) -> None:
    scope = TaskScope(dag_id, run_id, task_id, int(map_index))
    get_state_backend().set(scope, key, json.dumps(json.loads(value_json)))


if __name__ == "__main__":
    main(*sys.argv[1:])
