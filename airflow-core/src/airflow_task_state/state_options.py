"""
The ``[state]`` options as Airflow's config.yml describes them, and the one place their defaults are
written down: the provider info declares them to Airflow, and :mod:`airflow_task_state.config` falls
back to them when Airflow has not loaded them yet.

The provider info imports this while ``airflow.configuration`` is still initialising: it imports
nothing but the standard library.
"""

from __future__ import annotations

from typing import Any


def _option(description: str, *, since: str = "0.1.0", kind: str = "string", **more: Any) -> dict[str, Any]:
    """One option as Airflow's config.yml describes it; *more*: ``default``, ``example``, ``sensitive``."""
    return {
        "description": description,
        "version_added": since,
        "type": kind,
        "example": None,
        "default": None,
        **more,
    }


# Descriptions are written as Airflow writes its own (config.yml's ``description: |`` blocks):
# short lines, so ``airflow config list --include-descriptions`` reads the same for both.
STATE_OPTIONS: dict[str, dict[str, Any]] = {
    "backend": _option(
        "Import path of the class that stores task and asset state. It must be a subclass\n"
        "of ``airflow_shared.state.BaseStateBackend``; the default keeps state in the\n"
        "Airflow metadata database (tables ``task_state`` and ``asset_state``).\n",
        default="airflow_task_state.metastore.MetastoreStateBackend",
        example="my_company.state.RedisStateBackend",
    ),
    "session_key": _option(
        "Key that signs the credentials task processes get from the state API after proving\n"
        "which task instance they run. Read on API servers only: never set it on workers.\n"
        "Not set: derived from the key file at ``[api_auth] jwt_private_key_path``, or else\n"
        "from ``[api_auth] jwt_secret``. Set it (the same value, 32 characters or more, on\n"
        "every API server) when API servers hold neither, e.g. when they validate Airflow's\n"
        "tokens with ``[api_auth] trusted_jwks_url``.\n",
        sensitive=True,
    ),
    "previous_session_key": _option(
        "The key being rotated out: credentials it signed are still accepted, none are signed\n"
        "with it. To rotate, move the old key (or the old ``[api_auth] jwt_secret`` when the\n"
        "key is derived from it) here, set the new one, restart the API servers, and remove\n"
        "this after ten minutes, the longest a credential lives.\n",
        sensitive=True,
    ),
    "api_url": _option(
        "Base URL of the state API as workers reach it. Not set: beside Airflow's Execution API,\n"
        "found as Airflow's task processes find it: ``[core] execution_api_server_url`` with\n"
        "``/state`` in place of its trailing ``/execution``; if that is not set either,\n"
        "``[api] base_url`` plus ``/state``, on ``http://localhost:8080`` when base_url is\n"
        "relative or not set (as with ``airflow standalone``). Set it only when workers reach\n"
        "the state API by another address than the Execution API.\n",
        example="http://airflow-api-server:8080/state",
    ),
    "max_value_bytes": _option(
        "Largest value, as JSON text in UTF-8, that task code may store; checked in the task\n"
        "and again on the API server.\n",
        kind="integer",
        default="65536",
    ),
    "object_storage_path": _option(
        "Where values larger than ``max_value_bytes``, and files task code stores with\n"
        "``set_file``, are kept: an Airflow ``ObjectStoragePath`` URL (``s3://``, ``gs://``,\n"
        "``abfs://``, ``file://``), with an Airflow connection as ``s3://conn_id@bucket/prefix``.\n"
        "The store keeps a small reference to each object. Empty: off, and larger values are\n"
        "refused. Needed on workers, and wherever ``airflow state clean`` runs; on API servers\n"
        "only to let operators fetch large values. See docs/large-values.md.\n",
        since="0.9.0",
        default="",
        example="s3://aws_default@my-bucket/airflow-state",
    ),
    "object_grace_period": _option(
        "How long an object in ``object_storage_path`` that no key references is kept before\n"
        "``airflow state clean`` removes it; a write must finish its upload and store its\n"
        "reference within half of it, else the reference is refused. Longer than your longest\n"
        "upload; the same on every component. A duration: ``90m``, ``12h``, ``2d``.\n",
        since="0.9.0",
        default="1d",
    ),
    "max_batch_bytes": _option(
        "Largest request body of a batch write (``task_state.set_many``), in bytes; each value\n"
        "in it is still limited by ``max_value_bytes``. Checked in the task and again on the\n"
        "API server, which never reads more of a body than this.\n",
        since="0.4.0",
        kind="integer",
        default="4194304",
    ),
    "default_task_retention": _option(
        "How long task state lives after each write unless the write gives its own ``ttl``:\n"
        "a number of days, or a duration such as ``12h``, ``90m``, ``7d`` or ``2w``.\n"
        "``0`` keeps task state until its dag run is deleted. Asset state never expires unless\n"
        "a write asks for it. Expired keys are never returned; ``airflow state clean`` removes\n"
        "them from storage.\n",
        since="0.2.0",
        default="30",
        example="7d",
    ),
    "database_pool_size": _option(
        "Database connections the state engine keeps open in each process: its own pool, not\n"
        "Airflow's, opened only as concurrent state calls need them. The default matches the\n"
        "threads an API server runs its routes on (40, anyio's default), so under load no\n"
        "state call opens a connection of its own; with Airflow's pool size (5) an API server\n"
        "under load opened and closed one for most requests. ``[database]\n"
        "sql_alchemy_max_overflow`` more may open for a moment, as in Airflow's pool. Lower it\n"
        "when many API server processes share a small ``max_connections``. Not used with\n"
        "SQLite or with Airflow's pool disabled.\n",
        since="0.5.0",
        kind="integer",
        default="40",
    ),
    "freeze_gc_after_startup": _option(
        "Freeze the API server process's heap (``gc.freeze()``): collected and frozen once the\n"
        "state API is built as the API server starts, and frozen again, without a collection, at\n"
        "the state API's first request, so that what Airflow built for its own first requests is\n"
        "frozen too. The objects of start-up are then never scanned again by Python's garbage\n"
        "collector, whose full collections of an API server's heap pause every thread, Airflow's\n"
        "routes included, for up to seconds. Objects made later are collected as before; what\n"
        "start-up made and later drops stays (the dag processor of Airflow freezes its heap the\n"
        "same way). False leaves the collector of the API server process as Python has it.\n",
        since="0.5.0",
        kind="boolean",
        default="True",
    ),
    "serve_task_requests_first": _option(
        "Serve task code's state requests (its credentials, its own and its assets' state) before\n"
        "Airflow's middleware on the API server: its HTTP access log, GZip and the JWT refresh\n"
        "of UI sessions, which serve none of them, cost a state request more than its own work.\n"
        "The state API's operator routes and UI, and every route of Airflow, keep Airflow's\n"
        "middleware. False sends task requests through it too (they then appear in Airflow's\n"
        "HTTP access log).\n",
        since="0.9.0",
        kind="boolean",
        default="True",
    ),
    "event_loop_statements": _option(
        "On an API server with PostgreSQL, run the statements of task code's plain get or set of\n"
        "one key on the server's event loop through asyncpg, built as Airflow builds its async\n"
        "engine (``[database] sql_alchemy_conn_async`` and ``sql_alchemy_connect_args_async``):\n"
        "no hop to a worker thread, and each statement prepared once per connection. Behind\n"
        "PgBouncer in transaction mode before 1.21, set ``statement_cache_size`` to 0 in\n"
        "``sql_alchemy_connect_args_async``, as Airflow's own async engine needs. False: every\n"
        "statement runs in a worker thread through the sync driver. Other databases always do.\n",
        since="0.9.0",
        kind="boolean",
        default="True",
    ),
    "clear_on_success": _option(
        "Clear a task instance's state when it succeeds, for every task. Off: only tasks that\n"
        "set ``clear_task_state_on_success = True`` are cleared; a task can also set it to\n"
        "``False`` to keep its state when this is on.\n",
        since="0.2.0",
        kind="boolean",
        default="False",
    ),
    "keep_task_state": _option(
        "What a task instance's next try finds after someone clears it (from the UI, the REST\n"
        "API, ``airflow tasks clear``, a dag run clear or as a downstream task), for every task\n"
        "that does not set ``keep_task_state`` itself. ``after_failure``: the state of a try that\n"
        "failed is kept (the next try reconnects to the job it stored), the state written by a\n"
        "try that succeeded is discarded (the next try starts afresh). ``always``: kept on every\n"
        "clear. ``never``: discarded on every clear. Retries always keep it; keys written by\n"
        "operators (UI, CLI, REST API) are never discarded.\n",
        since="0.6.0",
        default="after_failure",
        example="never",
    ),
}
