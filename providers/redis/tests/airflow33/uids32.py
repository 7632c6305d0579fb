"""Run with Airflow 3.2 (this repository's environment): print {run_id: dag_run_uid} of a DAG's runs."""

from __future__ import annotations

import json
import sys

from airflow.models.dagrun import DagRun
from airflow.utils.session import create_session
from airflow_task_state.airflow_db.run_identity import uid_of_run
from sqlalchemy import select

dag_id = sys.argv[1]
with create_session() as session:
    run_ids = session.scalars(select(DagRun.run_id).where(DagRun.dag_id == dag_id)).all()
    print(json.dumps({run_id: uid_of_run(dag_id, run_id, session) for run_id in run_ids}))
