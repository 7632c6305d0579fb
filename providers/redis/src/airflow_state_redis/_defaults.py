"""
The defaults of the ``[state_redis]`` options, apart from the code that uses them: the provider info
shows them in ``airflow config list``, and every Airflow process reads that info at start-up, so
this module imports nothing (not redis-py).
"""

from __future__ import annotations

DEFAULT_KEY_PREFIX = "airflow:state"
#: Task state outlives any sensible retry window, then goes with no cascade needed.
DEFAULT_TASK_TTL_SECONDS = 30 * 24 * 60 * 60
#: Attempts after the first on a connection error or timeout (and, on a cluster, on a slot that
#: moved or a cluster that is down): with the backoff in ``_config`` they cover about 10 s, long
#: enough for a Sentinel or Cluster failover with the usual timeouts.
DEFAULT_RETRIES = 8
DEFAULT_WAIT_TIMEOUT_MS = 1000
