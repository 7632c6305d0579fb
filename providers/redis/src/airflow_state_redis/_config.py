"""
Where the backend finds the settings it was not given (Airflow builds it as ``backend_class()``):
``[state_redis] <name>`` when Airflow is importable, then (URL only) the connection named by
``redis_conn_id``, then ``AIRFLOW__STATE_REDIS__<NAME>``, then the default (docs/redis.md, "Configuration").
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from ._defaults import DEFAULT_KEY_PREFIX, DEFAULT_RETRIES, DEFAULT_TASK_TTL_SECONDS, DEFAULT_WAIT_TIMEOUT_MS
from ._errors import mask_url
from ._keys import validate_prefix

SECTION = "state_redis"

_URL_SCHEMES = ("redis://", "rediss://", "unix://")

#: ``[state_redis] mode``: what the URL (or the sentinels) point at.
MODES = ("standalone", "cluster", "sentinel")
#: The whole-number options of :class:`Topology`, each with its least value.
_COUNTS = {"wait_replicas": 0, "wait_timeout_ms": 1, "retries": 0}


class Unset(enum.Enum):
    """Marks a constructor argument that was not given (``None`` means "no expiry" for TTLs)."""

    UNSET = "UNSET"


UNSET = Unset.UNSET


@dataclass(frozen=True)
class RedisSettings:
    """The resolved settings; ``url_source`` says where the URL came from, for error messages."""

    url: str = field(repr=False)  # may hold a password
    url_source: str
    key_prefix: str
    task_ttl_seconds: int | None
    asset_ttl_seconds: int | None
    topology: Topology = field(default_factory=lambda: Topology())


@dataclass(frozen=True)
class Topology:
    """
    How the servers are laid out, and how hard a write is pushed to the replicas.

    ``sentinels`` are ``(host, port)`` pairs; ``sentinel_password`` is kept out of ``repr``.
    """

    mode: str = "standalone"
    sentinel_master: str | None = None
    sentinels: tuple[tuple[str, int], ...] = ()
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    wait_replicas: int = 0
    wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS
    retries: int = DEFAULT_RETRIES


def env_name(option: str) -> str:
    return f"AIRFLOW__{SECTION.upper()}__{option.upper()}"


def _airflow_option(option: str) -> str | None:
    """``[state_redis] <option>`` from Airflow's configuration, or None without Airflow."""
    try:
        from airflow.configuration import conf  # here: Airflow is optional, and heavy to import
    except ImportError:
        return None
    return _clean(conf.get(SECTION, option, fallback=None))


def _clean(value: object) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _lookup(option: str) -> tuple[str, str] | None:
    """Return ``(value, where it came from)`` for an option, or None when nothing sets it."""
    value = _airflow_option(option)
    if value is not None:
        return value, f"[{SECTION}] {option}"
    value = _clean(os.environ.get(env_name(option)))
    return None if value is None else (value, env_name(option))


def _fetch_connection(conn_id: str) -> Any:
    """The Airflow connection *conn_id*, through whichever ``BaseHook`` this Airflow provides."""
    try:
        # Imported here: Airflow is optional, and only a redis_conn_id needs it. The Task SDK's
        # hook works in task processes (through the supervisor) and elsewhere.
        from airflow.sdk import BaseHook
    except ImportError:
        try:
            from airflow.hooks.base import BaseHook  # type: ignore[attr-defined,no-redef]
        except ImportError as error:
            raise ValueError(
                f"[{SECTION}] redis_conn_id is {conn_id!r} but Airflow's BaseHook cannot be imported "
                f"to read it; set [{SECTION}] url instead"
            ) from error
    return BaseHook.get_connection(conn_id)


def url_from_connection(conn: Any) -> str:
    """
    A redis URL from an Airflow connection, by the Redis provider's conventions: ``db`` and ``ssl`` in
    the extras; a numeric schema (from a ``redis://host/2`` URI) is the database when ``db`` is absent.
    """
    extra = conn.extra_dejson or {}
    scheme = "rediss" if str(extra.get("ssl", "")).lower() in ("1", "true", "yes", "on") else "redis"
    host = conn.host or "localhost"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6 literal
    port = conn.port or 6379
    db = extra.get("db")
    if db is None:
        db = conn.schema if conn.schema and str(conn.schema).isdigit() else 0
    userinfo = ""
    if conn.login or conn.password:
        userinfo = quote(conn.login or "", safe="")
        if conn.password:
            userinfo += ":" + quote(conn.password, safe="")
        userinfo += "@"
    return f"{scheme}://{userinfo}{host}:{port}/{db}"


def _resolve_url(url: str | None, mode: str = "standalone") -> tuple[str, str]:
    if url is not None:
        return url, "the url argument"
    if (value := _airflow_option("url")) is not None:
        return value, f"[{SECTION}] url"
    if (conn_id := _airflow_option("redis_conn_id")) is not None:
        return url_from_connection(_fetch_connection(conn_id)), f"Airflow connection {conn_id!r}"
    if (value := _clean(os.environ.get(env_name("url")))) is not None:
        return value, env_name("url")
    if mode == "sentinel":
        # The sentinels say where the primary is; a URL would only add credentials, TLS, database.
        return "redis://", "the default for mode=sentinel"
    raise ValueError(
        "RedisStateBackend has no Redis URL. Set [state_redis] url in airflow.cfg "
        f"(or the environment variable {env_name('url')}), e.g. redis://localhost:6379/0, "
        "or name an Airflow connection with [state_redis] redis_conn_id."
    )


def invalid_url(url: str, source: str, reason: object) -> ValueError:
    """The error for a Redis URL that cannot be used as written; the password is masked."""
    return ValueError(f"Redis URL from {source} is invalid ({reason}): {mask_url(url)}")


def _check_url(url: str, source: str) -> None:
    if not url.startswith(_URL_SCHEMES):
        raise ValueError(
            f"Redis URL from {source} must start with redis://, rediss:// or unix://, got {mask_url(url)!r}"
        )
    # redis-py reads what it can of a URL and quietly drops the rest: a database path that is not a
    # number means database 0, "/1/2" means 12, port 0 means 6379, and a unix:// URL without a path
    # fails only at the first command. Refuse these here, where the source can be named.
    try:
        parts = urlsplit(url)
        port = parts.port  # raises for a port that is not a number in 0-65535
    except ValueError as error:  # also "Invalid IPv6 URL"
        raise invalid_url(url, source, error) from None
    if parts.scheme == "unix":
        if not parts.path:
            raise invalid_url(url, source, "a unix:// URL needs the socket's path")
        return
    if port == 0:
        raise invalid_url(url, source, "port 0")
    database = unquote(parts.path).strip("/")
    if database and not (database.isascii() and database.isdigit()):
        raise invalid_url(url, source, f"the database must be a number, got {database!r}")


def _resolve_ttl(given: int | Unset | None, option: str, default: int | None) -> int | None:
    """Seconds as a positive int; 0 and None mean "never expires"."""
    value: object = given
    source = f"{option} argument"
    if given is UNSET:
        if (found := _lookup(option)) is None:
            return default
        value, source = found
    if value is None:
        return None
    return _parse_count(value, source, minimum=0, unit=" (seconds; 0 = no expiry)") or None


def resolve_settings(
    url: str | None,
    key_prefix: str | None,
    task_ttl_seconds: int | Unset | None,
    asset_ttl_seconds: int | Unset | None,
    topology: Topology | None = None,
) -> RedisSettings:
    """Fill in every setting not given explicitly; Airflow is consulted only for those."""
    if topology is None:
        topology = resolve_topology()
    check_topology(topology)
    resolved_url, url_source = _resolve_url(url, topology.mode)
    _check_url(resolved_url, url_source)
    if topology.mode == "cluster" and resolved_url.startswith("unix://"):
        raise ValueError(
            f"[{SECTION}] mode is cluster but the Redis URL from {url_source} is a unix socket; "
            "give the address of any cluster node, e.g. redis://redis-node-1:6379"
        )
    if key_prefix is None:
        found = _lookup("key_prefix")
        key_prefix = found[0] if found else DEFAULT_KEY_PREFIX
    validate_prefix(key_prefix)
    return RedisSettings(
        url=resolved_url,
        url_source=url_source,
        key_prefix=key_prefix,
        task_ttl_seconds=_resolve_ttl(task_ttl_seconds, "task_ttl_seconds", DEFAULT_TASK_TTL_SECONDS),
        # Asset state is run-independent: like the metastore, it is kept unless a TTL is set.
        asset_ttl_seconds=_resolve_ttl(asset_ttl_seconds, "asset_ttl_seconds", None),
        topology=topology,
    )


# --- topology -------------------------------------------------------------------------------


def _parse_count(value: object, source: str, *, minimum: int, unit: str = "") -> int:
    if isinstance(value, bool):
        raise TypeError(f"{source} must be a whole number{unit}, got {value!r}")
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ValueError(f"{source} must be a whole number{unit}, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"{source} must be at least {minimum}{unit}, got {number}")
    return number


def parse_sentinels(text: str, source: str) -> tuple[tuple[str, int], ...]:
    """``"host:port,host:port"`` (IPv6 as ``[::1]:26379``) as ``(host, port)`` pairs."""
    found = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, colon, port_text = item.rpartition(":")
        host = host.strip("[]")
        if not colon or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(
                f"{source} must list sentinels as host:port separated by commas, "
                f"e.g. sentinel-1:26379,sentinel-2:26379; {item!r} is not host:port"
            )
        found.append((host, int(port_text)))
    if not found:
        raise ValueError(f"{source} lists no sentinel; e.g. sentinel-1:26379,sentinel-2:26379")
    return tuple(found)


def resolve_topology() -> Topology:
    """The ``[state_redis]`` options about the servers' layout (Airflow, then environment)."""
    mode_found = _lookup("mode")
    mode = mode_found[0].lower() if mode_found else "standalone"
    if mode not in MODES:
        assert mode_found is not None
        raise ValueError(f"{mode_found[1]} must be one of {', '.join(MODES)}, got {mode_found[0]!r}")
    sentinels: tuple[tuple[str, int], ...] = ()
    if (found := _lookup("sentinels")) is not None:
        sentinels = parse_sentinels(*found)
    texts: dict[str, Any] = {
        name: found[0] if (found := _lookup(name)) else None
        for name in ("sentinel_master", "sentinel_username", "sentinel_password")
    }
    counts: dict[str, Any] = {
        name: _parse_count(*found, minimum=least) if (found := _lookup(name)) else getattr(Topology, name)
        for name, least in _COUNTS.items()
    }
    return Topology(mode=mode, sentinels=sentinels, **texts, **counts)


def check_topology(topology: Topology) -> None:
    """Refuse combinations that cannot work, naming the option to fix."""
    if topology.mode not in MODES:
        raise ValueError(f"[{SECTION}] mode must be one of {', '.join(MODES)}, got {topology.mode!r}")
    sentinel_options = [
        name
        for name in ("sentinel_master", "sentinels", "sentinel_username", "sentinel_password")
        if getattr(topology, name)
    ]
    if topology.mode == "sentinel":
        missing = [name for name in ("sentinel_master", "sentinels") if not getattr(topology, name)]
        if missing:
            raise ValueError(
                f"[{SECTION}] mode is sentinel but [{SECTION}] {' and '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not set: set sentinel_master to the "
                "service name the sentinels monitor (e.g. mymaster) and sentinels to their "
                "addresses (e.g. sentinel-1:26379,sentinel-2:26379)"
            )
    elif sentinel_options:
        raise ValueError(
            f"[{SECTION}] {', '.join(sentinel_options)} only apply with [{SECTION}] mode = sentinel, "
            f"but mode is {topology.mode}; set mode = sentinel or remove them"
        )
    for name, minimum in _COUNTS.items():
        _parse_count(getattr(topology, name), f"[{SECTION}] {name}", minimum=minimum)
