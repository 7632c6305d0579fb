"""The Celery deployment's smoke DAG: its task records where it ran (tests/celery_worker)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pendulum
import psutil
from airflow.sdk import dag, get_current_context, task


@dag(dag_id="celery_smoke", schedule=None, start_date=pendulum.datetime(2024, 1, 1), catchup=False)
def celery_smoke():
    @task
    def where_am_i():
        me = psutil.Process()
        marker = {
            "pid": me.pid,
            "ancestors": [parent.pid for parent in me.parents()],
            "airflow_variables": sorted(k for k in os.environ if k.startswith("AIRFLOW")),
        }
        run_id = get_current_context()["run_id"]
        Path(os.environ["CELERY_SMOKE_MARKERS"], f"{run_id}.json").write_text(json.dumps(marker))
        return "ran"

    where_am_i()


celery_smoke()
