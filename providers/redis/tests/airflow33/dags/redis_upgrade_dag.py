"""
A DAG that runs on Airflow 3.2 and on 3.3: `watch` reports what 3.3's task state store holds.

On 3.2 (where the upgrade test creates the runs) `task_state_store` is not in the context and the
task does nothing; on 3.3 it writes what ``get("remote_job_id")`` returned to $STATE_UPGRADE_OUT.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import dag, get_current_context, task


@dag(schedule=None, start_date=datetime(2024, 1, 1), catchup=False)
def redis_upgrade():
    @task
    def watch() -> None:
        store = get_current_context().get("task_state_store")
        out = os.environ.get("STATE_UPGRADE_OUT")
        if store is not None and out:
            Path(out).write_text(json.dumps({"remote_job_id": store.get("remote_job_id")}))

    @task
    def shard(x: int) -> int:
        return x

    watch()
    shard.expand(x=[0, 1])


redis_upgrade()
