"""``airflow_task_state.resumable``, the import path operators use: the mixins live on the worker side."""

from __future__ import annotations

from airflow_task_state.worker.resumable import DeferrableResumableJobMixin as DeferrableResumableJobMixin
from airflow_task_state.worker.resumable import JobStatus as JobStatus
from airflow_task_state.worker.resumable import ResumableJobBase as ResumableJobBase
from airflow_task_state.worker.resumable import ResumableJobMixin as ResumableJobMixin
from airflow_task_state.worker.resumable import ResumeAction as ResumeAction
from airflow_task_state.worker.resumable import ResumeDecision as ResumeDecision
