"""The errors only the task side raises, beside those of :mod:`airflow.state.exceptions`."""

from __future__ import annotations

from airflow.state.exceptions import StateError


class StateUnsupportedError(StateError, NotImplementedError):
    """
    The configured state backend cannot do what the task asked (the server answered 501
    ``unsupported``): versions (``get_versioned``, ``if_version``, ``update``), expiry (``ttl``)
    or increments. The message names the backend and the capability; use a backend that supports
    it (the metastore and Redis backends support all of them) or do without the option.
    """
