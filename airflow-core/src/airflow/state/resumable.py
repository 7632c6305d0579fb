"""``airflow.state.resumable``, the import path operators use: the mixins live on the worker side."""

from __future__ import annotations

from airflow.state.worker.resumable import (
    DeferrableResumableJobMixin,
    JobStatus,
    ResumableJobBase,
    ResumableJobMixin,
    ResumeAction,
    ResumeDecision,
)

__all__ = [
    "DeferrableResumableJobMixin",
    "JobStatus",
    "ResumableJobBase",
    "ResumableJobMixin",
    "ResumeAction",
    "ResumeDecision",
]
