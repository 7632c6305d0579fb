"""``airflow.state.resumable``, the import path operators use: the mixin lives on the worker side."""

from __future__ import annotations

from airflow.state.worker.resumable import JobStatus, ResumableJobMixin

__all__ = ["JobStatus", "ResumableJobMixin"]
