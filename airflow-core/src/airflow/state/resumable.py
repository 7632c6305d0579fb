"""``airflow.state.resumable``, the import path operators use: the mixins live on the worker side."""

from __future__ import annotations

from airflow.state.worker.resumable import DeferrableResumableJobMixin as DeferrableResumableJobMixin
from airflow.state.worker.resumable import JobStatus as JobStatus
from airflow.state.worker.resumable import ResumableJobBase as ResumableJobBase
from airflow.state.worker.resumable import ResumableJobMixin as ResumableJobMixin
from airflow.state.worker.resumable import ResumeAction as ResumeAction
from airflow.state.worker.resumable import ResumeDecision as ResumeDecision
