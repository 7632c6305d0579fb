"""
The State tab of the task instance page and the State page, in a real browser (Debian's chromium,
driven by Playwright) against the real API server of the operator deployment (conftest.py of this folder).

The deployment is shared with the REST API's tests: these tests change only keys they create, on
the ``load`` task instance of ``operator_alpha``/``first`` (whose task holds asset state, not task
state), and leave it as they found it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

CHROMIUM = Path("/usr/bin/chromium")
# The README's screenshots are rewritten only on request (STATE_UPDATE_SCREENSHOTS=1): a test run
# must not leave the working tree changed. Otherwise they go to a temporary folder.
README_SCREENSHOTS = Path(__file__).parents[2] / "docs" / "screenshots"
# Laptop width by default: the narrowest window the tab is laid out for. The layout tests also run
# at a desktop width (LAYOUT_WIDTHS), in the same pages, resized.
VIEWPORT = {"width": 1280, "height": 900}
LAYOUT_WIDTHS = (1280, 1920)
# How long a page may take to show something (two cores, an API server and a scheduler).
TIMEOUT_MS = 20_000

DAG, RUN = "operator_alpha", "first"
TAB_ROUTE = "plugin/task-state"
PAGE_ROUTE = "plugin/state"
# A task instance that holds no task state of its own: the tests' keys go there.
SCRATCH_TASK = "load"


def ti_path(task_id: str) -> str:
    return f"/dags/{DAG}/runs/{RUN}/tasks/{task_id}"


def is_known_noise(text: str, url: str) -> bool:
    """
    Airflow 3.2.1's own index.html preloads a chunk by a wrong relative path and logs this on every
    page. The same message for our module (its URL under /state/ui/) is a real failure.
    """
    return text.startswith("Failed to load module script") and "/assets/chunk-" in url


# -- the browser ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> Path:
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: dev/setup installs Debian's chromium for the UI tests"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return CHROMIUM


@pytest.fixture(scope="module")
def browser(chromium: Path, operator_deployment) -> Iterator[Any]:
    """Started only once the deployment is there (it is skipped unless --db postgres)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # Debian's browser: Playwright's own download is not reachable. No sandbox: tests run as root.
        browser = playwright.chromium.launch(
            executable_path=str(chromium),
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
        )
        yield browser
        browser.close()


class UI:
    """Opens pages of the deployment's UI as one of its users, and checks them for errors."""

    def __init__(self, browser: Any, deployment: Any) -> None:
        from playwright.sync_api import expect

        expect.set_options(timeout=TIMEOUT_MS)
        self.browser = browser
        self.deployment = deployment
        self.base = deployment.api_url
        self._tokens: dict[str, str] = {}
        # One context per user for the whole module: its HTTP cache spares each page Airflow's
        # 5 MB bundle, which dominates a page load on two busy cores.
        self._contexts: dict[str, Any] = {}

    def token(self, user: str) -> str:
        if user not in self._tokens:
            self._tokens[user] = self.deployment.token(user)
        return self._tokens[user]

    def new_context(self, user: str | None, *, dark: bool = False) -> Any:
        """
        A browser context logged in as *user* (the ``_token`` cookie the login form sets; None:
        not logged in), in dark mode if asked.
        """
        context = self.browser.new_context(viewport=VIEWPORT, base_url=self.base)
        context.set_default_timeout(TIMEOUT_MS)
        if user is not None:
            context.add_cookies([{"name": "_token", "value": self.token(user), "url": self.base}])
        if dark:
            # Airflow's UI keeps the chosen colour mode in localStorage (next-themes, key "theme").
            # The script also runs in frames that may not use localStorage (about:blank).
            context.add_init_script("try { localStorage.setItem('theme', 'dark') } catch (error) {}")
        return context

    @contextlib.contextmanager
    def page(
        self,
        user: str | None,
        path: str,
        *,
        dark: bool = False,
        allowed_errors: str | None = None,
        width: int | None = None,
    ):
        """
        A page at *path* as *user* (in the user's shared context, or in one of its own when
        logged out or dark), *width* pixels wide if asked (else VIEWPORT's). Any console or page
        error but Airflow's known one, or those matching *allowed_errors* (a regex over
        "message (url)"), fails the test.
        """
        shared = user is not None and not dark
        if shared and user not in self._contexts:
            self._contexts[user] = self.new_context(user)
        context = self._contexts[user] if shared else self.new_context(user, dark=dark)
        page = context.new_page()
        if width is not None:
            page.set_viewport_size({"width": width, "height": VIEWPORT["height"]})
        errors: list[str] = []

        def on_console(message: Any) -> None:
            if message.type != "error":
                return
            url = message.location.get("url", "")
            if not is_known_noise(message.text, url):
                errors.append(f"{message.text} ({url})")

        page.on("console", on_console)
        page.on("pageerror", lambda error: errors.append(f"page error: {error}\n{error.stack}"))
        try:
            # The assertions wait for what they need: no need to wait for every resource here.
            page.goto(path, wait_until="commit")
            yield page
        finally:
            page.close()
            if not shared:
                context.close()
        unexpected = [e for e in errors if not (allowed_errors and re.search(allowed_errors, e))]
        assert not unexpected, "errors in the browser:\n" + "\n".join(unexpected)

    def close(self) -> None:
        for context in self._contexts.values():
            context.close()

    # -- the REST API, to seed and check what the browser did -----------------------------------

    def api(self, method: str, path: str, user: str = "admin", **kwargs: Any) -> httpx.Response:
        return httpx.request(
            method,
            f"{self.base}/state/api/v1{path}",
            headers={"Authorization": f"Bearer {self.token(user)}"},
            timeout=30,
            **kwargs,
        )

    def entry_url(self, task_id: str) -> str:
        return f"/dags/{DAG}/dagRuns/{RUN}/taskInstances/{task_id}/stateEntry"

    def put(self, task_id: str, key: str, value: Any) -> None:
        response = self.api("PUT", self.entry_url(task_id), params={"key": key}, json={"value": value})
        assert response.status_code == 200, response.text

    def get(self, task_id: str, key: str) -> httpx.Response:
        return self.api("GET", self.entry_url(task_id), params={"key": key})

    def delete(self, task_id: str, key: str) -> None:
        response = self.api("DELETE", self.entry_url(task_id), params={"key": key})
        assert response.status_code == 204, response.text

    def entries(self, task_id: str) -> dict[str, Any]:
        """Every key of the task instance's state and its value."""
        response = self.api(
            "GET", f"/dags/{DAG}/dagRuns/{RUN}/taskInstances/{task_id}/state", params={"limit": 1000}
        )
        assert response.status_code == 200, response.text
        return {entry["key"]: entry["value"] for entry in response.json()["entries"]}


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    if os.environ.get("STATE_UPDATE_SCREENSHOTS") == "1":
        README_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return README_SCREENSHOTS
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def ui(browser, operator_deployment) -> Iterator[UI]:
    ui = UI(browser, operator_deployment)
    yield ui
    ui.close()


@pytest.fixture
def scratch(ui: UI) -> Iterator[Callable[[str, Any], str]]:
    """
    Put keys on the scratch task instance. Afterwards its state is as before: keys the test added
    are deleted, and keys it changed or removed (a clear removes all) are put back.
    """
    before = ui.entries(SCRATCH_TASK)

    def put(key: str, value: Any) -> str:
        ui.put(SCRATCH_TASK, key, value)
        return key

    yield put
    after = ui.entries(SCRATCH_TASK)
    for key in after.keys() - before.keys():
        ui.delete(SCRATCH_TASK, key)
    for key, value in before.items():
        if key not in after or after[key] != value:
            ui.put(SCRATCH_TASK, key, value)


def state_password() -> str:
    from state_testing.deployment import PASSWORD

    return PASSWORD


def row(page: Any, key: str) -> Any:
    return page.locator(f'[data-testid="state-row"][data-key="{key}"]')


# -- tests ----------------------------------------------------------------------------------------


def test_viewer_logs_in_and_reads_the_state_tab_without_edit_controls(ui: UI) -> None:
    """Through the real login form; the tab is reached from the task instance page's tab bar."""
    from playwright.sync_api import expect

    # Before the login, Airflow's UI asks for its config and is refused: that sends it to the form.
    with ui.page(None, ti_path("submit"), allowed_errors=r"status of 401 .*/ui/config\)$") as page:
        page.wait_for_url(re.compile(r"/auth/login"))
        page.locator("input[name=username]").fill("viewer")
        page.locator("input[name=password]").fill(state_password())
        page.locator("input[name=password]").press("Enter")
        page.wait_for_url(re.compile(re.escape(ti_path("submit")) + r"$"))

        page.get_by_role("link", name="State", exact=True).click()
        page.wait_for_url(re.compile(re.escape(f"{ti_path('submit')}/{TAB_ROUTE}") + "$"))
        expect(row(page, "remote_job_id")).to_contain_text('"operator_alpha-job-001"')
        progress = row(page, "progress").get_by_test_id("state-value")
        # On one line, non-ASCII text as is.
        expect(progress).to_have_text('{"pages": 3, "done": false, "note": "naïve ☃"}')
        expect(row(page, "progress")).to_contain_text(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"))
        # Written by the task's first try, once; it expires after the default retention (a date).
        expect(row(page, "progress").get_by_test_id("state-try")).to_have_text("1")
        expect(row(page, "progress").get_by_test_id("state-version")).to_have_text("1")
        expires = row(page, "progress").get_by_test_id("state-expires")
        expect(expires).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"))
        # Task state shows the try, not a writer.
        expect(row(page, "progress").get_by_test_id("state-writer")).to_have_count(0)
        expect(row(page, "progress").get_by_test_id("state-operator")).to_have_count(0)

        expect(page.get_by_test_id("state-read-only")).to_be_visible()
        for control in ("state-add", "state-clear", "state-edit", "state-delete"):
            expect(page.get_by_test_id(control)).to_have_count(0)


def test_editor_edits_a_value_and_invalid_json_is_refused_before_sending(ui: UI, scratch) -> None:
    from playwright.sync_api import expect

    key = scratch("ui_edit_me", {"n": 1})
    # The conflicting save below is refused with 409, which the browser logs.
    conflict = r"status of 409 \(Conflict\) .*if_version=2\)$"
    with ui.page("editor", f"{ti_path(SCRATCH_TASK)}/{TAB_ROUTE}", allowed_errors=conflict) as page:
        writes: list[str] = []
        page.on("request", lambda request: request.method != "GET" and writes.append(request.url))

        row(page, key).get_by_test_id("state-edit").click()
        dialog = page.get_by_test_id("state-entry-dialog")
        value = dialog.get_by_test_id("state-value-input")
        expect(value).to_have_value('{\n  "n": 1\n}')
        value.fill('{"n": 2,}')
        expect(dialog.get_by_test_id("state-value-problem")).to_contain_text("Invalid JSON")
        expect(dialog.get_by_test_id("state-save")).to_be_disabled()
        value.fill("null")
        expect(dialog.get_by_test_id("state-value-problem")).to_contain_text("delete the key instead")
        expect(dialog.get_by_test_id("state-save")).to_be_disabled()
        assert writes == [], "nothing is sent while the JSON is invalid"

        value.fill('{"n": 2, "ok": true}')
        expect(dialog.get_by_test_id("state-save")).to_be_enabled()
        dialog.get_by_test_id("state-save").click()
        expect(dialog).to_have_count(0)
        expect(row(page, key).get_by_test_id("state-value")).to_have_text('{"n": 2, "ok": true}')
        # The edit replaced only the version it was opened on.
        assert len(writes) == 1 and "stateEntry?key=ui_edit_me" in writes[0] and "if_version=1" in writes[0]
        expect(row(page, key).get_by_test_id("state-version")).to_have_text("2")

        # Someone writes while the dialog is open: saving refuses, and nothing is overwritten.
        row(page, key).get_by_test_id("state-edit").click()
        dialog.get_by_test_id("state-value-input").fill('{"n": 3}')
        ui.put(SCRATCH_TASK, key, {"n": "from elsewhere"})
        dialog.get_by_test_id("state-save").click()
        expect(dialog).to_contain_text("written since you opened it")
        assert ui.get(SCRATCH_TASK, key).json()["value"] == {"n": "from elsewhere"}
        dialog.get_by_role("button", name="Cancel").click()
        expect(row(page, key).get_by_test_id("state-version")).to_have_text("3")
        ui.put(SCRATCH_TASK, key, {"n": 2, "ok": True})

        page.reload()
        expect(row(page, key).get_by_test_id("state-value")).to_have_text('{"n": 2, "ok": true}')
        # An operator's write: no try wrote it.
        expect(row(page, key).get_by_test_id("state-try")).to_have_count(0)
        expect(row(page, key).get_by_test_id("state-operator")).to_have_text("an operator")

    stored = ui.get(SCRATCH_TASK, key).json()
    assert stored["value"] == {"n": 2, "ok": True}
    assert stored["updated_by_try"] is None


def test_editor_adds_and_deletes_a_key_and_sees_the_apis_refusals(ui: UI, scratch) -> None:
    from playwright.sync_api import expect

    existing = scratch("ui_existing", "keep")
    # A key that a URL path would mangle: the UI sends keys as a query parameter.
    key = "ui/added/../key"
    # The value over [state] max_value_bytes below is refused with 413, which the browser logs.
    with ui.page(
        "editor", f"{ti_path(SCRATCH_TASK)}/{TAB_ROUTE}", allowed_errors=r"status of 413 .*/stateEntry\?key="
    ) as page:
        expect(row(page, existing)).to_be_visible()

        # Adding must not overwrite a key that exists.
        page.get_by_test_id("state-add").click()
        dialog = page.get_by_test_id("state-entry-dialog")
        dialog.get_by_test_id("state-key-input").fill(existing)
        dialog.get_by_test_id("state-value-input").fill('"other"')
        dialog.get_by_test_id("state-save").click()
        expect(dialog.get_by_test_id("state-error")).to_contain_text("already exists")
        assert ui.get(SCRATCH_TASK, existing).json()["value"] == "keep"

        # Valid JSON the browser cannot judge: the server refuses it, and its message shows.
        dialog.get_by_test_id("state-key-input").fill(key)
        dialog.get_by_test_id("state-value-input").fill('"' + "x" * 70_000 + '"')
        dialog.get_by_test_id("state-save").click()
        expect(dialog.get_by_test_id("state-error")).to_contain_text("max_value_bytes")
        assert ui.get(SCRATCH_TASK, key).status_code == 404

        dialog.get_by_test_id("state-value-input").fill('[1, 2.5, "three"]')
        dialog.get_by_test_id("state-save").click()
        expect(dialog).to_have_count(0)
        expect(row(page, key).get_by_test_id("state-value")).to_have_text('[1, 2.5, "three"]')
        assert ui.get(SCRATCH_TASK, key).json()["value"] == [1, 2.5, "three"]

        row(page, key).get_by_test_id("state-delete").click()
        confirm = page.get_by_test_id("state-confirm-dialog")
        expect(confirm).to_contain_text(key)
        confirm.get_by_test_id("state-confirm").click()
        expect(row(page, key)).to_have_count(0)
        expect(row(page, existing)).to_be_visible()
    assert ui.get(SCRATCH_TASK, key).status_code == 404


def test_clear_all_asks_for_confirmation(ui: UI, scratch) -> None:
    from playwright.sync_api import expect

    scratch("ui_clear_a", 1)
    scratch("ui_clear_b", 2)
    count = len(ui.entries(SCRATCH_TASK))
    with ui.page("editor", f"{ti_path(SCRATCH_TASK)}/{TAB_ROUTE}") as page:
        expect(page.get_by_test_id("state-row")).to_have_count(count)

        page.get_by_test_id("state-clear").click()
        confirm = page.get_by_test_id("state-confirm-dialog")
        expect(confirm).to_contain_text(f"All {count} keys of this task instance will be deleted")
        confirm.get_by_role("button", name="Cancel").click()
        expect(confirm).to_have_count(0)
        expect(page.get_by_test_id("state-row")).to_have_count(count)
        assert len(ui.entries(SCRATCH_TASK)) == count

        page.get_by_test_id("state-clear").click()
        page.get_by_test_id("state-confirm-dialog").get_by_test_id("state-confirm").click()
        expect(page.get_by_test_id("state-empty")).to_be_visible()
        expect(page.get_by_test_id("state-clear")).to_have_count(0)
    assert ui.entries(SCRATCH_TASK) == {}


# -- readable at laptop and desktop widths ---------------------------------------------------------

# How one element's text is laid out: how many lines its text takes (the distinct tops of its text
# boxes), its content height against one line's, and whether its text is cut (wider than the box).
TEXT_LAYOUT = """element => {
    const style = getComputedStyle(element);
    const range = document.createRange();
    range.selectNodeContents(element);
    const tops = new Set([...range.getClientRects()].map(box => Math.round(box.top)));
    const lineHeight = parseFloat(style.lineHeight) || parseFloat(style.fontSize) * 1.2;
    return {
        lines: tops.size,
        height: element.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom),
        lineHeight,
        cut: element.scrollWidth > element.clientWidth + 1,
        ellipsis: style.textOverflow === "ellipsis",
        verticallyCut: element.scrollHeight > element.clientHeight + 1,
    };
}"""

#: The least width, in px, of the Key and Value columns of the State tab (with its Actions column,
#: the narrowest case), by window width.
MIN_KEY_PX = 140
MIN_VALUE_PX = {1280: 280, 1920: 600}

#: What a job keeps: short values that must read whole on one line, and longer ones that are cut.
SHORT_VALUES = {"ui_spark_job": "spark-app-42", "ui_small_object": {"pages": 3, "done": False}}
LONG_VALUE = {
    "bucket": "s3://warehouse-prod-eu",
    "parts": [f"orders/2026/11/30/part-{part:05d}.snappy.parquet" for part in range(12)],
}
LONG_KEY = "ui_watermark_of_the_orders_table_partitioned_by_region_and_hour_of_arrival"


def one_line(value: Any) -> str:
    """A value as the table shows it: JSON on one line, as Python's json.dumps writes it."""
    return json.dumps(value, ensure_ascii=False)


def assert_reads_on_one_line(element: Any, *, cut: bool) -> None:
    layout = element.evaluate(TEXT_LAYOUT)
    assert layout["lines"] == 1, layout
    assert layout["height"] <= layout["lineHeight"] * 1.2, layout
    assert layout["cut"] is cut, layout
    if cut:
        assert layout["ellipsis"], layout


@pytest.mark.parametrize("width", LAYOUT_WIDTHS)
def test_keys_and_values_read_on_one_line_and_a_cut_one_unfolds_whole(
    ui: UI, scratch, screenshots: Path, width: int
) -> None:
    """
    At a laptop's and a desktop's width: the Key and Value columns have room, a short value reads
    whole on one line, a long value or key is cut with an ellipsis on one line, and its row unfolds
    (keyboard or click) into the whole of it, wrapped, nothing cut.
    """
    from playwright.sync_api import expect

    for key, value in SHORT_VALUES.items():
        scratch(key, value)
    scratch("ui_long_value", LONG_VALUE)
    scratch(LONG_KEY, "2026-11-30T00:00:00+00:00")
    with ui.page("editor", f"{ti_path(SCRATCH_TASK)}/{TAB_ROUTE}", width=width) as page:
        table = page.get_by_test_id("state-table")
        expect(row(page, "ui_spark_job")).to_be_visible()
        headers = {
            name: table.locator("thead th").filter(has_text=re.compile(f"^{name}$")).bounding_box()["width"]
            for name in ("Key", "Value")
        }
        assert headers["Key"] >= MIN_KEY_PX, headers
        assert headers["Value"] >= MIN_VALUE_PX[width], headers
        # The table fits its panel: nothing to scroll sideways to.
        assert table.evaluate("t => t.parentElement.scrollWidth <= t.parentElement.clientWidth")

        for key, value in SHORT_VALUES.items():
            cell = row(page, key).get_by_test_id("state-value")
            expect(cell).to_have_text(one_line(value))
            assert_reads_on_one_line(cell, cut=False)
            assert_reads_on_one_line(row(page, key).get_by_test_id("state-key"), cut=False)
            # Nothing to unfold: it is all there.
            expect(row(page, key).get_by_test_id("state-unfold")).to_have_count(0)

        # A long value: one line, cut; its row unfolds from the keyboard into the whole value.
        long_row = row(page, "ui_long_value")
        assert_reads_on_one_line(long_row.get_by_test_id("state-value"), cut=True)
        unfold = long_row.get_by_test_id("state-unfold")
        expect(unfold).to_have_attribute("aria-expanded", "false")
        unfold.focus()
        page.keyboard.press("Enter")
        expect(unfold).to_have_attribute("aria-expanded", "true")
        whole = page.get_by_test_id("state-whole-value")
        expect(whole).to_have_text(json.dumps(LONG_VALUE, indent=2))
        layout = whole.evaluate(TEXT_LAYOUT)
        assert not layout["cut"] and not layout["verticallyCut"], layout
        assert unfold.get_attribute("aria-controls") == page.get_by_test_id("state-whole").get_attribute("id")
        page.screenshot(path=str(screenshots / f"state-tab-unfolded-{width}.png"))
        page.keyboard.press("Space")
        expect(whole).to_have_count(0)
        # A click on the cut value unfolds it too.
        long_row.get_by_test_id("state-value").click()
        expect(whole).to_have_text(json.dumps(LONG_VALUE, indent=2))

        # A long key: cut in its column, whole in its unfolded row.
        key_row = row(page, LONG_KEY)
        assert_reads_on_one_line(key_row.get_by_test_id("state-key"), cut=True)
        key_row.get_by_test_id("state-unfold").click()
        expect(page.get_by_test_id("state-whole-key")).to_have_text(LONG_KEY)


@pytest.mark.parametrize("width", LAYOUT_WIDTHS)
def test_asset_state_reads_on_one_line_and_its_writer_unfolds(ui: UI, width: int) -> None:
    """The State page's asset entries: the value on one line; a writer too long for its column unfolds."""
    from playwright.sync_api import expect

    with ui.page("ops", f"/{PAGE_ROUTE}", width=width) as page:
        page.get_by_test_id("state-asset-row").filter(has_text="operator_alpha_orders").click()
        watermark = row(page, "watermark")
        cell = watermark.get_by_test_id("state-value")
        expect(cell).to_have_text('"2026-11-30T00:00:00+00:00"')
        assert_reads_on_one_line(cell, cut=False)
        value_width = page.get_by_test_id("state-table").locator("thead th").nth(2).bounding_box()["width"]
        assert value_width >= MIN_VALUE_PX[width], value_width
        writer = f"operator_alpha / {RUN} / load, try 1"
        expect(watermark.get_by_test_id("state-writer")).to_have_text(writer)
        # The writer's line, under the time, is cut at any width: the unfolded row shows it whole.
        assert_reads_on_one_line(watermark.get_by_test_id("state-written"), cut=True)
        watermark.get_by_test_id("state-unfold").click()
        expect(page.get_by_test_id("state-whole-writer")).to_have_text(f"Last written by {writer}")


@contextlib.contextmanager
def page_of_another_origin(html: str) -> Iterator[str]:
    """Serves *html* from another port of 127.0.0.1: another origin, but the same site (cookies)."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_of_another_origin_cannot_change_state_with_the_users_cookie(ui: UI, scratch) -> None:
    """
    What a page needs no CORS preflight for, with the editor's cookie in the browser: a no-cors
    fetch (its body goes as text/plain) and an HTML form's POST. The counter does not move.
    """
    counter = scratch("ui_csrf_counter", 5)
    url = f"{ui.base}/state/api/v1{ui.entry_url(SCRATCH_TASK)}".replace("stateEntry", "stateIncrement")
    url += f"?key={counter}"
    html = f"""<!doctype html><title>loading</title>
<form id="form" method="POST" action="{url}"></form>
<script>
  fetch("{url}", {{method: "POST", mode: "no-cors", credentials: "include", body: '{{"by": 1000}}'}})
    .finally(() => {{ document.title = "fetched"; }});
</script>"""
    with (
        page_of_another_origin(html) as attacker,
        ui.page("editor", attacker, allowed_errors=r"status of 415 ") as page,
    ):
        page.wait_for_function("document.title === 'fetched'")
        page.evaluate("document.getElementById('form').submit()")
        page.wait_for_url(re.compile(r"/stateIncrement\?"))
        assert "application/json" in page.content()
    assert ui.get(SCRATCH_TASK, counter).json()["value"] == 5


def test_state_page_lists_assets_and_finds_a_runs_task_instances(ui: UI, screenshots: Path) -> None:
    from playwright.sync_api import expect

    with ui.page("ops", "/dags") as page:
        # Reached through the Browse menu.
        page.get_by_role("button", name="Browse").click()
        page.get_by_role("menuitem", name="State").click()
        page.wait_for_url(re.compile(PAGE_ROUTE + "$"))

        assets = page.get_by_test_id("state-asset-row")
        expect(assets.filter(has_text="operator_alpha_orders")).to_be_visible()
        expect(assets.filter(has_text="operator_beta_orders")).to_be_visible()
        assets.filter(has_text="operator_alpha_orders").click()
        expect(row(page, "watermark")).to_contain_text('"2026-11-30T00:00:00+00:00"')
        # Asset state records no try but who wrote it last; it never expires unless asked.
        expect(row(page, "watermark").get_by_test_id("state-try")).to_have_count(0)
        expect(row(page, "watermark").get_by_test_id("state-writer")).to_have_text(
            f"operator_alpha / {RUN} / load, try 1"
        )
        expect(row(page, "watermark").get_by_test_id("state-expires")).to_have_text("never")
        expect(row(page, "watermark").get_by_test_id("state-version")).to_have_text("1")
        # op may edit asset state.
        expect(row(page, "watermark").get_by_test_id("state-edit")).to_be_visible()

        tasks = page.get_by_test_id("state-tasks")
        choose(tasks, DAG, RUN)
        instances = tasks.get_by_test_id("state-ti-row")
        expect(instances).to_have_count(3)
        expect(instances.nth(0)).to_contain_text("partition")
        expect(instances.nth(0)).to_contain_text("0")
        expect(instances.nth(1)).to_contain_text("1")
        expect(instances.nth(2)).to_contain_text("submit")
        instances.nth(2).click()
        expect(row(tasks, "remote_job_id")).to_contain_text('"operator_alpha-job-001"')

        page.screenshot(path=str(screenshots / "state-page.png"))

        # The selection is in the URL: a reload shows the same.
        page.reload()
        expect(row(page.get_by_test_id("state-tasks"), "progress")).to_be_visible()
        expect(row(page.get_by_test_id("state-assets"), "watermark")).to_be_visible()

        # And each task instance links to its own State tab.
        instances.nth(0).get_by_role("link", name="Open task instance").click()
        page.wait_for_url(re.compile(re.escape(f"{ti_path('partition')}/mapped/0/{TAB_ROUTE}") + "$"))
        expect(row(page, "offset").get_by_test_id("state-value")).to_have_text("0")


def test_rights_follow_the_user(ui: UI) -> None:
    """
    editor may change task state but not asset state; alice, granted operator_alpha only, finds
    its task state and is refused operator_beta's, with the API's message.
    """
    from playwright.sync_api import expect

    with ui.page("editor", f"/{PAGE_ROUTE}") as page:
        page.get_by_test_id("state-asset-row").filter(has_text="operator_alpha_orders").click()
        expect(row(page, "watermark")).to_be_visible()
        expect(page.get_by_test_id("state-assets").get_by_test_id("state-read-only")).to_be_visible()
        expect(page.get_by_test_id("state-assets").get_by_test_id("state-edit")).to_have_count(0)

    # The test auth manager refuses alice the DAG list (no DAG named), so the DAG is typed.
    with ui.page("alice", f"/{PAGE_ROUTE}", allowed_errors=r"status of 403 ") as page:
        tasks = page.get_by_test_id("state-tasks")
        choose(tasks, "operator_beta", RUN)
        expect(tasks.get_by_test_id("state-error").filter(has_text="operator_beta")).to_contain_text(
            "needs read permission"
        )
        expect(tasks.get_by_test_id("state-ti-row")).to_have_count(0)
        choose(tasks, DAG, RUN)
        expect(tasks.get_by_test_id("state-ti-row")).to_have_count(3)
        tasks.get_by_test_id("state-ti-row").filter(has_text="submit").click()
        expect(row(tasks, "remote_job_id")).to_be_visible()


def choose(tasks: Any, dag_id: str, run_id: str) -> None:
    """
    Type a DAG id and a run id into the State page's pickers, as a person does: choosing a DAG
    clears the run field, and the run is typed once it has. Typed sooner, on a busy machine, the
    run id lands in the field before the DAG's choice clears it (the same run id was there already,
    so Enter changes nothing), and the choice clears it.
    """
    from playwright.sync_api import expect

    dag, run = tasks.get_by_test_id("state-dag-input"), tasks.get_by_test_id("state-run-input")
    dag.fill(dag_id)
    dag.press("Enter")
    expect(run).to_have_value("")
    run.fill(run_id)
    run.press("Enter")


def test_mapped_task_tab_offers_its_map_indices(ui: UI) -> None:
    from playwright.sync_api import expect

    # The host asks for the task instance of map index -1 and gets a 404, as does our list.
    with ui.page("viewer", f"{ti_path('partition')}/{TAB_ROUTE}", allowed_errors=r"status of 404") as page:
        page.get_by_role("link", name="Map index 1 (1 key)").click()
        page.wait_for_url(re.compile(re.escape(f"{ti_path('partition')}/mapped/1/{TAB_ROUTE}") + "$"))
        expect(row(page, "offset").get_by_test_id("state-value")).to_have_text("1000")


def test_light_and_dark_screenshots(ui: UI, screenshots: Path) -> None:
    from playwright.sync_api import expect

    for dark, name in ((False, "state-tab.png"), (True, "state-tab-dark.png")):
        with ui.page("editor", f"{ti_path('submit')}/{TAB_ROUTE}", dark=dark) as page:
            expect(row(page, "progress")).to_be_visible()
            expect(page.locator("html")).to_have_class(re.compile("dark" if dark else "light"))
            background = page.get_by_test_id("state-table").evaluate(background_of)
            assert (luminance(background) < 0.2) == dark, background
            page.screenshot(path=str(screenshots / name))


# The first opaque background colour from an element up, as [r, g, b]. Chakra's colours may be
# oklch(...): a canvas converts any CSS colour to RGB.
background_of = """element => {
    const rgb = colour => {
        const canvas = document.createElement("canvas");
        canvas.width = canvas.height = 1;
        const context = canvas.getContext("2d");
        context.fillStyle = colour;
        context.fillRect(0, 0, 1, 1);
        return Array.from(context.getImageData(0, 0, 1, 1).data);
    };
    for (let node = element; node; node = node.parentElement) {
        const [red, green, blue, alpha] = rgb(getComputedStyle(node).backgroundColor);
        if (alpha === 255) return [red, green, blue];
    }
    return rgb(getComputedStyle(document.body).backgroundColor).slice(0, 3);
}"""


def luminance(rgb: list[int]) -> float:
    red, green, blue = (part / 255 for part in rgb)
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


# -- following a running task ----------------------------------------------------------------------

LIVE_DAG, LIVE_TASK = "operator_live", "count"
# As tests/dags/state_operator_dags.py writes them: the counter goes 1..30, one write every 0.5 s.
LIVE_WRITES = 30
# The deployment keeps Airflow's default [api] auto_refresh_interval, which the tab follows.
REFRESH_SECONDS = 3

# Hides (true) or shows (false) the page, as switching browser tabs does: headless Chromium's pages
# are always visible, so the document's visibilityState is replaced, and its event sent.
SET_HIDDEN = """hidden => {
    const state = hidden ? "hidden" : "visible";
    Object.defineProperty(document, "visibilityState", {configurable: true, get: () => state});
    document.dispatchEvent(new Event("visibilitychange"));
}"""


class TabReads:
    """The tab's own reads of the live task instance, in the order the browser sent them, and when."""

    def __init__(self, page: Any, run_id: str) -> None:
        ti = f"/dags/{LIVE_DAG}/dagRuns/{run_id}/taskInstances/{LIVE_TASK}"
        self.instance = re.compile(re.escape(f"/api/v2{ti}") + "$")
        self.entries = re.compile(re.escape(f"/state/api/v1{ti}/state") + r"\?")
        self.sent: list[tuple[float, str]] = []
        page.on("request", self._record)

    def ours(self, request: Any) -> bool:
        # Airflow's own page reads the same task instance; the tab's fetch asks for JSON alone.
        return request.headers.get("accept") == "application/json"

    def _record(self, request: Any) -> None:
        if not self.ours(request):
            return
        if self.instance.search(request.url):
            self.sent.append((time.monotonic(), "instance"))
        elif self.entries.search(request.url):
            self.sent.append((time.monotonic(), "entries"))

    def since(self, moment: float, kind: str | None = None) -> list[float]:
        return [sent for sent, what in self.sent if sent >= moment and kind in (None, what)]


def trigger(ui: UI, dag_id: str, run_id: str) -> None:
    """Through the REST API: quicker than a CLI process, and its task instances exist at once."""
    response = httpx.post(
        f"{ui.base}/api/v2/dags/{dag_id}/dagRuns",
        headers={"Authorization": f"Bearer {ui.token('admin')}"},
        json={"dag_run_id": run_id, "logical_date": None},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def test_state_tab_follows_a_running_task_and_keeps_an_edit_in_progress(
    ui: UI, operator_deployment, screenshots: Path
) -> None:
    """
    A task writes a counter every 0.5 s for 15 s (from when the test says "go"), watched by three
    tabs. The first shows it grow without a reload; an edit started meanwhile keeps its text across
    refreshes and saves; once the task instance ends, one last refresh and nothing after. The
    second loses the network for a while: it backs off and comes back. The third is hidden (nothing
    sent), shown again (read at once), then refused (the user's rights withdrawn): it stops and
    says why.
    """
    from playwright.sync_api import expect

    run_id = f"live-{uuid.uuid4().hex[:8]}"
    operator_deployment.wait_for_dag(LIVE_DAG, timeout=120)
    trigger(ui, LIVE_DAG, run_id)
    # Its task instance exists at once: the tabs open on it before it starts (no state yet).
    assert [ti["task_id"] for ti in operator_deployment.task_instances(LIVE_DAG, run_id)] == [LIVE_TASK]
    path = f"/dags/{LIVE_DAG}/runs/{run_id}/tasks/{LIVE_TASK}/{TAB_ROUTE}"
    entry = f"/dags/{LIVE_DAG}/dagRuns/{run_id}/taskInstances/{LIVE_TASK}/stateEntry"

    # Airflow 3.2.1's own page, polling a running task instance, now and then cancels one of its
    # queries through an AbortController and leaves the rejection unhandled (about one run in ten).
    # The tab uses no AbortSignal, so this message cannot be its own.
    host_cancel = "page error: signal is aborted without reason"
    with contextlib.ExitStack() as stack:
        page = stack.enter_context(ui.page("editor", path, allowed_errors=host_cancel))
        offline = stack.enter_context(ui.page("editor", path, allowed_errors=f"ERR_FAILED|{host_cancel}"))
        refused = stack.enter_context(ui.page("editor", path, allowed_errors=f"status of 403 |{host_cancel}"))
        reads = {tab: TabReads(tab, run_id) for tab in (page, offline, refused)}
        for tab in (page, offline, refused):
            # Three pages loading at once on two busy cores.
            expect(tab.get_by_test_id("state-live")).to_be_visible(timeout=60_000)
        page.evaluate("window.stateTabNotReloaded = true")
        # The task has started (it wrote its note) and waits for the word to count.
        expect(row(page, "note")).to_be_visible(timeout=90_000)
        ui.api("PUT", entry, params={"key": "go"}, json={"value": True}).raise_for_status()

        def cut_off(route: Any) -> None:
            # The tab's reads only: Airflow's page reads the same task instance and must not fail.
            if reads[offline].ours(route.request):
                route.abort()
            else:
                route.continue_()

        offline.route(reads[offline].entries, cut_off)
        offline.route(reads[offline].instance, cut_off)
        offline_since = time.monotonic()

        # The counter appears and grows, in the same page.
        counter = row(page, "counter").get_by_test_id("state-value")
        expect(counter).to_be_visible()
        first = int(counter.inner_text())
        expect(counter).not_to_have_text(str(first))
        assert int(counter.inner_text()) > first
        expect(page.get_by_test_id("state-updated")).to_have_text(re.compile(r"^updated \d\d:\d\d:\d\d$"))
        page.screenshot(path=str(screenshots / "state-tab-live.png"))

        refused.evaluate(SET_HIDDEN, True)
        hidden_since = time.monotonic()

        # No network: the failure shows, and the next try waits twice the interval.
        expect(offline.get_by_test_id("state-refresh-problem")).to_contain_text(
            re.compile(r"Could not reach the API server .*: trying again in \d+ s")
        )
        offline.unroute(reads[offline].entries)
        offline.unroute(reads[offline].instance)
        back_online = time.monotonic()
        failed = reads[offline].since(offline_since, "instance")

        # An edit started while it runs: the table behind the dialog refreshes, the typed text stays.
        row(page, "note").get_by_test_id("state-edit").click()
        dialog = page.get_by_test_id("state-entry-dialog")
        typed = '{"typed": "while it runs"}'
        dialog.get_by_test_id("state-value-input").fill(typed)
        behind = counter.inner_text()
        expect(counter).not_to_have_text(behind)
        expect(dialog.get_by_test_id("state-value-input")).to_have_value(typed)
        expect(dialog.get_by_test_id("state-value-input")).to_be_focused()
        dialog.get_by_test_id("state-save").click()
        expect(dialog).to_have_count(0)
        saved = row(page, "note").get_by_test_id("state-value")
        expect(saved).to_have_text('{"typed": "while it runs"}')

        # Editing the key the task keeps writing: the text stays, and the dialog says Save would be refused.
        row(page, "counter").get_by_test_id("state-edit").click()
        dialog.get_by_test_id("state-value-input").fill("-1")
        expect(dialog.get_by_test_id("state-entry-moved")).to_contain_text("Save will be refused")
        expect(dialog.get_by_test_id("state-value-input")).to_have_value("-1")
        dialog.get_by_role("button", name="Cancel").click()
        expect(dialog).to_have_count(0)

        # Hidden: nothing sent (but a read already under way) for longer than an interval. Shown
        # again: read at once, with rights withdrawn meanwhile (alice may not read this DAG).
        page.wait_for_timeout(max(0, (hidden_since + REFRESH_SECONDS + 0.5 - time.monotonic()) * 1000))
        assert reads[refused].since(hidden_since + 0.5) == []

        def as_alice(route: Any) -> None:
            answer = ui.api("GET", route.request.url.split("/state/api/v1", 1)[1], user="alice")
            route.fulfill(status=answer.status_code, body=answer.content, content_type="application/json")

        refused.route(reads[refused].entries, as_alice)
        shown = time.monotonic()
        refused.evaluate(SET_HIDDEN, False)
        stopped = refused.get_by_test_id("state-entries").get_by_test_id("state-error")
        expect(stopped).to_contain_text("Stopped refreshing")
        expect(stopped).to_contain_text("needs read permission")
        assert reads[refused].since(shown, "instance")[0] - shown < 1, "not read at once when shown"
        expect(refused.get_by_test_id("state-live")).to_have_count(0)
        stopped_at = time.monotonic()

        # The end: one last refresh shows the final value, then the tab stops asking.
        expect(page.get_by_test_id("state-updated")).to_contain_text(
            "the task instance ended (success), no longer refreshing", timeout=90_000
        )
        expect(page.get_by_test_id("state-live")).to_have_count(0)
        expect(counter).to_have_text(str(LIVE_WRITES))
        ended = time.monotonic()
        page.wait_for_timeout(REFRESH_SECONDS * 1000 + 1000)
        assert reads[page].since(ended) == [], "the tab still reads the task instance after it ended"
        assert reads[refused].since(stopped_at) == [], "a refused tab still reads"
        assert page.evaluate("window.stateTabNotReloaded") is True
        # One request at a time, one interval apart: the task instance, then its entries.
        instance_reads = reads[page].since(0, "instance")
        assert len(instance_reads) >= 4, reads[page].sent
        gaps = [b - a for a, b in itertools.pairwise(instance_reads)]
        assert min(gaps) >= REFRESH_SECONDS - 0.5, gaps

        # The network is back: the offline tab catches up, with the final value.
        expect(offline.get_by_test_id("state-updated")).to_contain_text("ended (success)", timeout=30_000)
        expect(row(offline, "counter").get_by_test_id("state-value")).to_have_text(str(LIVE_WRITES))
        tries = reads[offline].since(failed[0], "instance")
        assert len(tries) >= 2, reads[offline].sent
        assert tries[1] - tries[0] >= 2 * REFRESH_SECONDS - 0.5, (tries, back_online)

    stored = ui.api("GET", entry, params={"key": "note"}).json()
    assert stored["value"] == {"typed": "while it runs"}
    assert stored["updated_by_try"] is None


def test_a_large_value_shows_what_and_where_it_is_and_downloads_only_when_asked(
    ui: UI, scratch, operator_objects, monkeypatch
) -> None:
    """The tab never loads a large value: it shows its size, digest and path, and a Download link."""
    from airflow_task_state import object_storage
    from playwright.sync_api import expect

    monkeypatch.setenv("AIRFLOW__STATE__OBJECT_STORAGE_PATH", f"file://{operator_objects}")
    data = os.urandom(3 * 1024 * 1024)
    reference = object_storage.write([data], "bytes")
    key = scratch("ui_large_checkpoint", reference.as_value())  # an operator may store a fresh one
    with ui.page("viewer", f"{ti_path(SCRATCH_TASK)}/{TAB_ROUTE}") as page:
        value = row(page, key).get_by_test_id("state-value")
        expect(value).to_have_text(f"file, 3.0 MiB, blake3 {reference.digest[:12]}…, at {reference.path}")
        link = row(page, key).get_by_test_id("state-download")
        expect(link).to_have_text("Download 3.0 MiB")
        fetched = page.request.get(link.get_attribute("href"))
        assert fetched.ok and fetched.body() == data
        assert fetched.headers["x-content-digest"] == f"blake3={reference.digest}"
