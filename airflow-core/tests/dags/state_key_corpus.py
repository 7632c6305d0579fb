"""
A DAG whose task stores, reads, lists and deletes state under keys that URLs mangle.

Tests run it in-process (`airflow dags test`) and on a real deployment (api-server, scheduler,
dag-processor). The task checks every round trip itself and fails on the first mismatch; at the
end it leaves every corpus key stored, so the test can compare the stored keys with the corpus.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Asset, dag, task

# Keys that a path, a client or a server could normalise, split or re-decode.
CORPUS = [
    ".",
    "..",
    "./a",
    "a/.",
    "a/../b",
    "/",
    "//",
    "trailing/",
    "%2F",
    "%252F",
    "%2E",
    "%ZZ",
    "line\nbreak",
    "carriage\rreturn",
    "tab\there",
    " spaced  out ",
    "a+b",
    "a&key=b",
    "?query#fragment",
    "back\\slash",
    "k" * 512,
    "emoji \U0001f680\U0001f9ea",
    "\u05e2\u05d1\u05e8\u05d9\u05ea right-to-left \u202e",
    "keys",
    "value",
]
# Keys no store can keep: refused in the task, before any request.
REFUSED = ["nul\x00key", "lone \ud800 surrogate", "", "k" * 513]

# Declared with a URI Airflow normalises (it stores "probe://key-corpus/").
CORPUS_ASSET = Asset(name="state_key_corpus", uri="probe://key-corpus")


def _exercise(namespace, out: dict, label: str) -> None:
    namespace.clear()
    for i, key in enumerate(CORPUS):
        namespace.set(key, {"i": i, "key": key})
    for i, key in enumerate(CORPUS):
        got = namespace.get(key)
        assert got == {"i": i, "key": key}, f"{label}: get({key!r}) returned {got!r}"
    listed = namespace.keys()
    assert listed == sorted(CORPUS), f"{label}: keys() returned {listed!r}"
    # Deleting one key never touches another.
    remaining = set(CORPUS)
    for key in CORPUS:
        namespace.delete(key)
        remaining.discard(key)
        assert namespace.get(key) is None, f"{label}: {key!r} still there after delete"
        listed = namespace.keys()
        assert listed == sorted(remaining), f"{label}: after delete({key!r}) keys() is {listed!r}"
    # The same keys in batches: one request each, every key its own.
    expected = {key: {"i": i, "key": key} for i, key in enumerate(CORPUS)}
    namespace.set_many(expected)
    got = namespace.get_many([*CORPUS, "absent"])
    assert got == expected, f"{label}: get_many returned {sorted(set(got) ^ set(expected))!r} wrongly"
    namespace.delete_many(CORPUS[::2])
    assert namespace.keys() == sorted(CORPUS[1::2]), f"{label}: delete_many removed other keys"
    namespace.set_many({key: expected[key] for key in CORPUS[::2]})
    refused = []
    for key in REFUSED:
        try:
            namespace.set(key, 1)
        except ValueError:
            refused.append(key)
    assert namespace.keys() == sorted(CORPUS), f"{label}: a refused key changed the stored keys"
    # Counts only: a NUL or a lone surrogate in the returned XCom would not fit PostgreSQL's JSONB.
    out[label] = {"stored": len(namespace.keys()), "refused": len(refused)}


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def state_key_corpus():
    @task(outlets=[CORPUS_ASSET])
    def round_trip_every_key() -> dict:
        from airflow_task_state import asset_state, task_state

        # A run starts empty, even one re-created under the run_id of a deleted run.
        out: dict = {"task_keys_at_start": len(task_state.keys())}
        _exercise(task_state, out, "task")
        # By the URI as the DAG author wrote it, not as Airflow stores it.
        _exercise(asset_state["probe://key-corpus"], out, "asset")
        return out

    round_trip_every_key()


state_key_corpus()
