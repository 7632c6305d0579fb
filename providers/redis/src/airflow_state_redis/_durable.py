"""
Writes that wait for replicas (``[state_redis] wait_replicas``; docs/redis.md, "Failover").

``WAIT`` counts acknowledgements of earlier writes *of the same connection*, so the script and
``WAIT`` go out in one pipeline on one connection (on a cluster, to the primary of the keys' slot).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import redis
import redis.cluster
import redis.exceptions
from redis.commands.core import Script

from ._clients import _backoff
from ._errors import StateNotReplicatedError

# What a node of a cluster answers while its slots move or it is not (or no longer) their primary:
# reload the slot map and try the node that now holds the slot.
CLUSTER_RETRIED = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.AskError,  # MovedError is a subclass
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.SlotNotCoveredError,
)


def check_replicated(acknowledged: int, replicas: int, timeout_ms: int, keys: Sequence[str]) -> None:
    if acknowledged < replicas:
        raise StateNotReplicatedError(
            f"A state write to {keys[0]!r} was applied on the Redis primary but only {acknowledged} "
            f"of the {replicas} replica(s) required by [state_redis] wait_replicas acknowledged it "
            f"within {timeout_ms} ms ([state_redis] wait_timeout_ms). The value is stored but would "
            "be lost if the primary failed before replicating it. Check the replicas (INFO "
            "replication) or lower wait_replicas."
        )


def _script_then_wait(
    client: redis.Redis, script: Script, keys: list[str], args: list[Any], replicas: int, timeout_ms: int
) -> tuple[Any, int]:
    for attempt in range(2):
        with client.pipeline(transaction=False) as pipe:
            script(keys=keys, args=args, client=pipe)
            pipe.execute_command("WAIT", replicas, timeout_ms)
            try:
                reply, acknowledged = pipe.execute()
            except redis.exceptions.NoScriptError:
                # The pipeline loads its scripts before it runs them; if the connection broke in
                # between and the retry reached a new primary (a failover), that one lacks the
                # script. NOSCRIPT means nothing ran: send it again, which loads it there first.
                if attempt:
                    raise
                continue
        break
    return reply, int(acknowledged)


def write_and_wait(
    client: redis.Redis | redis.cluster.RedisCluster,
    script: Script,
    keys: list[str],
    args: list[Any],
    *,
    replicas: int,
    timeout_ms: int,
) -> Any:
    """Run *script* on the primary of *keys*, then ``WAIT`` for *replicas* on the same connection."""
    if not isinstance(client, redis.cluster.RedisCluster):
        # One connection for the pipeline; the client's own Retry re-sends both on a broken
        # connection (and a Sentinel pool asks for the primary again when it reconnects).
        reply, acknowledged = _script_then_wait(client, script, keys, args, replicas, timeout_ms)
        check_replicated(acknowledged, replicas, timeout_ms, keys)
        return reply
    # The cluster client's pipeline would re-send a redirected command on another connection,
    # where WAIT would not wait for it: talk to the slot's primary directly, and follow a moved
    # slot (a failover) by reloading the slot map, as often as the client's own retry would (fewer
    # when a person waits on the call, see _clients._Retry).
    retries = client.retry.get_retries()
    backoff = _backoff()
    attempt = 0
    while True:
        try:
            node = client.get_node_from_key(keys[0])
            reply, acknowledged = _script_then_wait(
                client.get_redis_connection(node), script, keys, args, replicas, timeout_ms
            )
            break
        except CLUSTER_RETRIED:
            if attempt >= retries:
                raise
            attempt += 1
            time.sleep(backoff.compute(attempt))
            # No node may answer yet: the next attempt tries again.
            with contextlib.suppress(redis.exceptions.RedisError):
                client.nodes_manager.initialize()
    check_replicated(acknowledged, replicas, timeout_ms, keys)
    return reply
