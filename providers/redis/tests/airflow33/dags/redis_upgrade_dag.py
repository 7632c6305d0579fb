"""
A DAG that runs on Airflow 3.2 and on 3.3: on 3.2 (where the upgrade test creates the runs) `watch`
stores a job id through this package's task state, in Redis; on 3.3 it reads that key through
Airflow's own ``context["task_state_store"]``, writes one, and reports what it read to
$STATE_UPGRADE_OUT.
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
        if store is None:  # Airflow 3.2, before the upgrade
            from airflow_task_state import task_state

            task_state.set("remote_job_id", "app_001")
            return
        out = os.environ.get("STATE_UPGRADE_OUT")
        if out:
            store.set("written_on_33", {"by": "context['task_state_store']"})
            Path(out).write_text(json.dumps({"remote_job_id": store.get("remote_job_id")}))

    @task
    def shard(x: int) -> int:
        return x

    watch()
    shard.expand(x=[0, 1])


redis_upgrade()
