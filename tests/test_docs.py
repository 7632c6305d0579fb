"""
The documentation builds without a warning, and every code sample in it is checked.

Python samples run (tests/test_docs_samples.py); shell samples are parsed by the real parsers of the
commands they call (Airflow's CLI parser with our commands in it, argparse of each benchmark); ini
samples name only options that exist. What cannot be run says why, in NOT_RUN.
"""

from __future__ import annotations

import ast
import configparser
import functools
import importlib
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from state_testing.doc_samples import (
    REPO,
    Sample,
    all_samples,
    doc_files,
    pip_commands,
    samples_in,
    shell_commands,
    simple_commands,
    try_it_samples,
)

pytestmark = pytest.mark.any_database

# Samples no test runs, and why. Keep it short: everything else is checked below.
NOT_RUN = {
    "architecture-layout": "a diagram of the source tree, not code",
    "redis-key-layout": "a diagram of Redis key names, not code",
    "security-redis-acl": "a Redis ACL command for a Celery broker; "
    "tests/celery_worker/test_celery_deployment.py runs it against a real broker",
    "upgrading-log": "output, not code: what revision 0114 logs in `airflow db migrate` "
    "(tests/test_upgrade_to_airflow33.py and tests/test_install_from_wheels.py check those lines)",
    "upgrading-log-stayed": "output, not code: what revision 0114 logs of a key that stays behind "
    "(tests/test_upgrade_to_airflow33.py checks those lines)",
    "large-values-reference": "a reference as the store keeps it, not code "
    "(airflow-core/tests/test_large_values.py checks the format)",
    "cli-unreachable-output": "output, not code: what the CLI prints when a server is unreachable "
    "(airflow-core/tests/test_cli_unreachable.py checks it)",
}
# Python samples: each runs in tests/test_docs_samples.py, which checks that it covers exactly these.
PYTHON = {
    "readme-task",
    "core-example",
    "core-server-side",
    "task-code-basic",
    "task-code-versions",
    "task-code-many",
    "staged-writes",
    "clearing-keep-choice",
    "clearing-item-key",
    "resumable-deferrable",
    "large-values-task",
    "backend-api",
    "redis-standalone-python",
    "redis-example-validate",
    "redis-example-kit",
    "writing-a-backend-kit",
}


def test_sphinx_builds_the_documentation_without_a_warning(tmp_path):
    result = subprocess.run(
        [
            *(Path(sys.executable).with_name("sphinx-build"), "-W", "--keep-going", "-q", "-b", "html"),
            *("-d", str(tmp_path / "doctrees"), str(REPO / "docs"), str(tmp_path / "html")),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    page = (tmp_path / "html" / "api-reference.html").read_text()
    # autodoc found the classes (an import failure would have been a warning, but check the content).
    assert "apply_commit" in page and "get_versioned" in page


def test_every_sample_is_named_and_has_a_check():
    samples = all_samples()
    checked = set(NOT_RUN) | PYTHON | {name for name, s in samples.items() if s.lang in ("bash", "ini")}
    checked |= set(try_it_samples())  # run as written by the install test (below)
    assert set(samples) <= checked, f"samples without a check: {sorted(set(samples) - checked)}"
    assert not (set(NOT_RUN) | PYTHON) - set(samples), "checks of samples that no longer exist"
    assert {s.lang for name, s in samples.items() if name in PYTHON} == {"python"}


def test_the_install_test_runs_every_sample_of_the_try_it_page():
    """tests/test_install_from_wheels.py takes each sample of docs/try-it.md by its name and runs it."""
    install_test = (REPO / "tests/test_install_from_wheels.py").read_text()
    for name in try_it_samples():
        assert f'"{name}"' in install_test, f"tests/test_install_from_wheels.py does not run {name}"


def test_a_code_block_without_a_name_is_refused(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n```python\nprint(1)\n```\n")
    with pytest.raises(ValueError, match="without a `<!-- sample: NAME -->`"):
        samples_in(page)


# Shell samples ---------------------------------------------------------------------------------


@functools.cache
def airflow_parser():
    from airflow.cli.cli_parser import get_parser

    return get_parser()


def parsed_or_fail(parser, args: list[str], what: str) -> None:
    try:
        parser.parse_args(args)
    except SystemExit as exit:
        if exit.code:
            raise AssertionError(f"{what}: the real parser refuses `{shlex.join(args)}`") from None


@functools.cache
def distributions() -> dict[str, str]:
    """This repository's distributions and their versions."""
    found = {}
    for folder in ("shared/state", "airflow-core", "providers/redis"):
        project = tomllib.loads((REPO / folder / "pyproject.toml").read_text())["project"]
        found[project["name"]] = project["version"]
    return found


def check_requirement(text: str) -> None:
    """A requirement pip can meet from a package index today, at a version the tests use."""
    requirement = Requirement(text)
    if requirement.name in distributions():
        wheel = requirement.name.replace("-", "_")
        raise AssertionError(
            f"pip names {text!r}, which is on no package index yet: name the wheel dev/build-wheels "
            f"builds, dist/{wheel}-*.whl"
        )
    if requirement.name in ("apache-airflow", "apache-airflow-core"):
        tested = airflow_versions_the_tests_install()
        assert any(requirement.specifier.contains(version) for version in tested), (
            f"{text}: the tests install Airflow {sorted(tested)}"
        )
    else:
        locked = locked_versions().get(requirement.name)
        assert locked is not None, f"pip names {text!r}, which is neither Airflow nor a locked dependency"
        assert requirement.specifier.contains(locked), f"{text}: the tests run {requirement.name} {locked}"


@functools.cache
def locked_versions() -> dict[str, str]:
    """The third-party distributions the tests install, and their versions (uv.lock)."""
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    return {package["name"]: package["version"] for package in lock["package"] if "version" in package}


def airflow_versions_the_tests_install() -> set[str]:
    """The Airflow releases the tests install: 3.3 for the upgrade (dev/state_testing/airflow33.py),
    and the 3.2 release of the install test, when there is one."""
    pins = (REPO / "dev/airflow33/requirements.txt").read_text()
    versions = set(re.findall(r"^apache-airflow==(\S+)", pins, re.M))
    install_test = REPO / "tests/test_install_from_wheels.py"
    if install_test.exists():
        versions |= set(
            re.findall(r'version_of\("apache-airflow-core"\) == "([^"]+)"', install_test.read_text())
        )
    return versions


def check_pip(args: list[str], where: str) -> None:
    """
    A pip command that works today. Our distributions are on no package index: an install names them
    as the wheels dev/build-wheels puts in dist/, never by name. An install of airflow-task-state
    passes the constraints file of the Airflow line it installs beside: constraints/airflow-3.2.txt
    (without it pip takes a FastAPI and a Cadwyn with which every task fails), or
    constraints/airflow-3.3.txt where the command installs Airflow 3.3, which needs it as well (its
    SQLAlchemy pin). Anything else is an Airflow the tests install or a dependency they lock. The
    install test then has pip resolve each install line in a real virtualenv.
    """
    assert args[0] in ("install", "uninstall"), f"{where}: pip {args[0]}"
    assert args[1:], f"{where}: `pip {args[0]}` of nothing (name the command in prose without code marks)"
    constraints, wheels = [], []
    words = iter(args[1:])
    for word in words:
        if word == "-c":  # a constraints file of the repository
            constraints.append(next(words))
            assert (REPO / constraints[-1]).is_file(), f"{where}: no constraints file {constraints[-1]}"
        elif word.startswith("dist/") and word.endswith(".whl"):  # a wheel dev/build-wheels built
            name = word.removeprefix("dist/").split("-", 1)[0].replace("_", "-")
            assert name in distributions(), f"{where}: {word} is no wheel of this repository"
            wheels.append(name)
        elif word.startswith("-"):
            continue
        elif args[0] == "uninstall":  # what is installed goes by its name
            assert word in distributions() or word in FORMER_NAMES, f"{where}: pip uninstall {word}"
        else:
            check_requirement(word)
    airflow33 = any(re.match(r"apache-airflow(-core)?==3\.3", word) for word in args)
    if "airflow-task-state" in wheels or airflow33:
        line = "constraints/airflow-3.3.txt" if airflow33 else "constraints/airflow-3.2.txt"
        assert constraints == [line], (
            f"{where}: an install of {'Airflow 3.3' if airflow33 else 'airflow-task-state'} needs -c {line}"
        )


# Names our distributions had before, which the pages tell users to uninstall.
FORMER_NAMES = {"apache-airflow-shared-state": "the contract distribution, now airflow-state-contract"}


def script_options(script: Path) -> set[str]:
    """The option strings a script's argparse declares, its own and those of the modules beside it
    that it imports (bench/_common.py), read from the source: no benchmark runs."""
    options = set()
    tree = ast.parse(script.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            options |= {arg.value for arg in node.args if isinstance(arg, ast.Constant)}
        beside = script.parent / f"{getattr(node, 'module', None)}.py"
        if isinstance(node, ast.ImportFrom) and beside.is_file():
            options |= script_options(beside)
    return options


def check_uv_run(args: list[str]) -> None:
    args = [arg for arg in args if arg != "--no-sync"]
    if args[0] == "python":
        script = REPO / args[1]
        assert script.is_file(), f"no script {args[1]}"
        declared = script_options(script)
        for word in args[2:]:
            flag = word.strip("[]").split("=", 1)[0]
            if flag.startswith("-"):
                assert flag in declared, f"{args[1]} has no option {flag} (it has {sorted(declared)})"
    elif args[0] == "pytest":
        for word in args[1:]:
            if not word.startswith("-"):
                assert (REPO / word).exists(), f"pytest is given {word}, which does not exist"
    else:
        raise AssertionError(f"no check for `uv run {args[0]}`")


@functools.cache
def known_options() -> dict[str, set[str]]:
    """Options of the sections we own, as Airflow's provider manager reads them."""
    from airflow_state_redis.provider_info import get_provider_info as redis_info
    from airflow_task_state.provider_info import get_provider_info as core_info

    sections = {**core_info()["config"], **redis_info()["config"]}
    return {name: set(section["options"]) for name, section in sections.items()}


@functools.cache
def airflow33_options() -> dict[str, set[str]]:
    """Options of Airflow 3.3.2's own configuration, read from its config.yml in the environment the
    upgrade tests build (cached; the upgrade tests of the same run build it if it is missing)."""
    import yaml
    from state_testing.airflow33 import airflow33

    found = subprocess.run(
        [airflow33().python, "-c", "import airflow.config_templates as t; print(t.__path__[0])"],
        capture_output=True,
        text=True,
        check=True,
    )
    config = yaml.safe_load((Path(found.stdout.strip()) / "config.yml").read_text())
    return {name: set(section["options"]) for name, section in config.items()}


def check_option(section: str, option: str, where: str) -> None:
    if section == "state_store":  # Airflow 3.3's own section, named by the upgrade pages
        known = airflow33_options().get(section, set())
    else:
        known = known_options().get(section, set())
    assert option in known, f"{where}: no option [{section}] {option} (there are {sorted(known)})"


def check_environment_names(words: list[str], where: str) -> None:
    for word in words:
        match = re.match(r"AIRFLOW__([A-Z0-9_]+?)__([A-Z0-9_]+)=", word)
        if match and match.group(1).lower() in ("state", "state_redis"):
            check_option(match.group(1).lower(), match.group(2).lower(), where)


def check_shell_command(words: list[str], where: str) -> None:
    check_environment_names(words, where)
    while len(words) > 1 and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # PYTHONPATH=dev uv run ...
        words = words[1:]
    program, args = words[0], words[1:]
    if program == "airflow":
        parsed_or_fail(airflow_parser(), args, where)
    elif program == "pip":
        check_pip(args, where)
    elif program == "uv" and args[0] == "run":
        check_uv_run(args[1:])
    elif program == "export":
        assert all(re.fullmatch(r"AIRFLOW__\w+=\S+", arg) for arg in args), f"{where}: export {args}"
    elif program.startswith("dev/"):
        # dev/demo and dev/test: run by tests/test_readme_demo.py and by CI (.ci/run).
        assert os.access(REPO / program, os.X_OK), f"{where}: {program} is no executable of the repository"
    else:
        raise AssertionError(f"{where}: no check for the program {program!r}")


def check_rest_calls(sample: Sample) -> None:
    """The curl calls name routes of the plugin's app, with their methods."""
    from airflow_task_state.api.app import create_app
    from starlette.routing import Match

    app = create_app()
    calls = re.findall(r'curl (?:-X (\w+) )?.*?"\$AIRFLOW/state(/[^"?]+)', sample.code.replace("\\\n", " "))
    assert calls, sample.where
    for method, path in calls:
        scope = {"type": "http", "method": method or "GET", "path": path}
        matches = [route.matches(scope)[0] for route in app.routes]
        assert Match.FULL in matches, f"{sample.where}: no route {method or 'GET'} /state{path}"


# The checks refuse a broken sample (a typo in a command, an option that does not exist).
BROKEN_SHELL = [
    "airflow state lsit --dag-id d",
    "airflow state get k --dag-id d --run-id r --task-id t --output xml",
    "PYTHONPATH=dev uv run python bench/bench_atomic.py --no-such-flag",
    'pip install "airflow-state-redis>=99"',
    "pip install airflow-state-redis",  # on no package index
    'pip install "apache-airflow==3.2.2" dist/airflow_task_state-*.whl',  # without the constraints
    'pip install -c constraints/airflow-3.2.txt "apache-airflow==3.3.2" dist/airflow_task_state-*.whl',
    'pip install "apache-airflow==3.3.2"',  # Airflow 3.3 without its constraints
    "pip install",  # of nothing: the install test could not resolve it
    "pip install dist/airflow_state_resid-0.6.0-py3-none-any.whl",
    'pip install "sqlalchemy>=2.1"',  # not the version the tests run
    "export AIRFLOW__STATE__NO_SUCH_OPTION=1",
]
SHELL = sorted(name for name, sample in all_samples().items() if sample.lang == "bash")


@pytest.mark.parametrize("name", SHELL)
def test_shell_sample(name):
    sample = all_samples()[name]
    if name in try_it_samples():
        # Run as written by the install test; here, the commands of ours and pip's are parsed.
        for words in shell_commands(sample.code):
            for command in simple_commands(words):
                if command[0] in ("airflow", "pip"):
                    check_shell_command(command, sample.where)
        return
    if name == "rest-api-curl":
        # The first call is Airflow's own /auth/token; the others are ours and must exist.
        check_rest_calls(sample)
        return
    commands = shell_commands(sample.code)
    assert commands, sample.where
    for words in commands:
        check_shell_command(words, sample.where)


def check_ini(code: str, where: str) -> None:
    parser = configparser.ConfigParser(strict=False, inline_comment_prefixes=("#",), interpolation=None)
    parser.read_string(code)
    for section in parser.sections():
        for option in parser.options(section):
            check_option(section, option, where)
    if parser.has_option("state", "backend"):
        from airflow_shared.state import BaseStateBackend

        module, _, name = parser.get("state", "backend").rpartition(".")
        backend = getattr(importlib.import_module(module), name)
        assert issubclass(backend, BaseStateBackend), f"{where}: [state] backend is no BaseStateBackend"


INI = sorted(name for name, sample in all_samples().items() if sample.lang == "ini")


@pytest.mark.parametrize("name", INI)
def test_ini_sample(name):
    sample = all_samples()[name]
    check_ini(sample.code, sample.where)


def test_every_pip_command_of_the_pages_and_readmes_works_today():
    """In code blocks and in inline code, samples or not, every README of the repository included."""
    commands = pip_commands()
    assert len(commands) >= 15, commands  # the pages hold that many: the search finds them
    for args, where in commands:
        check_pip(args, where)


@pytest.mark.parametrize("code", BROKEN_SHELL)
def test_a_broken_shell_sample_fails(code):
    with pytest.raises(AssertionError):
        for words in shell_commands(code):
            check_shell_command(words, "broken")


def test_a_broken_ini_sample_fails():
    with pytest.raises(AssertionError, match="no option"):
        check_ini("[state]\nbakend = airflow_task_state.metastore.MetastoreStateBackend\n", "broken")


# Options named in the text ---------------------------------------------------------------------

# Named in the text although no longer an option, and why.
RETIRED_OPTIONS = {("state", "api_secret"): "earlier versions' worker secret: the pages say to remove it"}


def test_every_option_the_pages_name_exists():
    text = "\n".join(path.read_text() for path in doc_files())
    named = set(re.findall(r"\[(state|state_redis|state_store)\] ([a-z_]+)", text))
    named |= {
        (section.lower(), option.lower())
        for section, option in re.findall(r"AIRFLOW__(STATE|STATE_REDIS)__([A-Z_]+[A-Z])", text)
    }
    named -= {("state_redis", "section")}  # "keep the [state_redis] section as it is"
    for section, option in sorted(named - set(RETIRED_OPTIONS)):
        check_option(section, option, "the documentation")


def test_the_configuration_pages_list_every_option():
    for section, page in (("state", "configuration.md"), ("state_redis", "redis.md")):
        text = (REPO / "docs" / page).read_text()
        unlisted = {
            option
            for option in known_options()[section]
            if f"`{option}`" not in text and f"`[{section}] {option}`" not in text
        }
        unlisted -= {option for (s, option) in RETIRED_OPTIONS if s == section}
        assert not unlisted, f"docs/{page} does not list [{section}] {sorted(unlisted)}"
