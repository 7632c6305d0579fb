"""
The feature on a real deployment (this folder's conftest.py): the example DAGs that ship with the
package, the key corpus and the fault DAGs.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import time
from pathlib import Path

import httpx
import psutil
import pytest
from state_testing.credentials import credential_for
from state_testing.deployment import Deployment

CORPUS_DAG = Path(__file__).parents[2] / "airflow-core" / "tests" / "dags" / "state_key_corpus.py"


#: The runs the tests check, triggered together as the module starts (the deployment runs four task
#: instances at once) and each waited for by its test. The second watermark run, which must follow
#: the first, and the API server restart's run, which wants the deployment to itself, start in their tests.
RUNS = {
    "crash_1": "example_resumable_job",
    "mapped_1": "example_mapped_state",
    "async_1": "example_async_state",
    "watermark_1": "example_asset_watermark",
    "async_tokens": "example_async_state",
    "forked_1": "state_forked_first_calls",
    "writes_1": "state_first_call_writes",
    "corpus_1": "state_key_corpus",
    "versions_1": "state_versions_surface",
    "clear_1": "state_clear_on_success",
    "rows_1": "example_row_counter",
}


@pytest.fixture(scope="module", autouse=True)
def jobs_before(deployment: Deployment, jobs: Path) -> set[Path]:
    """The simulated jobs other modules' runs submitted, then every run of :data:`RUNS` triggered."""
    before = set(jobs.glob("*.submitted"))
    for run_id, dag_id in RUNS.items():
        deployment.wait_for_dag(dag_id, timeout=90)
        deployment.trigger(dag_id, run_id)
    return before


def run_to_end(deployment: Deployment, dag_id: str, run_id: str) -> None:
    if RUNS.get(run_id) != dag_id:
        deployment.wait_for_dag(dag_id, timeout=90)
        deployment.trigger(dag_id, run_id)
    state = deployment.wait_for_run(dag_id, run_id, timeout=240)
    assert state == "success", deployment.logs()


def task_state(deployment: Deployment, dag_id: str, run_id: str) -> dict[tuple[str, int, str], tuple]:
    rows = deployment.query(
        "SELECT task_id, map_index, key, value, updated_by_try FROM task_state "
        "WHERE dag_id = :d AND run_id = :r",
        d=dag_id,
        r=run_id,
    )
    return {
        (r["task_id"], r["map_index"], r["key"]): (json.loads(r["value"]), r["updated_by_try"]) for r in rows
    }


def test_worker_killed_after_submitting_reconnects_on_retry(deployment, jobs, jobs_before):
    # The deployment's other runs submit simulated jobs too: count the ones this run submitted
    # (crash_1 is this module's only run of a DAG that submits them).
    run_to_end(deployment, "example_resumable_job", "crash_1")

    submitted = sorted(path.stem for path in set(jobs.glob("*.submitted")) - jobs_before)
    assert len(submitted) == 1, f"expected one job, got {submitted}"
    [ti] = deployment.task_instances("example_resumable_job", "crash_1")
    assert (ti["state"], ti["try_number"]) == ("success", 2)
    assert task_state(deployment, "example_resumable_job", "crash_1") == {
        ("run_job", -1, "remote_job_id"): (submitted[0], 1)
    }
    assert f"Reconnecting to job {submitted[0]}" in deployment.task_logs("example_resumable_job", "crash_1")


def test_mapped_instances_keep_separate_state(deployment):
    run_to_end(deployment, "example_mapped_state", "mapped_1")

    state = task_state(deployment, "example_mapped_state", "mapped_1")
    for index in (0, 1, 2):
        assert state[("process", index, "partition")] == (index, 1)
        assert state[("process", index, "offset")] == (index * 1000, 1)
    assert len(state) == 6


def test_async_task_keeps_its_checkpoint(deployment):
    run_to_end(deployment, "example_async_state", "async_1")

    assert task_state(deployment, "example_async_state", "async_1") == {
        ("crawl", -1, "checkpoint"): ({"page": 3}, 1)
    }


def test_asset_watermark_written_by_run_1_is_read_by_run_2(deployment):
    run_to_end(deployment, "example_asset_watermark", "watermark_1")
    run_to_end(deployment, "example_asset_watermark", "watermark_2")

    [row] = deployment.query(
        "SELECT s.value FROM asset_state s JOIN asset a ON a.id = s.asset_id "
        "WHERE a.name = 'orders' AND s.key = 'watermark'"
    )
    assert json.loads(row["value"]) == 200


def test_a_credential_for_one_task_instance_is_refused_on_anothers_state(deployment):
    from airflow_task_state.api.credentials import TaskInstanceClaims, issue_credential

    run_to_end(deployment, "example_async_state", "async_tokens")
    [mine] = deployment.query(
        "SELECT id, dag_id, run_id, task_id, map_index, try_number FROM task_instance "
        "WHERE run_id = 'async_tokens'"
    )
    [other] = deployment.query("SELECT id FROM task_instance WHERE run_id = 'mapped_1' AND map_index = 1")
    credential = credential_for(deployment.env, mine)
    base = f"{deployment.api_url}/state/task-instances"

    def call(method: str, ti_id: str, key: str, credential: str = credential, **kwargs) -> httpx.Response:
        headers = {"Authorization": f"Bearer {credential}"}
        url = f"{base}/{ti_id}/value"
        return httpx.request(method, url, params={"key": key}, headers=headers, timeout=30, **kwargs)

    assert call("GET", str(other["id"]), "offset").status_code == 403
    assert call("PUT", str(other["id"]), "offset", json={"value": 1}).status_code == 403
    assert call("GET", str(mine["id"]), "checkpoint").json()["value"] == {"page": 3}
    # The task has finished: its credential may still read, but no longer write.
    finished = call("PUT", str(mine["id"]), "checkpoint", json={"value": {"page": 0}})
    assert finished.status_code == 403 and finished.json()["detail"]["reason"] == "not_running"
    claims = TaskInstanceClaims(str(mine["id"]), "example_async_state", "async_tokens", "crawl", -1, 1)
    wrong_key = issue_credential(claims, b"not-the-key-" * 4)
    assert call("GET", str(mine["id"]), "checkpoint", credential=wrong_key).status_code == 401
    schema = httpx.get(f"{deployment.api_url}/state/openapi.json", timeout=30).json()
    assert "/task-instances/{task_instance_id}/value" in schema["paths"]


def test_forked_processes_of_a_try_each_get_a_credential(deployment):
    """
    Six processes forked by one task make their first state call at once: each gets a credential
    (they share the try's proof instead of overwriting each other's), whether multiprocessing
    started them (they cannot reach the supervisor: the task wrote the proof before forking) or a
    bare fork did and they write it themselves. The proof is gone from the rendered fields once
    the try has ended.
    """
    run_to_end(deployment, "state_forked_first_calls", "forked_1")
    written = task_state(deployment, "state_forked_first_calls", "forked_1")
    assert {(task, key): value for (task, _, key), (value, _) in written.items()} == {
        **{("fork_children", f"child_{i}"): i for i in range(6)},
        **{("fork_children_that_import_state", f"late_child_{i}"): i for i in range(6)},
    }
    rows = deployment.query(
        "SELECT rendered_fields FROM rendered_task_instance_fields WHERE dag_id = :d AND run_id = :r",
        d="state_forked_first_calls",
        r="forked_1",
    )
    assert len(rows) == 2
    for row in rows:
        rendered = row["rendered_fields"]
        rendered = json.loads(rendered) if isinstance(rendered, str) else rendered
        assert rendered.get("airflow_task_state_proof", "") == "", rendered


def test_the_handshake_writes_through_the_supervisor_only_as_the_try_ends_and_only_if_it_used_state(
    deployment,
):
    """
    The proof rides on the rendered fields the task runner writes as the try starts: a first state
    call made inside the task writes nothing of its own, and the try's end takes the proof back out
    (one write); a task that never touches state makes no write beyond Airflow's own.
    """
    run_to_end(deployment, "state_first_call_writes", "writes_1")
    rows = deployment.query(
        "SELECT task_id, CAST(id AS TEXT) AS id FROM task_instance WHERE dag_id = :d AND run_id = :r",
        d="state_first_call_writes",
        r="writes_1",
    )
    log = (deployment.home / "api-server.log").read_text(errors="replace")
    writes = {
        row["task_id"]: log.count(f"method=PUT path=/execution/task-instances/{row['id']}/rtif ")
        for row in rows
    }
    assert writes == {"never_touches_state": 1, "imports_inside_the_task": 2}, writes
    assert (
        task_state(deployment, "state_first_call_writes", "writes_1")["imports_inside_the_task", -1, "first"][
            0
        ]
        == 1
    )
    [fields] = deployment.query(
        "SELECT rendered_fields FROM rendered_task_instance_fields WHERE dag_id = :d AND task_id = :t",
        d="state_first_call_writes",
        t="imports_inside_the_task",
    )
    rendered = fields["rendered_fields"]
    rendered = json.loads(rendered) if isinstance(rendered, str) else rendered
    assert "airflow_task_state_proof" not in rendered, rendered


def test_every_key_round_trips_exactly_through_the_api_server(deployment):
    spec = importlib.util.spec_from_file_location("state_key_corpus", CORPUS_DAG)
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)

    run_to_end(deployment, "state_key_corpus", "corpus_1")

    stored = task_state(deployment, "state_key_corpus", "corpus_1")
    assert sorted(key for _, _, key in stored) == sorted(corpus.CORPUS)
    for i, key in enumerate(corpus.CORPUS):
        assert stored[("round_trip_every_key", -1, key)][0] == {"i": i, "key": key}
    rows = deployment.query(
        "SELECT s.key, s.value FROM asset_state s JOIN asset a ON a.id = s.asset_id "
        "WHERE a.name = 'state_key_corpus'"
    )
    assert {row["key"]: json.loads(row["value"]) for row in rows} == {
        key: {"i": i, "key": key} for i, key in enumerate(corpus.CORPUS)
    }


def test_writes_survive_an_api_server_restart(deployment):
    for run_id, dag_id in RUNS.items():  # nothing else is running when the API server goes away
        deployment.wait_for_run(dag_id, run_id, timeout=240)
    deployment.wait_for_dag("state_writes_through_restart", timeout=90)
    deployment.trigger("state_writes_through_restart", "restart_1")

    def written() -> int:
        [row] = deployment.query("SELECT count(*) AS n FROM task_state WHERE run_id = 'restart_1'")
        return row["n"]

    deployment._wait(lambda: written() >= 30, 120, "the task to write 30 keys")
    away = deployment.restart("api-server")
    # Longer than the old client's whole retry budget (3.5 s), so the test means something.
    assert away > 4, f"the API server was away only {away:.1f}s"
    print(f"the API server was away {away:.1f}s")
    assert deployment.wait_for_run("state_writes_through_restart", "restart_1", timeout=180) == "success", (
        deployment.logs()
    )
    stored = task_state(deployment, "state_writes_through_restart", "restart_1")
    assert {key: value for (_, _, key), (value, _) in stored.items()} == {
        f"write_{i:03d}": i for i in range(250)
    }


def _api_server_memory(deployment: Deployment) -> int:
    root = psutil.Process(deployment.processes["api-server"].pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)] if p.is_running())


def _send_huge_body(url: str, headers: dict[str, str], megabytes: int) -> bytes:
    """PUT a body of *megabytes* MiB in chunks until the server stops reading; return its status line."""
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    path = "/" + url.split("//", 1)[1].split("/", 1)[1]
    lines = [f"PUT {path} HTTP/1.1", f"Host: {host}:{port}", f"Content-Length: {megabytes << 20}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    chunk, sent = b"x" * (1 << 20), 0
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        connection.settimeout(0.5)
        try:
            while sent < megabytes:
                connection.sendall(chunk)
                sent += 1
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass  # the server stopped reading: that is the point
        connection.settimeout(30)
        return connection.recv(200).split(b"\r\n", 1)[0]


def test_huge_bodies_are_refused_before_they_are_read(deployment):
    """An unauthenticated 100 MiB body is answered 401 without the API server holding it."""
    url = f"{deployment.api_url}/state/task-instances/01234567-89ab-7def-8123-456789abcdef/value?key=k"
    before = _api_server_memory(deployment)
    status = _send_huge_body(url, {"Content-Type": "application/json"}, 100)
    assert b" 401 " in status, status
    # A body with a valid credential but over the size limit is refused with 413, also unread.
    row = {"id": "01234567-89ab-7def-8123-456789abcdef", "dag_id": "d", "run_id": "r", "task_id": "t"}
    credential = credential_for(deployment.env, {**row, "map_index": -1, "try_number": 1})
    status = _send_huge_body(url, {"Authorization": f"Bearer {credential}"}, 100)
    assert b" 413 " in status, status
    time.sleep(1)
    grown = (_api_server_memory(deployment) - before) >> 20
    assert grown < 40, f"the API server grew by {grown} MiB while refusing two 100 MiB bodies"


def test_versions_increments_ttl_and_clear_on_success_through_the_api_server(deployment):
    """Task code using increment, if_version, update and ttl under the LocalExecutor, and a task
    that asks for its state to be cleared once it succeeded (the listener runs in the task process)."""
    run_to_end(deployment, "state_versions_surface", "versions_1")
    rows = deployment.query(
        "SELECT key, value, version, expires_at, now() AS now FROM task_state "
        "WHERE dag_id = 'state_versions_surface' AND run_id = 'versions_1'"
    )
    stored = {row["key"]: row for row in rows}
    assert json.loads(stored["rows"]["value"]) == 2 and stored["rows"]["version"] == 4
    assert (json.loads(stored["cas"]["value"]), stored["cas"]["version"]) == ("b", 2)
    assert json.loads(stored["log"]["value"]) == ["start", "intruder", "mine"]
    assert sorted(json.loads(stored["many"]["value"])) == list(range(12))
    assert stored["forever"]["expires_at"] is None
    hour = (stored["hour"]["expires_at"] - stored["hour"]["now"]).total_seconds()
    assert 3000 < hour <= 3600
    default = (stored["rows"]["expires_at"] - stored["rows"]["now"]).total_seconds()
    assert 29 * 86400 < default <= 30 * 86400
    [counted] = deployment.query(
        "SELECT s.value FROM asset_state s JOIN asset a ON a.id = s.asset_id "
        "WHERE a.name = 'state_tests_counted' AND s.key = 'seen'"
    )
    assert json.loads(counted["value"]) == 6

    run_to_end(deployment, "state_clear_on_success", "clear_1")
    assert task_state(deployment, "state_clear_on_success", "clear_1") == {("keeps", -1, "kept"): (1, 1)}


def test_row_counter_example_loses_no_count(deployment):
    run_to_end(deployment, "example_row_counter", "rows_1")
    rows = deployment.query(
        "SELECT s.key, s.value FROM asset_state s JOIN asset a ON a.id = s.asset_id "
        "WHERE a.name = 'example_rows'"
    )
    assert {row["key"]: json.loads(row["value"]) for row in rows} == {
        "rows_loaded": 100 + 101 + 102 + 103,
        "high_watermark": 3,
    }
