"""``airflow state clean``: the configured backend's ``cleanup()``, as ``clean --help`` says."""

from __future__ import annotations

from argparse import Namespace
from datetime import UTC, datetime, timedelta

from airflow._shared.timezones.timezone import utcnow
from airflow.utils.session import create_session

from airflow_task_state import manage, object_storage
from airflow_task_state.cli.errors import command, configured_backend, confirm
from airflow_task_state.cli.formats import count
from airflow_task_state.cli.object_collector import collect
from airflow_task_state.cli.progress import Progress, ticking
from airflow_task_state.configured_backend import unwrap_state_backend
from airflow_task_state.durations import parse_duration

# Keys operators already do not see (docs/clearing.md): the next try's first touch would remove them.
# Finding them reads the try history of every retried or cleared task instance: only on request.
LEFT_BY_CLEARS = "that clears left for the next try to discard"


@command(writes=True)
def clean(args: Namespace) -> None:
    backend = configured_backend()
    # Named for people: the class the operator configured, not the metrics wrapper around it.
    name = type(unwrap_state_backend(backend)).__name__
    now = utcnow()
    updated_before = None if args.older_than is None else older_than(args.older_than, now=now)
    what = "expired keys" + (
        "" if updated_before is None else f" and keys last written before {updated_before.isoformat()}"
    )
    also = f", and keys {LEFT_BY_CLEARS}" if args.cleared else ""
    question = f"Remove {what} from {name}{also}? (--dry-run counts them first)"
    confirm(question, yes=args.yes or args.dry_run, cancelled="nothing was removed")
    # The contract's cleanup() says nothing until it returns (seconds on a million keys): a clock.
    doing = f"{'Counting' if args.dry_run else 'Removing'} {what} in {name}"
    with ticking(Progress(), doing) as finished:
        removed = backend.cleanup(
            now=now, updated_before=updated_before, batch_size=args.batch_size, dry_run=args.dry_run
        )
        finished(count(removed, "key"))
    keys = count(removed, "key")
    if args.dry_run:
        print(f"Dry run: would remove {keys} ({what}); nothing was removed")
    else:
        print(f"Removed {keys} ({what})")
    if args.cleared:  # hidden from operators, but Airflow 3.3 would hand them to that try as live
        with create_session() as session:
            discarded = manage.discard_what_clears_left(
                session, dry_run=args.dry_run, counted_before=updated_before
            )
        print(f"{'Would remove' if args.dry_run else 'Removed'} {count(discarded, 'key')} {LEFT_BY_CLEARS}")
    if object_storage.configured():  # after the keys: objects only expired keys named go too
        collected = collect(backend, dry_run=args.dry_run)
        print(
            f"{'Would remove' if args.dry_run else 'Removed'} {count(collected.removed, 'object')} "
            f"({collected.removed_bytes} bytes) of large values no key references from "
            f"{object_storage.base()}; kept {collected.referenced} referenced and {collected.too_young} "
            "younger than [state] object_grace_period"
        )
    if not backend.supports_expiry:
        # Not an error: nothing there can expire. But "0 keys" alone would look like a clean store.
        print(f"Note: {name} does not support expiry, so none of its keys ever expire")


def older_than(text: str, *, now: datetime) -> datetime:
    """
    The cut-off ``--older-than`` names. A bare number is refused rather than guessed at: 30 seconds
    and 30 days differ by every key written this month.
    """
    text = text.strip()
    if text.isdigit():
        raise SystemExit(
            f"--older-than {text}: say the unit, e.g. {text}d for {text} days or {text}h for {text} hours"
        )
    refused = f"--older-than {text!r}"
    try:
        duration = parse_duration(text)
        if duration <= timedelta(0):
            raise SystemExit(f"{refused} is no time at all: it would remove every key; give e.g. 30d")
        cutoff = now - duration
    except OverflowError:
        raise SystemExit(f"{refused} reaches back before the year 1: give a shorter duration") from None
    except ValueError as not_a_duration:
        try:
            cutoff = datetime.fromisoformat(text)
        except ValueError:
            raise SystemExit(
                f"{refused} is neither a duration (a number followed by s, m, h, d or w: 30d, 12h) "
                "nor an ISO 8601 timestamp (2026-01-31 or 2026-01-31T12:00:00+00:00)"
            ) from not_a_duration
        if cutoff.tzinfo is None:
            cutoff = cutoff.replace(tzinfo=UTC)
    if cutoff > now:
        raise SystemExit(
            f"{refused} is in the future ({cutoff.isoformat()}): it would remove every key; "
            "give a time in the past"
        )
    return cutoff
