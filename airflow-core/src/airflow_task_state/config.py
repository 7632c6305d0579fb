"""
Every setting this package reads: the ``[state]`` options, here and only here, each by one small
function, and the ``[workers]`` settings the task's client shares with Airflow's own Execution API
calls (retries, request timeout). The ``[state]`` defaults are written once, in
``state_options.STATE_OPTIONS``: a process that reads configuration before Airflow has loaded the
providers' defaults falls back to that same dict. Task processes import this module: it imports
nothing heavier than ``airflow.configuration``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping
from datetime import timedelta
from functools import cache
from typing import Any, TypeVar

from airflow.configuration import conf

from airflow_task_state.durations import parse_duration
from airflow_task_state.exceptions import StateConfigurationError
from airflow_task_state.keep_choice import KeepTaskState, parse_keep_choice
from airflow_task_state.protocol import URL_PREFIX
from airflow_task_state.state_options import STATE_OPTIONS

SECTION = "state"

_T = TypeVar("_T")
# What each option read last, with the environment variables it was read under.
_read: dict[tuple[str, str], tuple[tuple[object, ...], object]] = {}
# The names of each option's environment variables, as os.environ's own dict keys them.
_names: dict[tuple[str, str], tuple[object, ...]] = {}
# os.environ's own dict (bytes on POSIX), which its writes keep current: three lookups in it take
# 0.1 µs, through os.environ's mapping 2.8 µs, and a state request on an API server reads up to four
# options. Other Pythons may keep no such dict: then through the mapping.
_ENVIRON_DATA: Mapping[Any, Any] = getattr(os.environ, "_data", os.environ)
_ENVIRON_KEY: Callable[[str], Any] = getattr(os.environ, "encodekey", str)


def _cached(section: str, option: str, read: Callable[[], _T]) -> _T:
    """
    *read*() (a read of ``[section] option``), once per process while the option's environment
    variables stay as they are: Airflow's ``conf.get`` takes 15 to 70 µs, and every state call read
    a few options (the API's URL, the retries; the body's limit on the server). A process's
    configuration file does not change while it runs; its environment can (a task setting variables,
    tests).
    """
    names = _names.get((section, option))
    if names is None:
        name = f"AIRFLOW__{section.upper()}__{option.upper()}"
        names = _names[(section, option)] = tuple(_ENVIRON_KEY(name + end) for end in ("", "_CMD", "_SECRET"))
    environment = tuple(map(_ENVIRON_DATA.get, names))
    known = _read.get((section, option))
    if known is not None and known[0] == environment:
        return known[1]  # type: ignore[return-value]
    value = read()
    _read[(section, option)] = (environment, value)
    return value


def _state_option(option: str) -> str:
    """``[state] option`` as text; its STATE_OPTIONS default when Airflow has not loaded it."""
    value = _cached(
        SECTION, option, lambda: conf.get(SECTION, option, fallback=STATE_OPTIONS[option]["default"])
    )
    return "" if value is None else str(value)


#: Where the classes of airflow-task-state 0.7 and earlier lived: Airflow 3.3 has a package of that
#: name, so a configured path into it names the same class in ``airflow_task_state``.
LEGACY_PACKAGE = "airflow.state."


def backend_path() -> str:
    """``[state] backend``: the import path of the backend class (empty when set empty)."""
    path = _state_option("backend").strip()
    if path.startswith(LEGACY_PACKAGE):
        return "airflow_task_state." + path.removeprefix(LEGACY_PACKAGE)
    return path


# The _as_* parsers below are cached per text: a set reads several options, and an option's text
# changes only with its environment. A refusal is not cached: it is raised again each time.


def _positive_int(option: str) -> int:
    return _as_positive_int(option, _state_option(option))


@cache
def _as_positive_int(option: str, text: str) -> int:
    text = text.strip()
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise StateConfigurationError(f"[state] {option} must be a positive integer, not {text!r}")
    return number


def max_value_bytes() -> int:
    return _positive_int("max_value_bytes")


def max_batch_bytes() -> int:
    return _positive_int("max_batch_bytes")


def database_pool_size() -> int:
    return _positive_int("database_pool_size")


def default_task_retention() -> timedelta | None:
    """``[state] default_task_retention``; ``None``: forever."""
    return _as_retention(_state_option("default_task_retention"))


@cache
def _as_retention(text: str) -> timedelta | None:
    text = text.strip()
    try:
        retention = parse_duration(text, bare_unit="d")
    except ValueError as error:
        raise StateConfigurationError(f"[state] default_task_retention: {error}") from None
    return retention or None


def _boolean(option: str) -> bool:
    return _as_boolean(option, _state_option(option))


@cache
def _as_boolean(option: str, text: str) -> bool:
    text = text.strip().lower()
    if text in ("true", "t", "1", "yes", "on"):
        return True
    if text in ("false", "f", "0", "no", "off", ""):
        return False
    raise StateConfigurationError(f"[state] {option} must be True or False, not {text!r}")


def object_storage_path() -> str:
    """``[state] object_storage_path``: where large values live (empty: off)."""
    return _state_option("object_storage_path").strip()


def object_grace_period() -> timedelta:
    """``[state] object_grace_period``: how long an unreferenced object is kept."""
    text = _state_option("object_grace_period").strip()
    try:
        grace = parse_duration(text, bare_unit="s")
    except ValueError as error:
        raise StateConfigurationError(f"[state] object_grace_period: {error}") from None
    if grace <= timedelta(0):
        raise StateConfigurationError(
            f"[state] object_grace_period must be longer than 0, not {text!r}: uploads finish in half of it"
        )
    return grace


def clear_on_success() -> bool:
    return _boolean("clear_on_success")


def keep_task_state() -> KeepTaskState:
    text = _state_option("keep_task_state")
    # Configuration is text: True and False as Airflow spells booleans.
    value = {"true": True, "false": False}.get(text.strip().lower(), text)
    try:
        return parse_keep_choice(value, "[state] keep_task_state")
    except ValueError as error:
        raise StateConfigurationError(str(error)) from None


def freeze_gc_after_startup() -> bool:
    return _boolean("freeze_gc_after_startup")


def serve_task_requests_first() -> bool:
    return _boolean("serve_task_requests_first")


def event_loop_statements() -> bool:
    return _boolean("event_loop_statements")


# --- the key that signs task credentials: API servers only -------------------------------------


def session_key() -> str:
    """``[state] session_key``: a dedicated credential key (empty: derived, see api.signing_keys)."""
    return _state_option("session_key")


def previous_session_key() -> str:
    return _state_option("previous_session_key")


def retired_api_secret_is_set() -> bool:
    """Whether ``[state] api_secret``, which earlier releases had on every worker, is still configured."""
    return bool(conf.get(SECTION, "api_secret", fallback=""))


# --- where workers reach the state API -----------------------------------------------------------


def api_url() -> str:
    """Where workers reach the state API: ``[state] api_url``, else beside Airflow's Execution API."""
    configured = _state_option("api_url").strip()
    return configured.rstrip("/") if configured else api_server_url() + URL_PREFIX


#: Where Airflow's task processes look for the API server when nothing says otherwise.
DEFAULT_API_SERVER = "http://localhost:8080"


def _text(section: str, option: str) -> str | None:
    return _cached(section, option, lambda: conf.get(section, option, fallback=""))


def api_server_url() -> str:
    """
    The API server as Airflow's own task processes find it (LocalExecutor, Celery and Kubernetes
    workers alike): ``[core] execution_api_server_url`` without its trailing ``/execution``; else
    ``[api] base_url``; a relative base_url, or none, is on ``http://localhost:8080``, which is what
    ``airflow standalone`` and a newcomer's ``airflow api-server`` serve.
    """
    execution = (_text("core", "execution_api_server_url") or "").strip().rstrip("/")
    if execution:
        return execution.removesuffix("/execution")
    # Airflow reads an unset base_url as "/"; an empty one (AIRFLOW__API__BASE_URL=) is unset too.
    base_url = (_text("api", "base_url") or "").strip() or "/"
    if base_url.startswith("/"):
        base_url = DEFAULT_API_SERVER + base_url
    return base_url.rstrip("/")


# --- the [workers] settings shared with Airflow's Execution API client ----------------------------
# Airflow's own options: their defaults come from Airflow's config.yml, loaded in every process.


def request_timeout() -> float:
    """``[workers] execution_api_timeout``: seconds an HTTP request to the API server may take."""
    return _workers_number("execution_api_timeout")


def _workers_number(option: str) -> float:
    return _cached("workers", option, lambda: conf.getfloat("workers", option))


class RetryPolicy:
    """
    ``[workers] execution_api_retries`` retries, waiting ``execution_api_retry_wait_min`` seconds and
    doubling up to ``execution_api_retry_wait_max`` (Airflow's defaults give up after about 31 s);
    each wait stretched by up to a quarter at random, so tasks do not all come back at once.
    """

    def __init__(self, retries: int, wait_min: float, wait_max: float) -> None:
        self.retries = max(retries, 0)
        self.wait_min = max(wait_min, 0.0)
        self.wait_max = max(wait_max, self.wait_min)

    @classmethod
    def from_config(cls) -> RetryPolicy:
        return cls(
            int(_workers_number("execution_api_retries")),
            _workers_number("execution_api_retry_wait_min"),
            _workers_number("execution_api_retry_wait_max"),
        )

    def wait(self, attempt: int) -> float:
        return min(self.wait_max, self.wait_min * 2**attempt) * random.uniform(1.0, 1.25)
