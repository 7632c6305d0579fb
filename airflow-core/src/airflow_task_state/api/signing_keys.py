"""
The keys that sign task credentials, held by API servers only, derived as docs/security.md ("The key") says.

Under ``airflow dags test`` the task serves the state API to itself; that process signs with a key
of its own (:func:`use_process_key`), which no API server ever has.
"""

from __future__ import annotations

import secrets
import threading
from functools import cache
from pathlib import Path

from airflow.configuration import conf
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from airflow_task_state import config
from airflow_task_state.exceptions import StateConfigurationError

_LABEL = b"airflow-task-state credentials v1"
MIN_SESSION_KEY_LENGTH = 32


@cache
def derive(material: bytes) -> bytes:
    """The credential key made from *material* (a configured key, or Airflow's own JWT key)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_LABEL).derive(material)


def _configured_material() -> bytes | None:
    """What the key comes from: ``[state] session_key``, else Airflow's JWT key (the private one first)."""
    dedicated = config.session_key()
    if dedicated:
        if len(dedicated) < MIN_SESSION_KEY_LENGTH:
            raise StateConfigurationError(
                f"[state] session_key must be at least {MIN_SESSION_KEY_LENGTH} characters long, e.g. the "
                "output of `python -c 'import secrets; print(secrets.token_urlsafe(48))'`"
            )
        return dedicated.encode()
    private_key_path = conf.get("api_auth", "jwt_private_key_path", fallback="")
    if private_key_path:
        try:
            return Path(private_key_path).read_bytes()
        except OSError as error:
            raise StateConfigurationError(
                f"cannot read [api_auth] jwt_private_key_path to derive the task credential key: {error}"
            ) from None
    jwt_secret = conf.get("api_auth", "jwt_secret", fallback="")
    return jwt_secret.encode() if jwt_secret else None


_process_key: bytes | None = None
_process_key_lock = threading.Lock()


def use_process_key() -> bytes:
    """The random key of a process that serves the state API to its own tasks (``dag.test()``)."""
    global _process_key
    with _process_key_lock:
        if _process_key is None:
            _process_key = secrets.token_bytes(32)
        return _process_key


@cache
def _configured_keys() -> tuple[bytes | None, tuple[bytes, ...]]:
    # Read once per process, as Airflow reads its own JWT keys: rotating means restarting API servers.
    material = _configured_material()
    signing = derive(material) if material is not None else None
    previous = config.previous_session_key()
    accepted = [signing] if signing is not None else []
    if previous:
        accepted.append(derive(previous.encode()))
    return signing, tuple(accepted)


def signing_key() -> bytes:
    signing, _ = _configured_keys()
    if signing is None:
        raise StateConfigurationError(
            "the state API cannot sign task credentials: this API server has neither [api_auth] jwt_secret "
            "nor [api_auth] jwt_private_key_path to derive a key from. Set [state] session_key (the same "
            "value, 32 characters or more, on every API server; never on workers)"
        )
    return signing


def verification_keys() -> tuple[bytes, ...]:
    """Every key a credential may be signed with: the signing key first, then the one rotated out."""
    _, accepted = _configured_keys()
    if _process_key is not None:
        return (*accepted, _process_key)
    if not accepted:
        signing_key()  # raises the error that says what to set
    return accepted


def forget_configured_keys() -> None:
    """Read the keys from the configuration again on next use (tests change it within a process)."""
    _configured_keys.cache_clear()
