"""
What operators wait for: listing a task instance's entries and counting the keys of a run's task
instances, with each backend's own entries()/key_counts() beside the contract's defaults (built on
keys() and get()) on the same backend instance, measured side by side in one run.

The scope holds 1000 keys of 200 bytes; `page` lists the first 100 entries (the REST API's default
page), `all` lists every entry (export), `counts` counts the keys of 200 task instances (the run
listing). Metastore on PostgreSQL, and Redis.

    PYTHONPATH=dev uv run python bench/bench_listing.py [--ops 20] [--rounds 5]
"""

from __future__ import annotations

from contextlib import ExitStack

from _common import create_dag_run, measure, parse_args, use_migrated_airflow

KEYS = 1000
TASKS = 200


def main() -> None:
    args = parse_args(__doc__, ops=20).parse_args()
    from state_testing import dbservers

    with ExitStack() as stack:
        use_migrated_airflow(stack.enter_context(dbservers.postgres_server()))
        run(args, stack.enter_context(dbservers.redis_server()))


def run(args, redis_url: str) -> None:
    from airflow_shared.state import BaseStateBackend
    from airflow_state_redis import RedisStateBackend
    from airflow_task_state import task_scope
    from airflow_task_state.metastore import MetastoreStateBackend

    create_dag_run("bench", "run")
    scope = task_scope("bench", "run", "task")
    tasks = [task_scope("bench", "run", f"task_{n}") for n in range(TASKS)]
    sides = {}
    for name, backend in (("metastore", MetastoreStateBackend()), ("redis", RedisStateBackend(redis_url))):
        for n in range(KEYS):
            backend.set(scope, f"key/{n:04d}", "x" * 200)
        for n, task in enumerate(tasks):
            backend.set(task, "k", str(n))

        def default_entries(backend=backend, **listing):
            return BaseStateBackend.entries(backend, scope, **listing)

        def default_counts(backend=backend):
            return BaseStateBackend.key_counts(backend, tasks)

        sides[name] = {
            "page": {
                "own": lambda i, b=backend: b.entries(scope, limit=100),
                "default": lambda i, d=default_entries: d(limit=100),
            },
            "all": {
                "own": lambda i, b=backend: b.entries(scope),
                "default": lambda i, d=default_entries: d(),
            },
            "counts": {
                "own": lambda i, b=backend: b.key_counts(tasks),
                "default": lambda i, d=default_counts: d(),
            },
        }
        # Both sides must list the same keys and values (only the own one knows when and by whom).
        own_page, default_page = backend.entries(scope, limit=100), default_entries(limit=100)
        assert [(e.key, e.value) for e in own_page.entries] == [
            (e.key, e.value) for e in default_page.entries
        ]
        assert backend.key_counts(tasks) == default_counts()

    print(f"\n{KEYS} keys of 200 bytes, {TASKS} task instances; {args.rounds} rounds x {args.ops} calls")
    print(
        f"{'backend':<11}{'operation':<10}{'own (calls/s)':>15}{'default (calls/s)':>19}{'own/default':>13}"
    )
    for name, operations in sides.items():
        medians = measure(
            {f"{name} {op}": by_side for op, by_side in operations.items()}, args.ops, args.rounds
        )
        for label, by_side in medians.items():
            own, default = by_side["own"], by_side["default"]
            op = label.split(" ", 1)[1]
            print(f"{name:<11}{op:<10}{own:>15.1f}{default:>19.1f}{own / default:>13.1f}")


if __name__ == "__main__":
    main()
