"""
``airflow state get|set|increment|delete|list|clear``: one scope's state on the configured backend,
in this process (like ``airflow variables``, the CLI has the metadata database at hand).
"""

from __future__ import annotations

import json
import sys
from argparse import Namespace

from airflow.utils.session import create_session
from airflow_shared.state import CLI_WRITER, TaskScope, validate_key

from airflow_task_state import codec, expiry, large_values, manage, object_storage
from airflow_task_state.cli.errors import command, configured_backend, confirm, refusing
from airflow_task_state.cli.formats import count, print_entries
from airflow_task_state.cli.scope_options import named_scope


def _checked_key(key: str) -> str:
    with refusing("invalid key"):
        validate_key(key)
    return key


@command(writes=False)
def get(args: Namespace) -> None:
    key = _checked_key(args.key)
    named = named_scope(args)
    found = manage.entry(named.scope, key)
    if args.fetch_to is not None:
        _fetch(found.value, key, args.fetch_to)
        return
    print_entries([found], args.output, with_try=isinstance(named.scope, TaskScope))


def _fetch(value: object, key: str, destination: str) -> None:
    """Stream a large value's object to *destination* ('-': stdout), checked as it goes."""
    if not large_values.is_reference(value):
        raise SystemExit(
            f"key {key!r} holds a small value, not a large value's reference: leave out --fetch-to"
        )
    with refusing("cannot read the large value"):
        reference = large_values.parse(value)
        if destination == "-":
            object_storage.read_into(reference, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            object_storage.read_into(reference, destination)
    if destination != "-":
        digest = f"{reference.algorithm} {reference.digest}"
        print(f"Wrote {reference.size} bytes ({digest}) of key {key!r} to {destination}")


@command(writes=False)
def list_entries(args: Namespace) -> None:
    named = named_scope(args)
    with refusing():
        entries, total = manage.entries(
            named.scope, key_prefix=args.key_prefix, offset=args.offset, limit=args.limit
        )
    print_entries(entries, args.output, with_try=isinstance(named.scope, TaskScope))
    if entries and (args.offset or len(entries) < total):
        # On stderr: the rows on stdout stay exactly what the format says.
        print(f"keys {args.offset + 1}-{args.offset + len(entries)} of {total}", file=sys.stderr)


@command(writes=True)
def set_value(args: Namespace) -> None:
    key = _checked_key(args.key)
    try:
        value = json.loads(args.value)
    except json.JSONDecodeError as error:
        raise SystemExit(
            "invalid value: the value must be JSON (a string needs quotes: '\"text\"'): "
            f"{error.msg} at position {error.pos}"
        ) from None
    except RecursionError:
        raise SystemExit(f"invalid value: nested more than {codec.MAX_DEPTH} levels deep") from None
    with refusing("invalid value"):  # null, NaN, too large: refused before any lookup
        text = codec.encode(value)
    ttl = _checked_ttl(args.ttl)
    named = named_scope(args)
    with refusing():  # the value was checked above: what is left is the ttl against the backend
        version = manage.put(
            named.scope, key, text, ttl=ttl, if_version=args.if_version, writer=CLI_WRITER
        ).version
    # A lost --if-version race is a StateConflictError: a one-line exit naming the stored version.
    at_version = "" if version is None else f", now at version {version}"
    print(f"Stored key {key!r} of {named.description}{at_version}")


@command(writes=True)
def increment(args: Namespace) -> None:
    key = _checked_key(args.key)
    ttl = _checked_ttl(args.ttl)
    named = named_scope(args)
    with refusing():  # a stored value that is no integer, a result beyond 64 bits
        value = manage.increment(named.scope, key, args.by, ttl=ttl, writer=CLI_WRITER).value
    # Only the number, so that scripts can take it: n=$(airflow state increment ...).
    print(value)


def _checked_ttl(text: str | None) -> expiry.Ttl:
    with refusing("invalid --ttl"):
        return None if text is None else expiry.parse_ttl(text)


@command(writes=True)
def delete(args: Namespace) -> None:
    key = _checked_key(args.key)
    named = named_scope(args)
    manage.entry(named.scope, key)  # a key that is not there is an error, not a silent no-op
    confirm(f"Delete key {key!r} of {named.description}?", yes=args.yes, cancelled="nothing was deleted")
    manage.delete(named.scope, key)
    print(f"Deleted key {key!r} of {named.description}")


@command(writes=True)
def clear(args: Namespace) -> None:
    named = named_scope(args, all_map_indices=args.all_map_indices)
    scope = named.scope
    if args.all_map_indices and isinstance(scope, TaskScope):
        with create_session() as session:
            holding = manage.task_instances_with_state(scope.dag_id, scope.run_id, session)
        keys = sum(ti.key_count for ti in holding if ti.scope.task_id == scope.task_id)
    else:
        keys = configured_backend().key_counts([scope])[0]
    if not keys:
        print(f"Nothing to clear: no state stored for {named.description}")
        return
    question = f"Delete all {count(keys, 'key')} of {named.description}?"
    confirm(question, yes=args.yes, cancelled="nothing was cleared")
    manage.clear(named.scope, all_map_indices=args.all_map_indices)
    print(f"Cleared {count(keys, 'key')} of {named.description}")
