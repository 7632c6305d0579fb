"""
A newcomer's first hour, done for real: docs/try-it.md followed as written. The wheels
dev/build-wheels builds go into a new virtualenv with Airflow 3.2.2 from PyPI and
constraints/airflow-3.2.txt by the page's own commands (bash, with pip and `python3 -m venv` played
by uv: see state_testing.newcomer); the page's DAG file is saved where it says; `airflow
standalone` starts with nothing configured but what the page sets (no [state] option, no
[api] base_url, no [core] execution_api_server_url, no JWT secret). Try 2 must read what try 1
stored, and the CLI, the REST API and the UI's State tab must show it as the page does. Every
other install line of the pages is resolved by pip (uv) in that virtualenv.

Then the upgrade docs/upgrading.md gives, on that same environment: Airflow 3.3.2 installed by the
page's command, `airflow db migrate`, and the keys the 3.2 DAG wrote read through both APIs.

It proves packaging and the first hour (the wheels hold everything, the entry points register the
provider and the plugin, the migration runs from an installed wheel, tasks find the state API in a
default Airflow), not the database: it runs once, in the SQLite pass.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import tarfile
import time
import zipfile
from pathlib import Path

import httpx
import pytest
from state_testing.deployer_venv import REPO, DeployerVenv, build_wheels
from state_testing.doc_samples import all_samples, pip_commands, shell_commands, try_it_samples
from state_testing.newcomer import NewcomerMachine, Terminal, refuse_taken_ports, stop, wait_for_line

pytestmark = pytest.mark.any_database

AIRFLOW33 = "3.3.2"
# What docs/try-it.md names: its DAG, the run it triggers, the task, and where standalone listens.
DAG_ID, RUN_ID, TASK_ID = "try_task_state", "first_try", "run_job"
AIRFLOW = "http://localhost:8080"
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOT = REPO / "docs" / "screenshots" / "try-it-state-tab.png"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_wheels(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def newcomer(
    tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path]
) -> tuple[NewcomerMachine, Terminal]:
    """The newcomer's machine, and the terminal in which the page's install ran."""
    machine = NewcomerMachine(tmp_path_factory.mktemp("newcomer"), wheels["airflow_task_state"].parent)
    install = try_it_samples()["try-install"].code
    # The page installs as the README does: the same pip command.
    assert _pip_lines(install) == _pip_lines(all_samples()["readme-install"].code)
    terminal = machine.terminal()
    terminal.run(install)
    return machine, terminal


@pytest.fixture(scope="module")
def venv(newcomer: tuple[NewcomerMachine, Terminal]) -> DeployerVenv:
    """The virtualenv the page's install made (``python3 -m venv ~/airflow-try``)."""
    return DeployerVenv(Path(newcomer[1].env["VIRTUAL_ENV"]))


@pytest.fixture(scope="module")
def database_32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the newcomer's test leaves a copy of its Airflow's database, for the upgrade."""
    return tmp_path_factory.mktemp("database-32") / "airflow.db"


def test_every_distribution_is_publishable(wheels: dict[str, Path]) -> None:
    """The licence text in every wheel and sdist, and the classifiers an index lists Airflow add-ons by."""
    folder = wheels["airflow_task_state"].parent
    built = sorted(path.name for path in folder.iterdir() if path.name.endswith((".whl", ".tar.gz")))
    assert len(built) == 6, built  # wheel and sdist of the three workspace members
    for wheel in folder.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            [metadata_path] = [name for name in names if name.endswith(".dist-info/METADATA")]
            metadata = archive.read(metadata_path).decode()
        assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names), wheel.name
        assert "License-Expression: Apache-2.0" in metadata, wheel.name
        assert "Classifier: Framework :: Apache Airflow\n" in metadata, wheel.name
        provider = "Classifier: Framework :: Apache Airflow :: Provider" in metadata
        assert provider == wheel.name.startswith("airflow_state_redis-"), wheel.name
    for sdist in folder.glob("*.tar.gz"):
        with tarfile.open(sdist) as archive:
            assert f"{sdist.name.removesuffix('.tar.gz')}/LICENSE" in archive.getnames(), sdist.name


def test_a_newcomer_follows_try_it_and_try_2_reads_what_try_1_stored(
    newcomer: tuple[NewcomerMachine, Terminal], venv: DeployerVenv, database_32: Path
) -> None:
    machine, first_terminal = newcomer
    assert venv.version_of("apache-airflow-core") == "3.2.2"
    page = try_it_samples()
    home = Path(first_terminal.env["AIRFLOW_HOME"])
    assert not {name for name in first_terminal.env if name.startswith("AIRFLOW__")} - {
        "AIRFLOW__CORE__LOAD_EXAMPLES"  # what the page sets, and nothing of ours or of Airflow's URLs
    }
    (home / "dags" / "try_task_state.py").write_text(page["try-dag"].code)

    refuse_taken_ports(8080, 8793, 8794)
    log = machine.root / "standalone.log"
    standalone = first_terminal.start(page["try-start"].code, log)
    try:
        wait_for_line(standalone, log, "Airflow is ready", timeout=600)
        # Where the page says the password is, and what standalone printed.
        password = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
        assert f"Password for user 'admin': {password}" in log.read_text()
        api = _AirflowApi(password)
        api.wait_until_parsed(DAG_ID)

        second_terminal = machine.terminal()
        second_terminal.run(page["try-trigger"].code)
        api.wait_for_run(DAG_ID, RUN_ID, home, log)
        assert api.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{RUN_ID}/taskInstances/{TASK_ID}")["try_number"] == 2

        shown = page["try-output"].code
        assert second_terminal.run(page["try-cli"].code).stdout == shown
        assert second_terminal.run(page["try-rest"].code).stdout == shown
        # Machine-readable output is the document alone on stdout: exactly one JSON document.
        get = (
            f"airflow state get remote_job_id --dag-id {DAG_ID} --run-id {RUN_ID} --task-id {TASK_ID} -o json"
        )
        [entry] = json.loads(second_terminal.run(get).stdout)
        assert (entry["value"], entry["updated_by_try"]) == ("app_001", 1)

        _the_state_tab_shows_both_tries(password)
    finally:
        stop(standalone)
    _copy_sqlite(home / "airflow.db", database_32)


def test_every_other_install_line_of_the_pages_resolves(venv: DeployerVenv, wheels: dict[str, Path]) -> None:
    """pip (uv) resolves each Airflow 3.2 install line of the pages in the newcomer's virtualenv."""
    lines = _install_lines(for_airflow33=False)
    assert len(lines) >= 4, lines
    for args in lines:
        venv.uv_pip("install", "--dry-run", *_resolved(args, wheels))


def test_upgrading_to_airflow33_in_place_keeps_what_the_dag_stored(
    venv: DeployerVenv, wheels: dict[str, Path], database_32: Path, tmp_path: Path
) -> None:
    if not database_32.exists():
        pytest.skip("needs the database of the 3.2 deployment's run, which the test before did not leave")
    env = _airflow_env(tmp_path / "home", database_32)
    # airflow-task-state is already the release of these wheels: the page's install of Airflow 3.3.
    [upgrade] = [args for args in _pip_lines(all_samples()["upgrading-airflow"].code) if "install" in args]
    venv.pip_install(*_resolved(upgrade[1:], wheels))
    assert venv.version_of("apache-airflow-core") == AIRFLOW33

    migrated = _run(venv, "airflow", "db", "migrate", env=env)
    assert "task_state: 2 key(s) moved into task_state_store" in migrated.stdout + migrated.stderr
    read = subprocess.run([str(venv.python), "-c", _READ_BOTH_WAYS], env=env, capture_output=True, text=True)
    assert read.returncode == 0, read.stderr[-3000:]
    assert json.loads(read.stdout.splitlines()[-1]) == {
        # Ours: value, version and the try that wrote it; Airflow's own backend: the stored value.
        "remote_job_id": [["app_001", 1, 1], '"app_001"'],
        "reconnected_to": [["app_001", 1, 2], '"app_001"'],
    }

    # The pages' install lines for Airflow 3.3 resolve in it.
    for args in _install_lines(for_airflow33=True):
        venv.uv_pip("install", "--dry-run", *_resolved(args, wheels))


def test_on_airflow33_ours_overwrite_nothing_and_uninstalling_them_leaves_airflow_whole(
    venv: DeployerVenv, wheels: dict[str, Path], tmp_path: Path
) -> None:
    """
    Airflow 3.3 ships a package ``airflow.state``; ours are beside it, never in it: no file of ours is
    a file of another distribution or lives under a top-level package of one, every file Airflow's
    RECORDs list still has the hash they list, ``airflow.state`` is Airflow's, and after uninstalling
    ours Airflow runs on.
    """
    if venv.version_of("apache-airflow-core") != AIRFLOW33:
        pytest.skip("needs the virtualenv the upgrade to Airflow 3.3 made")
    venv.pip_install("-c", REPO / "constraints/airflow-3.3.txt", wheels["airflow_state_redis"])
    installed = json.loads(_python(venv, _INSTALLED_FILES))
    assert set(installed["ours"]) == OURS, installed["ours"]
    assert installed["shared_files"] == {}, "files of ours another distribution also installs"
    assert installed["shadowed_packages"] == {}, "top-level packages of ours another distribution has"
    assert installed["changed_files"] == [], "files of other distributions whose hash changed"
    assert installed["airflow_state"] == "apache-airflow-core"

    venv.uv_pip("uninstall", *sorted(OURS))
    after = json.loads(_python(venv, _INSTALLED_FILES))
    assert after["ours"] == [] and after["changed_files"] == []
    assert after["airflow_state"] == "apache-airflow-core"
    env = _airflow_env(tmp_path / "home", tmp_path / "airflow.db")
    assert AIRFLOW33 in _run(venv, "airflow", "version", env=env).stdout


#: The distributions this repository builds.
OURS = {"airflow-task-state", "airflow-state-contract", "airflow-state-redis"}

# Who owns which file, in the environment it runs in: see the test above.
_INSTALLED_FILES = f"""
import base64, hashlib, importlib.metadata as metadata, json
ours = {sorted(OURS)!r}
owners, top_levels, changed = {{}}, {{}}, []
for dist in metadata.distributions():
    name = dist.metadata["Name"]
    for file in dist.files or ():
        path = str(file)
        owners.setdefault(path, set()).add(name)
        if "/" in path and ".dist-info/" not in path and not path.startswith(".."):
            top_levels.setdefault(path.split("/")[0], set()).add(name)
        if name not in ours and file.hash and file.hash.mode == "sha256":
            digest = base64.urlsafe_b64encode(hashlib.sha256(file.read_binary()).digest()).rstrip(b"=")
            if digest.decode() != file.hash.value:
                changed.append(path)
def installed(name):
    try:
        return metadata.distribution(name).metadata["Name"]
    except metadata.PackageNotFoundError:
        return None
import os, airflow.state
airflow_state = [
    dist.metadata["Name"] for dist in metadata.distributions()
    for file in dist.files or ()
    if os.path.realpath(file.locate()) == os.path.realpath(airflow.state.__file__)
]
print(json.dumps({{
    "ours": sorted(filter(None, map(installed, ours))),
    "shared_files": {{
        path: sorted(names) for path, names in owners.items() if len(names) > 1 and names & set(ours)
    }},
    "shadowed_packages": {{
        top: sorted(names) for top, names in top_levels.items()
        if names & set(ours) and names - set(ours) and top != "__pycache__"
    }},
    "changed_files": changed,
    "airflow_state": ",".join(airflow_state),
}}))
"""


def _python(venv: DeployerVenv, code: str) -> str:
    result = subprocess.run([str(venv.python), "-c", code], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()[-1]


# The newcomer's keys through our backend and through Airflow 3.3's own (its [state_store] backend).
_READ_BOTH_WAYS = f"""
import json
from airflow.state import TaskScope as AirflowScope, get_state_backend as airflows
from airflow_shared.state import TaskScope
from airflow_task_state import get_state_backend
where = ({DAG_ID!r}, {RUN_ID!r}, {TASK_ID!r})
read = {{}}
for key in ("remote_job_id", "reconnected_to"):
    entry = get_state_backend().get_entry(TaskScope(*where), key)
    ours = [json.loads(entry.value), entry.version, entry.updated_by_try]
    read[key] = [ours, airflows().get(AirflowScope(*where), key)]
print(json.dumps(read))
"""


def _pip_lines(code: str) -> list[list[str]]:
    return [words for words in shell_commands(code) if words[0] == "pip"]


def _install_lines(*, for_airflow33: bool) -> list[list[str]]:
    """
    The arguments of the pages' distinct `pip install` commands: those of the upgrade to Airflow 3.3
    (they name 3.3), or all the others.
    """
    lines = {tuple(args[1:]) for args, _ in pip_commands() if args[0] == "install"}
    upgrade = re.compile(r"apache-airflow(-core)?==3\.3")
    return [list(args) for args in sorted(lines) if any(map(upgrade.search, args)) == for_airflow33]


def _resolved(args: list[str], wheels: dict[str, Path]) -> list[str]:
    """A pip command's arguments as pip sees them in a clone: its wheels in dist/, its constraints."""
    folder = wheels["airflow_task_state"].parent
    resolved = []
    for word in args:
        if word.startswith("dist/"):
            [wheel] = folder.glob(word.removeprefix("dist/"))
            word = str(wheel)
        elif (REPO / word).is_file():
            word = str(REPO / word)
        resolved.append(word)
    return resolved


class _AirflowApi:
    """Airflow's own REST API of the newcomer's standalone, as its admin."""

    def __init__(self, password: str) -> None:
        # "Airflow is ready" counts the scheduler, dag processor and triggerer: the API server may
        # take some seconds more.
        deadline = time.monotonic() + 180
        while not _answers(f"{AIRFLOW}/api/v2/monitor/health"):
            assert time.monotonic() < deadline, f"the API server does not answer on {AIRFLOW}"
            time.sleep(1)
        answer = httpx.post(
            f"{AIRFLOW}/auth/token", json={"username": "admin", "password": password}, timeout=60
        )
        answer.raise_for_status()
        self.headers = {"Authorization": f"Bearer {answer.json()['access_token']}"}

    def get(self, path: str, *, missing_ok: bool = False) -> dict:
        answer = httpx.get(f"{AIRFLOW}{path}", headers=self.headers, timeout=60)
        if missing_ok and answer.status_code == 404:
            return {}
        answer.raise_for_status()
        return answer.json()

    def wait_until_parsed(self, dag_id: str, timeout: float = 300) -> None:
        """What the page tells the newcomer to wait for: the dag processor has read the file."""
        deadline = time.monotonic() + timeout
        while not self.get(f"/api/v2/dags/{dag_id}", missing_ok=True):
            assert time.monotonic() < deadline, f"the dag processor did not read {dag_id} in {timeout} s"
            time.sleep(2)

    def wait_for_run(self, dag_id: str, run_id: str, home: Path, log: Path, timeout: float = 420) -> None:
        """Wait for the run to succeed; if it ends otherwise, fail with its tries' logs."""
        path, deadline = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", time.monotonic() + timeout
        run = self.get(path)
        while run["state"] not in ("success", "failed") and time.monotonic() < deadline:
            time.sleep(2)
            run = self.get(path)
        if run["state"] != "success":
            tries = sorted((home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}").rglob("*.log"))
            logs = "\n".join(f"--- {try_log.name}\n{try_log.read_text()[-3000:]}" for try_log in tries)
            raise AssertionError(
                f"run {run_id} is {run['state']}:\n{logs}\n--- standalone\n{log.read_text()[-3000:]}"
            )


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=10).status_code == 200
    except httpx.TransportError:
        return False


def _the_state_tab_shows_both_tries(password: str) -> None:
    """The UI as the page describes it: log in, the task instance, its State tab, the two keys."""
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: dev/setup installs Debian's chromium for the UI tests"
        if os.environ.get("CI"):
            pytest.fail(message)
        return
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        # Debian's browser, as tests/operator_surfaces/test_e2e_ui.py drives it.
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--disable-background-networking",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(60_000)
            page.goto(f"{AIRFLOW}/dags/{DAG_ID}/runs/{RUN_ID}/tasks/{TASK_ID}", wait_until="commit")
            page.wait_for_url(re.compile(r"/auth/login"))
            page.locator("input[name=username]").fill("admin")
            page.locator("input[name=password]").fill(password)
            page.locator("input[name=password]").press("Enter")
            page.get_by_role("link", name="State", exact=True).click()
            for key, try_number in (("remote_job_id", "1"), ("reconnected_to", "2")):
                row = page.locator(f'[data-testid="state-row"][data-key="{key}"]')
                expect(row).to_contain_text('"app_001"', timeout=60_000)
                expect(row.get_by_test_id("state-try")).to_have_text(try_number)
            if os.environ.get("STATE_UPDATE_SCREENSHOTS") == "1":
                page.screenshot(path=str(SCREENSHOT))
        finally:
            browser.close()


def _copy_sqlite(source: Path, target: Path) -> None:
    with sqlite3.connect(source) as live, sqlite3.connect(target) as copy:
        live.backup(copy)


def _airflow_env(home: Path, database: Path) -> dict[str, str]:
    home.mkdir(parents=True)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("AIRFLOW", "_AIRFLOW"))}
    env.pop("VIRTUAL_ENV", None)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{database}",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        }
    )
    return env


def _run(
    venv: DeployerVenv, program: str, *args: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(venv.bin(program)), *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, (
        f"`{program} {' '.join(args)}` exited {result.returncode}:\n{result.stderr}"
    )
    return result
