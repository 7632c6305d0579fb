/*
 * The State tab of Airflow's task instance page and the State page of the Browse menu.
 *
 * How it is loaded: Airflow 3.2's UI imports this file as an ES module (`import(bundle_url)`),
 * then renders the function it finds at `globalThis[<react app name>]` inside its own React tree,
 * with the route's `{dagId, runId, taskId, mapIndex}` as props (none on the navigation page).
 * Both apps of the plugin are named "State", so one component serves both and tells them apart by
 * its props.
 *
 * Why hand-written: the host page exposes its React and Chakra UI as globals (`globalThis.React`,
 * `globalThis.ChakraUI`, ...). A component must use the host's React (a second copy breaks hooks)
 * and gets the host's theme, dark mode included, from the host's Chakra provider for free. So
 * `React.createElement` over those globals needs no bundler, and CI needs no Node build.
 *
 * Every call goes to the state plugin's REST API (`state/api/v1/...`) or Airflow's public API
 * (`api/v2/...`), relative to the page's <base href> (so a `[api] base_url` path prefix works),
 * with the user's own session cookie: the UI has exactly the rights the user has.
 */

const React = globalThis.React;
const Chakra = globalThis.ChakraUI;
const RouterDOM = globalThis.ReactRouterDOM;
if (!React || !Chakra || !RouterDOM) {
  // Only Airflow's UI sets these; the loader shows this message on its error page.
  throw new Error("The State plugin must be loaded by Airflow's UI (React, ChakraUI and ReactRouterDOM globals are missing).");
}

const { createElement: h, Fragment, useCallback, useEffect, useId, useMemo, useReducer, useRef, useState } = React;
const {
  Alert, Badge, Box, Button, Dialog, Field, Flex, HStack, Heading, IconButton, Input, Link,
  Portal, Spinner, Stack, Table, Text, Textarea,
} = Chakra;

const STATE_API = "state/api/v1";
const AIRFLOW_API = "api/v2";
const PAGE_SIZE = 50;
/** Same limits as the server's (keys 1..512 characters, no NUL), checked before sending. */
const MAX_KEY_LENGTH = 512;
/** The task instance tab's url_route (plugin.py), to link from the State page to the tab. */
const TASK_TAB_ROUTE = "task-state";
/**
 * How often the State tab re-reads a task instance that may still write its state, when Airflow's
 * own `[api] auto_refresh_interval` (what its grid and task pages use, 3 s by default) is not known.
 */
const DEFAULT_REFRESH_SECONDS = 3;
/** The longest wait between two tries after failed refreshes (the wait doubles from the interval). */
const MAX_BACKOFF_MS = 60_000;
/**
 * Task instance states that no longer change by themselves: Airflow's terminal states. Every other
 * state (none, scheduled, queued, running, restarting, up_for_retry, up_for_reschedule, deferred, and
 * any state a later Airflow adds) may still lead to a try that writes state, so the tab follows it.
 */
const FINISHED_STATES = new Set(["success", "failed", "skipped", "upstream_failed", "removed"]);
/**
 * A task instance found finished when the tab opens may have finished while the tab's first list was
 * read: re-read once if it ended this recently (by the browser's clock, hence generous).
 */
const JUST_ENDED_MS = 60_000;

// ---------------------------------------------------------------------------------------------
// HTTP

/** A failed call, carrying the API's own `message` (what was wrong and how to fix it). */
class ApiError extends Error {
  constructor(status, reason, message) {
    super(message);
    this.status = status;
    this.reason = reason;
  }
}

/** `?a=1&b=2` from an object, leaving out undefined, null and empty values. */
function queryString(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(name, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

/** The readable message of an error response, whatever its shape. */
function errorMessage(status, body, text) {
  const detail = body && body.detail;
  // Ours: {"detail": {"reason", "message"}}.
  if (detail && typeof detail === "object" && !Array.isArray(detail) && detail.message) return detail.message;
  // Airflow's public API and its auth dependencies: {"detail": "..."}.
  if (typeof detail === "string") return detail;
  // FastAPI's validation errors: {"detail": [{"msg", "loc"}, ...]}.
  if (Array.isArray(detail)) return detail.map((item) => item.msg || JSON.stringify(item)).join("; ");
  if (status === 401) return "Your session has expired: log in again.";
  return `The server answered HTTP ${status}${text ? `: ${text.slice(0, 200)}` : ""}`;
}

/**
 * Call an API with the user's session cookie; resolve with the JSON body (null for 204) or
 * reject with an ApiError.
 */
async function request(method, url, body) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
  if (body !== undefined) {
    // Declared JSON: the API refuses a POST or PUT with the session cookie that is not (415), since
    // a page of another origin can send a form or a text/plain body with that cookie, unasked.
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (error) {
    throw new ApiError(0, "network", `Could not reach the API server (${error.message}).`);
  }
  if (response.status === 204) return null;
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // Not JSON (a proxy's error page, say): the message falls back to the text.
  }
  if (!response.ok) {
    const reason = data && data.detail && typeof data.detail === "object" ? data.detail.reason : undefined;
    throw new ApiError(response.status, reason, errorMessage(response.status, data, text));
  }
  return data;
}

/**
 * Fetch `url` whenever it changes (or `reload()` is called); null skips fetching.
 * Returns {data, error, loading, reload}. A late answer to an older URL is dropped.
 */
function useFetch(url) {
  const [result, setResult] = useState({ data: null, error: null, loading: Boolean(url) });
  const [generation, reload] = useReducer((n) => n + 1, 0);
  useEffect(() => {
    if (!url) {
      setResult({ data: null, error: null, loading: false });
      return undefined;
    }
    let current = true;
    setResult((previous) => ({ ...previous, loading: true }));
    request("GET", url).then(
      (data) => current && setResult({ data, error: null, loading: false }),
      (error) => current && setResult({ data: null, error, loading: false }),
    );
    return () => {
      current = false;
    };
  }, [url, generation]);
  return { ...result, reload };
}

/**
 * useFetch, plus `refresh()`: a quiet re-read for following a running task. It shows no spinner,
 * keeps the data shown when it fails (the caller backs off and says so) and returns a promise, so
 * that the caller sends one request at a time. Answers apply in the order the requests were sent:
 * an older answer, or one for a URL no longer shown, never replaces a newer one.
 */
function useLiveFetch(url) {
  const [result, setResult] = useState({ data: null, error: null, loading: true });
  const [generation, reload] = useReducer((n) => n + 1, 0);
  const order = useRef({ url, sent: 0, applied: 0 });
  order.current.url = url;
  const apply = (requested, sequence, next) => {
    const current = order.current;
    if (requested !== current.url || sequence < current.applied) return false;
    current.applied = sequence;
    setResult(next);
    return true;
  };
  useEffect(() => {
    const sequence = ++order.current.sent;
    setResult((previous) => ({ ...previous, loading: true }));
    request("GET", url).then(
      (data) => apply(url, sequence, { data, error: null, loading: false }),
      (error) => apply(url, sequence, { data: null, error, loading: false }),
    );
  }, [url, generation]);
  const refresh = useCallback(async () => {
    const requested = order.current.url;
    const sequence = ++order.current.sent;
    const data = await request("GET", requested);
    apply(requested, sequence, { data, error: null, loading: false });
  }, []);
  return { ...result, reload, refresh };
}

/** Airflow's `[api] auto_refresh_interval` in ms, read once per page from its UI config. */
let refreshInterval = null;
function refreshIntervalMs() {
  if (!refreshInterval) {
    refreshInterval = request("GET", "ui/config").then(
      (config) => {
        const seconds = Number(config && config.auto_refresh_interval);
        // At least a second: a misconfigured 0 must not turn the tab into a request loop.
        return Math.max(Number.isFinite(seconds) && seconds > 0 ? seconds : DEFAULT_REFRESH_SECONDS, 1) * 1000;
      },
      () => DEFAULT_REFRESH_SECONDS * 1000,
    );
  }
  return refreshInterval;
}

/**
 * Follow a task instance while it may still write its state: read its state (Airflow's public API,
 * `instanceUrl`), then call `refreshEntries()`, every refresh interval, one request at a time,
 * until it reaches a finished state; then refresh once more and stop. Nothing is sent while the
 * browser tab is hidden (it resumes at once when shown). Failures back off (the interval doubling
 * up to MAX_BACKOFF_MS); a 401 or 403 stops following, as does a 404 (no such task instance: a
 * mapped task's page without a map index, say). A change of `restartKey` starts over.
 *
 * Returns {phase, tiState, updatedAt, error, retryInMs, intervalMs}, where phase is "idle" (not
 * followed: finished when opened, or not found), "live", "retrying", "ended" (finished while
 * followed) or "stopped" (refused).
 */
function useFollowTaskInstance(instanceUrl, refreshEntries, restartKey) {
  const [follow, setFollow] = useState({ phase: "idle" });
  const refreshRef = useRef(refreshEntries);
  refreshRef.current = refreshEntries;
  useEffect(() => {
    // Another task instance (the host's router reuses the tab) or a restart: nothing known yet.
    setFollow({ phase: "idle" });
    if (!instanceUrl) return undefined;
    let cancelled = false;
    let wake = null;
    const wait = (ms) =>
      new Promise((resolve) => {
        const timer = setTimeout(resolve, ms);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    const hidden = () => document.visibilityState === "hidden";
    const onVisibility = () => !hidden() && wake && wake();
    document.addEventListener("visibilitychange", onVisibility);

    const run = async () => {
      let failures = 0;
      let first = true;
      let intervalMs = DEFAULT_REFRESH_SECONDS * 1000;
      while (!cancelled) {
        if (hidden()) {
          // Woken by visibilitychange; the long timeout only guards against a missed event.
          await wait(MAX_BACKOFF_MS);
          continue;
        }
        try {
          const ti = await request("GET", instanceUrl);
          if (cancelled) return;
          const finished = FINISHED_STATES.has(ti.state);
          if (first && finished) {
            const endedAt = ti.end_date ? Date.parse(ti.end_date) : NaN;
            if (Date.now() - endedAt < JUST_ENDED_MS) await refreshRef.current();
            if (!cancelled) setFollow({ phase: "idle", tiState: ti.state });
            return;
          }
          if (first) {
            // The tab loaded its entries as it opened: the first re-read is one interval away.
            intervalMs = await refreshIntervalMs();
          } else {
            await refreshRef.current();
          }
          if (cancelled) return;
          first = false;
          failures = 0;
          const updatedAt = new Date();
          if (finished) {
            setFollow({ phase: "ended", tiState: ti.state, updatedAt, intervalMs });
            return;
          }
          setFollow({ phase: "live", tiState: ti.state, updatedAt, intervalMs });
          await wait(intervalMs);
        } catch (error) {
          if (cancelled) return;
          if (error.status === 401 || error.status === 403) {
            setFollow((previous) => ({ ...previous, phase: "stopped", error }));
            return;
          }
          if (error.status === 404) {
            setFollow({ phase: "idle" });
            return;
          }
          failures += 1;
          const retryInMs = Math.min(intervalMs * 2 ** failures, MAX_BACKOFF_MS);
          setFollow((previous) => ({ ...previous, phase: "retrying", error, retryInMs }));
          await wait(retryInMs);
        }
      }
    };
    run();
    return () => {
      cancelled = true;
      document.removeEventListener("visibilitychange", onVisibility);
      if (wake) wake();
    };
  }, [instanceUrl, restartKey]);
  return follow;
}

/** "17:02:03", in the user's time zone: when the tab last re-read its entries. */
function formatClock(date) {
  try {
    return new Intl.DateTimeFormat("en-GB", {
      timeZone: selectedTimeZone(), hourCycle: "h23", hour: "2-digit", minute: "2-digit", second: "2-digit",
    }).format(date);
  } catch {
    return date.toLocaleTimeString(); // An unknown time zone name.
  }
}

/** `value`, once it has stopped changing for `delay` ms (typing in a filter box). */
function useDebounced(value, delay) {
  const [settled, setSettled] = useState(value);
  useEffect(() => {
    const timer = setTimeout(() => setSettled(value), delay);
    return () => clearTimeout(timer);
  }, [value, delay]);
  return settled;
}

// ---------------------------------------------------------------------------------------------
// Scopes: where a table's entries live, and the URLs of their operations. Keyed calls always use
// the `stateEntry?key=` form: a key may hold `/`, `.` or `..`, which a URL path would mangle.

const enc = encodeURIComponent;

function taskScope(dagId, runId, taskId, mapIndex) {
  const base = `${STATE_API}/dags/${enc(dagId)}/dagRuns/${enc(runId)}/taskInstances/${enc(taskId)}`;
  const map_index = mapIndex === undefined || mapIndex === null ? -1 : Number(mapIndex);
  return {
    id: JSON.stringify(["task", dagId, runId, taskId, map_index]),
    noun: map_index >= 0 ? `task instance (map index ${map_index})` : "task instance",
    hasTries: true,
    hasWriters: false,
    listUrl: (params) => `${base}/state${queryString({ map_index, ...params })}`,
    entryUrl: (key, params) => `${base}/stateEntry${queryString({ key, map_index, ...params })}`,
    objectUrl: (key) => `${base}/stateObject${queryString({ key, map_index })}`,
    clearUrl: () => `${base}/state${queryString({ map_index })}`,
    // Airflow's own record of the task instance (its state), read to follow it while it runs.
    instanceUrl: `${AIRFLOW_API}/dags/${enc(dagId)}/dagRuns/${enc(runId)}/taskInstances/${enc(taskId)}${map_index >= 0 ? `/${map_index}` : ""}`,
  };
}

function assetScope(assetId) {
  const base = `${STATE_API}/assets/${enc(assetId)}`;
  return {
    id: JSON.stringify(["asset", assetId]),
    noun: "asset",
    // Asset state is shared by every task that writes it: it records the whole writer, not a try.
    hasTries: false,
    hasWriters: true,
    listUrl: (params) => `${base}/state${queryString(params)}`,
    entryUrl: (key, params) => `${base}/stateEntry${queryString({ key, ...params })}`,
    objectUrl: (key) => `${base}/stateObject${queryString({ key })}`,
    clearUrl: () => `${base}/state`,
  };
}

/** The path (for the host's router) of a task instance's State tab. */
function taskTabPath(dagId, runId, taskId, mapIndex) {
  const mapped = mapIndex !== undefined && mapIndex !== null && Number(mapIndex) >= 0 ? `/mapped/${mapIndex}` : "";
  return `/dags/${enc(dagId)}/runs/${enc(runId)}/tasks/${enc(taskId)}${mapped}/plugin/${TASK_TAB_ROUTE}`;
}

// ---------------------------------------------------------------------------------------------
// Formatting

/** The time zone the user chose in Airflow's UI (its localStorage "timezone"), else the browser's. */
function selectedTimeZone() {
  try {
    const chosen = JSON.parse(globalThis.localStorage.getItem("timezone"));
    if (typeof chosen === "string" && chosen) return chosen;
  } catch {
    // Not set, or not JSON: use the browser's zone, as Airflow's UI does.
  }
  return Intl.DateTimeFormat().resolvedOptions().timeZone;
}

/**
 * "2026-11-30 17:02:03 UTC", in the user's time zone, like the rest of Airflow's UI; without the
 * zone's name when `withZone` is false (Airflow's tables show times so: the zone is in its menu).
 */
function formatTime(iso, withZone = true) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  let parts;
  try {
    parts = new Intl.DateTimeFormat("en-US", {
      timeZone: selectedTimeZone(), hourCycle: "h23", timeZoneName: "short",
      year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
    }).formatToParts(date);
  } catch {
    return iso; // An unknown time zone name.
  }
  const part = Object.fromEntries(parts.map(({ type, value }) => [type, value]));
  const time = `${part.year}-${part.month}-${part.day} ${part.hour}:${part.minute}:${part.second}`;
  return withZone ? `${time} ${part.timeZoneName}` : time;
}

/** A time's tooltip: in the user's zone, named, and as the API gave it. */
function fullTime(iso) {
  return iso ? `${formatTime(iso)} (${iso})` : "";
}

/** Who last wrote an asset's key: its task instance and try, "API" or "CLI". */
function formatWriter(writer) {
  if (!writer) return "";
  if (writer.kind !== "task") return writer.kind.toUpperCase();
  const mapped = writer.map_index !== null && writer.map_index >= 0 ? `[${writer.map_index}]` : "";
  return `${writer.dag_id} / ${writer.run_id} / ${writer.task_id}${mapped}, try ${writer.try_number}`;
}

function prettyJson(value) {
  return JSON.stringify(value, null, 2);
}

// ---------------------------------------------------------------------------------------------
// Validation, done in the browser so that nothing invalid is sent (the server checks again).

/** Why `key` cannot be stored, or null. */
function keyProblem(key) {
  if (key.length === 0) return "Enter a key.";
  if ([...key].length > MAX_KEY_LENGTH) return `Keys are at most ${MAX_KEY_LENGTH} characters.`;
  if (key.includes("\u0000")) return "Keys cannot contain the NUL character.";
  if (/[\uD800-\uDFFF]/u.test(key)) return "Keys must be valid Unicode text.";
  return null;
}

/** {value} parsed from the editor's text, or {problem} saying why it cannot be stored. */
function parseValue(text) {
  if (text.trim() === "") return { problem: "Enter a JSON value, for example 42, \"text\" or {\"a\": 1}." };
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return { problem: `Invalid JSON: ${error.message}` };
  }
  if (value === null) return { problem: "null cannot be stored: delete the key instead." };
  return { value };
}

// ---------------------------------------------------------------------------------------------
// Small shared pieces

function ErrorAlert({ error, title }) {
  if (!error) return null;
  const message = typeof error === "string" ? error : error.message;
  return h(
    Alert.Root,
    { status: "error", "data-testid": "state-error", my: 2 },
    h(Alert.Indicator),
    h(
      Alert.Content,
      null,
      title ? h(Alert.Title, null, title) : null,
      h(Alert.Description, null, message),
    ),
  );
}

/** A failed load, with a way to try again (the server may have been restarting, say). */
function LoadError({ error, retry }) {
  return h(
    Stack,
    { align: "flex-start", gap: 0 },
    h(ErrorAlert, { error, title: "Could not load the state" }),
    h(Button, { size: "sm", variant: "outline", onClick: retry }, "Try again"),
  );
}

/** "1 key", "2 keys". */
function keys(count) {
  return `${count} key${count === 1 ? "" : "s"}`;
}

/** A modal dialog: the caller mounts it to open it and unmounts it (onClose) to close it. */
function Modal({ title, children, footer, onClose, size, testId, role }) {
  return h(
    Dialog.Root,
    { open: true, onOpenChange: (event) => !event.open && onClose(), size: size || "md", role: role || "dialog" },
    h(
      Portal,
      null,
      h(Dialog.Backdrop),
      h(
        Dialog.Positioner,
        null,
        h(
          Dialog.Content,
          { "data-testid": testId },
          h(Dialog.Header, null, h(Dialog.Title, null, title)),
          h(Dialog.Body, null, children),
          h(Dialog.Footer, null, footer),
        ),
      ),
    ),
  );
}

/** "Are you sure?" before a delete or a clear; shows the API's message if the call fails. */
function ConfirmDialog({ title, message, confirmLabel, action, onDone, onClose }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const confirm = async () => {
    setBusy(true);
    setError(null);
    try {
      await action();
      onDone();
    } catch (failure) {
      setError(failure);
      setBusy(false);
    }
  };
  const footer = h(
    HStack,
    null,
    h(Button, { variant: "outline", onClick: onClose, disabled: busy }, "Cancel"),
    h(Button, { colorPalette: "red", onClick: confirm, loading: busy, "data-testid": "state-confirm" }, confirmLabel),
  );
  return h(
    Modal,
    { title, footer, onClose, testId: "state-confirm-dialog", role: "alertdialog" },
    h(Text, null, message),
    h(ErrorAlert, { error }),
  );
}

// ---------------------------------------------------------------------------------------------
// Adding and editing an entry

/**
 * The add/edit dialog. The value is JSON text, validated as the user types: while it is invalid,
 * the reason shows under it and Save stays disabled, so nothing invalid reaches the server.
 */
function EntryDialog({ scope, entry, latest, onSaved, onClose }) {
  const adding = !entry;
  const [key, setKey] = useState(adding ? "" : entry.key);
  const [text, setText] = useState(adding ? "" : prettyJson(entry.value));
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  // Someone wrote the key after the dialog opened: closing then shows the table's new value.
  const [stale, setStale] = useState(false);
  const dismiss = () => onClose(stale);
  const problemOfKey = adding ? keyProblem(key) : null;
  const parsed = parseValue(text);
  const canSave = !busy && !problemOfKey && !parsed.problem;
  // The table behind the dialog keeps refreshing while its task runs; the text typed here is the
  // dialog's own and is never replaced. If the key was written meanwhile, say so before Save.
  const movedTo = !adding && latest && entry.version !== null && entry.version !== undefined && latest.version !== entry.version
    ? latest.version
    : null;

  const save = async () => {
    setBusy(true);
    setError(null);
    try {
      if (adding) await refuseExistingKey(scope, key);
      // An edit replaces only the version it was opened on: a task (or another operator) that
      // wrote in between is not overwritten unseen. Backends without versions give none.
      const version = adding || entry.version === null || entry.version === undefined ? undefined : entry.version;
      await request("PUT", scope.entryUrl(key, { if_version: version }), { value: parsed.value });
      onSaved(key);
    } catch (failure) {
      if (failure.reason === "version_conflict") {
        setStale(true);
        setError(new ApiError(409, failure.reason, "This key was written since you opened it: nothing was saved. Close the dialog to see its new value, then edit again."));
      } else {
        setError(failure);
      }
      setBusy(false);
    }
  };

  const footer = h(
    HStack,
    null,
    h(Button, { variant: "outline", onClick: dismiss, disabled: busy }, "Cancel"),
    h(Button, { colorPalette: "blue", onClick: save, disabled: !canSave, loading: busy, "data-testid": "state-save" }, "Save"),
  );
  return h(
    Modal,
    { title: adding ? "Add a key" : `Edit ${entry.key}`, footer, onClose: dismiss, size: "lg", testId: "state-entry-dialog" },
    h(
      Stack,
      { gap: 4 },
      h(
        Field.Root,
        { invalid: Boolean(problemOfKey) && key !== "", readOnly: !adding },
        h(Field.Label, null, "Key"),
        h(Input, {
          value: key, readOnly: !adding, autoFocus: adding, fontFamily: "mono", "data-testid": "state-key-input",
          onChange: (event) => setKey(event.target.value),
        }),
        problemOfKey && key !== "" ? h(Field.ErrorText, null, problemOfKey) : null,
      ),
      h(
        Field.Root,
        { invalid: Boolean(parsed.problem) && text !== "" },
        h(Field.Label, null, "Value (JSON)"),
        h(Textarea, {
          value: text, rows: 10, fontFamily: "mono", fontSize: "sm", spellCheck: false, autoFocus: !adding,
          "data-testid": "state-value-input", onChange: (event) => setText(event.target.value),
        }),
        parsed.problem && text !== ""
          ? h(Field.ErrorText, { "data-testid": "state-value-problem" }, parsed.problem)
          : h(Field.HelperText, null, "Any JSON value but null: a number, \"a string\", true, [1, 2] or {\"a\": 1}."),
      ),
      movedTo !== null && !error
        ? h(
            Text,
            { fontSize: "sm", color: "fg.warning", "data-testid": "state-entry-moved" },
            `This key was written while you edit it (now version ${movedTo}, you opened version ${entry.version}): Save will be refused. Copy your text if you need it, then close the dialog and edit again.`,
          )
        : null,
      h(ErrorAlert, { error, title: "Not saved" }),
    ),
  );
}

/**
 * Adding must not silently overwrite: fail when the key already holds a value. Asks the list for
 * keys starting with the key (the key itself sorts first), so a missing key is not a 404.
 */
async function refuseExistingKey(scope, key) {
  const page = await request("GET", scope.listUrl({ key_prefix: key, limit: 1 }));
  if (page.entries.some((entry) => entry.key === key)) {
    throw new ApiError(409, "key_exists", `The key "${key}" already exists: edit it in the table instead.`);
  }
}

// ---------------------------------------------------------------------------------------------
// The entries of one scope: the table, its toolbar and its dialogs

/**
 * Why the table is laid out this way: with the browser's automatic table layout, every column that
 * may not wrap (times, try, version, buttons) kept its whole width, and the value, whose text may
 * break anywhere, absorbed the shortage: about 50 px at 1280-1400 px windows, one or two characters
 * a line, while the key kept a fixed minimum. Now the layout is fixed (the widths below, not the
 * content, decide), the metadata is compact (the try and the writer go under the time), the key and
 * the value take what is left (the value most), each on one line, cut with an ellipsis; a row whose
 * key or value is cut unfolds (its ▸ button, or a click on the value) into the whole of both.
 * Below the table's minimum width it scrolls sideways instead of squeezing the value.
 */
const COLUMN_WIDTHS = { toggle: "2.5rem", key: "17%", updated: "11rem", expires: "10.5rem", actions: "5.5rem" };
/** The narrowest the table gets (then it scrolls): the fixed columns, a key and a value still readable. */
const TABLE_MIN_WIDTH = "50rem";

/**
 * A value on one line: JSON with a space after `:` and `,` (as json.dumps writes it). Line breaks in
 * JSON.stringify's indented form are all layout (it escapes those inside strings), so they can go.
 */
function oneLineJson(value) {
  return JSON.stringify(value, null, 1)
    .replace(/([[{])\n */g, "$1")
    .replace(/\n *([\]}])/g, "$1")
    .replace(/\n */g, " ");
}

/**
 * [ref, cut]: whether the element's one-line text is cut (wider than the element), measured again
 * whenever its size or `text` changes (a window resized, a value refreshed).
 */
function useCut(text) {
  const ref = useRef(null);
  const [cut, setCut] = useState(false);
  React.useLayoutEffect(() => {
    const element = ref.current;
    if (!element) return undefined;
    const measure = () => setCut(element.scrollWidth > element.clientWidth + 1);
    measure();
    const observer = new ResizeObserver(measure);
    observer.observe(element);
    return () => observer.disconnect();
  }, [text]);
  return [ref, cut];
}

/** One-line text cut with an ellipsis. */
const ONE_LINE = { whiteSpace: "nowrap", overflow: "hidden", textOverflow: "ellipsis" };

/** A small outlined SVG icon of 24-unit strokes (the host's icon set is not exposed to plugins). */
function Icon({ d }) {
  return h(
    "svg",
    { viewBox: "0 0 24 24", width: "1em", height: "1em", fill: "none", stroke: "currentColor", strokeWidth: 2, strokeLinecap: "round", strokeLinejoin: "round", "aria-hidden": true },
    d.map((path) => h("path", { key: path, d: path })),
  );
}
const PENCIL = ["M4 20h4L19.5 8.5a2.1 2.1 0 0 0-4-4L4 16v4z", "M13.5 6.5l4 4"];
const BIN = ["M4 7h16", "M9 7V4h6v3", "M6 7l1 13h10l1-13", "M10 11v6", "M14 11v6"];

/**
 * A keydown handler that toggles on Space. A button does so by itself, unless its keydown's default
 * is cancelled, and Airflow's page cancels Space's (one of its keyboard shortcuts).
 */
function toggleOnSpace(toggle) {
  return (event) => {
    if (event.key !== " ") return;
    event.preventDefault();
    event.stopPropagation();
    toggle();
  };
}

/** Who wrote the value last, as the line under the time says it. */
function writtenBy(entry, showTry, showWriter) {
  if (showWriter) return entry.updated_by ? formatWriter(entry.updated_by) : "";
  if (showTry) return entry.updated_by_try === null || entry.updated_by_try === undefined ? "an operator" : null;
  return "";
}

/** The key of a large value's reference (docs/large-values.md): the store holds it, not the value. */
const LARGE_VALUE = "$airflow_task_state.large_value";

/** A large value's reference ({size, blake3 or sha256, path, kind}), or null for any other value. */
function largeValue(value) {
  if (!value || typeof value !== "object" || Array.isArray(value)) return null;
  const keys = Object.keys(value);
  return keys.length === 1 && keys[0] === LARGE_VALUE && value[LARGE_VALUE] && typeof value[LARGE_VALUE] === "object"
    ? value[LARGE_VALUE]
    : null;
}

function formatBytes(size) {
  const units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
  let shown = Number(size);
  let unit = 0;
  while (shown >= 1024 && unit < units.length - 1) {
    shown /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${shown} bytes` : `${shown.toFixed(1)} ${units[unit]}`;
}

/** A large value on one line: what it is and where, never its content (fetched only on request). */
function largeValueLine(reference) {
  const what = reference.kind === "bytes" ? "file" : "large JSON value";
  // The digest's algorithm by name: blake3 for new values, sha256 in those written by earlier versions.
  const algorithm = "blake3" in reference ? "blake3" : "sha256";
  const digest = String(reference[algorithm]).slice(0, 12);
  return `${what}, ${formatBytes(reference.size)}, ${algorithm} ${digest}…, at ${reference.path}`;
}

function EntryRow({ entry, showTry, showWriter, editable, deletable, onEdit, onDelete, open, onToggle, columns, objectUrl }) {
  const large = largeValue(entry.value);
  const oneLine = large ? largeValueLine(large) : oneLineJson(entry.value);
  const [keyRef, keyCut] = useCut(entry.key);
  const [valueRef, valueCut] = useCut(oneLine);
  const writer = writtenBy(entry, showTry, showWriter);
  // An asset's writer (DAG / run / task, try) may be longer than its column too.
  const [writerRef, writerCut] = useCut(writer);
  const unfoldable = keyCut || valueCut || writerCut;
  const unfolded = open && unfoldable;
  const wholeId = `state-whole-${useId()}`;
  const row = h(
    Table.Row,
    { "data-testid": "state-row", "data-key": entry.key, "data-unfolded": unfolded ? "true" : undefined, borderBottomWidth: unfolded ? 0 : undefined },
    h(
      Table.Cell,
      { verticalAlign: "top", px: 1 },
      unfoldable
        ? h(
            Button,
            {
              size: "xs", variant: "ghost", px: 0, minW: 7, onClick: onToggle, onKeyDown: toggleOnSpace(onToggle),
              "aria-expanded": unfolded,
              "aria-controls": unfolded ? wholeId : undefined, "data-testid": "state-unfold",
              "aria-label": `${unfolded ? "Hide" : "Show"} all of ${entry.key}`,
              title: unfolded ? "Hide" : "Show in full",
            },
            unfolded ? "▾" : "▸",
          )
        : null,
    ),
    h(
      Table.Cell,
      { verticalAlign: "top", fontFamily: "mono", title: entry.key },
      h(Box, { ref: keyRef, ...ONE_LINE, py: 1, "data-testid": "state-key" }, entry.key),
    ),
    h(
      Table.Cell,
      { verticalAlign: "top" },
      h(
        Box,
        {
          ref: valueRef, "data-testid": "state-value", fontFamily: "mono", fontSize: "sm", ...ONE_LINE,
          bg: "bg.subtle", color: "fg", borderRadius: "md", px: 2, py: 1,
          // A click on a cut value unfolds it too (the ▸ button is the keyboard's way).
          cursor: unfoldable ? "pointer" : undefined, onClick: unfoldable ? onToggle : undefined,
        },
        oneLine,
      ),
      large && objectUrl
        ? h(
            "a",
            {
              href: objectUrl(entry.key), download: entry.key, "data-testid": "state-download", style: { fontSize: "0.8rem" },
              title: "Download it (the API server reads it from object storage; it needs [state] object_storage_path and the storage's credentials)",
            },
            `Download ${formatBytes(large.size)}`,
          )
        : null,
    ),
    h(
      Table.Cell,
      { verticalAlign: "top" },
      h(Text, { whiteSpace: "nowrap", title: fullTime(entry.updated_at), "data-testid": "state-updated-at" }, formatTime(entry.updated_at, false)),
      h(
        Text,
        { ref: writerRef, fontSize: "xs", color: "fg.muted", ...ONE_LINE, title: writer || undefined, "data-testid": "state-written" },
        h(Text, { as: "span", title: "Grows by one on every write" }, "version ", h(Text, { as: "span", "data-testid": "state-version" }, entry.version ?? "")),
        writer === null
          ? h(Fragment, null, " · by try ", h(Text, { as: "span", "data-testid": "state-try" }, entry.updated_by_try))
          : writer
            ? h(Fragment, null, " · by ", h(Text, { as: "span", "data-testid": showWriter ? "state-writer" : "state-operator" }, writer))
            : null,
      ),
    ),
    h(
      Table.Cell,
      { verticalAlign: "top", whiteSpace: "nowrap", title: entry.expires_at ? fullTime(entry.expires_at) : "", "data-testid": "state-expires" },
      entry.expires_at ? formatTime(entry.expires_at, false) : "never",
    ),
    editable || deletable
      ? h(
          Table.Cell,
          { verticalAlign: "top", textAlign: "end", px: 1 },
          h(
            HStack,
            { justify: "flex-end", gap: 1 },
            editable
              ? h(IconButton, { size: "xs", variant: "ghost", onClick: () => onEdit(entry), "aria-label": `Edit ${entry.key}`, title: "Edit", "data-testid": "state-edit" }, h(Icon, { d: PENCIL }))
              : null,
            deletable
              ? h(IconButton, { size: "xs", variant: "ghost", colorPalette: "red", onClick: () => onDelete(entry), "aria-label": `Delete ${entry.key}`, title: "Delete", "data-testid": "state-delete" }, h(Icon, { d: BIN }))
              : null,
          ),
        )
      : null,
  );
  // Always a Fragment, so that unfolding adds a row instead of replacing this one (and its focused button).
  return h(
    Fragment,
    null,
    row,
    unfolded &&
    h(
      Table.Row,
      { "data-testid": "state-whole-row" },
      h(
        Table.Cell,
        { colSpan: columns, pt: 0, pb: 3 },
        h(
          Box,
          { id: wholeId, role: "region", "aria-label": `The whole value of ${entry.key}`, "data-testid": "state-whole", ml: 8 },
          keyCut ? h(Text, { fontFamily: "mono", fontSize: "sm", wordBreak: "break-all", mb: 1, "data-testid": "state-whole-key" }, entry.key) : null,
          writerCut ? h(Text, { fontSize: "sm", color: "fg.muted", mb: 1, "data-testid": "state-whole-writer" }, `Last written by ${writer}`) : null,
          h(
            Box,
            {
              as: "pre", "data-testid": "state-whole-value", fontFamily: "mono", fontSize: "sm", whiteSpace: "pre-wrap",
              overflowWrap: "anywhere", bg: "bg.subtle", color: "fg", borderRadius: "md", px: 3, py: 2, m: 0,
              maxH: "24rem", overflowY: "auto", tabIndex: 0,
            },
            prettyJson(entry.value),
          ),
        ),
      ),
    ),
  );
}

function EntriesTable({ entries, showTry, showWriter, editable, deletable, onEdit, onDelete, objectUrl }) {
  // Unfolded rows by key: they stay unfolded while a running task's entries refresh.
  const [unfolded, setUnfolded] = useState(() => new Set());
  const toggle = (key) =>
    setUnfolded((previous) => {
      const next = new Set(previous);
      if (!next.delete(key)) next.add(key);
      return next;
    });
  const actions = editable || deletable;
  const columns = actions ? 6 : 5;
  const header = h(
    Table.Row,
    null,
    h(Table.ColumnHeader, { px: 1 }),
    h(Table.ColumnHeader, null, "Key"),
    h(Table.ColumnHeader, null, "Value"),
    h(
      Table.ColumnHeader,
      { title: showWriter ? "When, and by whom, the value was last written" : "When, and by which try of the task (or an operator), the value was last written" },
      "Updated",
    ),
    h(Table.ColumnHeader, { title: "When the key expires and is no longer returned" }, "Expires"),
    actions ? h(Table.ColumnHeader, { textAlign: "end" }, h("span", { title: "Edit or delete a key" }, "Actions")) : null,
  );
  const widths = [COLUMN_WIDTHS.toggle, COLUMN_WIDTHS.key, undefined, COLUMN_WIDTHS.updated, COLUMN_WIDTHS.expires];
  if (actions) widths.push(COLUMN_WIDTHS.actions);
  return h(
    Table.ScrollArea,
    { borderWidth: "1px", borderRadius: "md" },
    h(
      Table.Root,
      { size: "sm", tableLayout: "fixed", width: "100%", minW: TABLE_MIN_WIDTH, "data-testid": "state-table" },
      h("colgroup", null, widths.map((width, index) => h("col", { key: index, style: width ? { width } : undefined }))),
      h(Table.Header, null, header),
      h(
        Table.Body,
        null,
        entries.map((entry) =>
          h(EntryRow, {
            key: entry.key, entry, showTry, showWriter, editable, deletable, onEdit, onDelete, columns, objectUrl,
            open: unfolded.has(entry.key), onToggle: () => toggle(entry.key),
          }),
        ),
      ),
    ),
  );
}

/**
 * Whether the entries follow their running task instance: "Live" and when they were last re-read,
 * a failed refresh and when it is tried again, or that the task instance ended. Nothing when the
 * task instance was already finished when the tab opened.
 */
function LiveIndicator({ live }) {
  const every = live.intervalMs ? `every ${Math.round(live.intervalMs / 1000)} s` : "every few seconds";
  const updated = live.updatedAt ? `updated ${formatClock(live.updatedAt)}` : "";
  if (live.phase === "live") {
    return h(
      HStack,
      { gap: 2, "data-testid": "state-live", title: `Re-read ${every} while the task instance is ${live.tiState || "not started"}` },
      h(Badge, { colorPalette: "green", variant: "solid" }, "Live"),
      h(Text, { fontSize: "sm", color: "fg.muted", "data-testid": "state-updated" }, updated),
    );
  }
  if (live.phase === "retrying") {
    return h(
      Text,
      { fontSize: "sm", color: "fg.warning", "data-testid": "state-refresh-problem" },
      `Refresh failed (${live.error.message}): trying again in ${Math.round(live.retryInMs / 1000)} s.`,
    );
  }
  if (live.phase === "ended") {
    return h(
      Text,
      { fontSize: "sm", color: "fg.muted", "data-testid": "state-updated" },
      `${updated}: the task instance ended (${live.tiState}), no longer refreshing.`,
    );
  }
  return null;
}

function Pager({ offset, shown, total, onPage }) {
  if (total <= PAGE_SIZE) return null;
  return h(
    HStack,
    { justify: "flex-end", mt: 2, gap: 2 },
    h(Text, { fontSize: "sm", color: "fg.muted" }, `${offset + 1}–${offset + shown} of ${total}`),
    h(Button, { size: "xs", variant: "outline", disabled: offset === 0, onClick: () => onPage(offset - PAGE_SIZE) }, "Previous"),
    h(Button, { size: "xs", variant: "outline", disabled: offset + PAGE_SIZE >= total, onClick: () => onPage(offset + PAGE_SIZE) }, "Next"),
  );
}

/**
 * The entries of one scope (a task instance or an asset), with Add / Edit / Delete / Clear all
 * for users whose rights allow them (the list answer's `can_edit` / `can_delete`); others get
 * the table alone, with no edit controls at all. `renderError(error)` may show something better
 * than the error's message; `onChange()` is called after every change.
 */
function StateEntries({ scope, follow, onChange, renderError }) {
  const [filter, setFilter] = useState("");
  const prefix = useDebounced(filter, 300);
  const [offset, setOffset] = useState(0);
  const [dialog, setDialog] = useState(null); // {kind: "add" | "edit" | "delete" | "clear", entry}
  const [notice, setNotice] = useState(null);
  useEffect(() => setOffset(0), [prefix, scope.id]);

  const { data, error, loading, reload, refresh } = useLiveFetch(
    scope.listUrl({ limit: PAGE_SIZE, offset, key_prefix: prefix }),
  );
  const [followGeneration, followAgain] = useReducer((n) => n + 1, 0);
  const live = useFollowTaskInstance(follow ? scope.instanceUrl : null, refresh, followGeneration);
  const entries = data ? data.entries : [];
  const total = data ? data.total_entries : 0;
  const editable = Boolean(data && data.can_edit);
  const deletable = Boolean(data && data.can_delete);

  const closeDialog = useCallback(() => setDialog(null), []);
  const refreshNow = () => {
    setNotice(null);
    reload();
    // The task instance may have been cleared or retried since the tab stopped following it.
    if (follow && (live.phase === "idle" || live.phase === "ended" || live.phase === "stopped")) followAgain();
  };
  const changed = (message) => {
    setDialog(null);
    setNotice(message);
    reload();
    if (onChange) onChange();
  };

  const toolbar = h(
    HStack,
    { gap: 2, mb: 3, wrap: "wrap" },
    h(Input, {
      size: "sm", maxW: "20rem", placeholder: "Filter by key prefix", value: filter, "data-testid": "state-filter",
      onChange: (event) => setFilter(event.target.value),
    }),
    h(Button, { size: "sm", variant: "outline", onClick: refreshNow, loading, "data-testid": "state-refresh" }, "Refresh"),
    h(LiveIndicator, { live }),
    h(Box, { flex: 1 }),
    editable ? h(Button, { size: "sm", colorPalette: "blue", onClick: () => setDialog({ kind: "add" }), "data-testid": "state-add" }, "Add key") : null,
    deletable && total > 0 && !prefix
      ? h(Button, { size: "sm", variant: "outline", colorPalette: "red", onClick: () => setDialog({ kind: "clear" }), "data-testid": "state-clear" }, "Clear all")
      : null,
  );

  let body;
  if (error) body = (renderError && renderError(error)) || h(LoadError, { error, retry: reload });
  else if (!data) body = h(Spinner, { size: "sm" });
  else if (entries.length === 0)
    body = h(Text, { color: "fg.muted", py: 4, "data-testid": "state-empty" }, prefix ? `No key starts with "${prefix}".` : `This ${scope.noun} holds no state.`);
  else
    body = h(
      Fragment,
      null,
      h(EntriesTable, {
        entries, editable, deletable, showTry: scope.hasTries, showWriter: scope.hasWriters, objectUrl: scope.objectUrl,
        onEdit: (entry) => setDialog({ kind: "edit", entry }),
        onDelete: (entry) => setDialog({ kind: "delete", entry }),
      }),
      h(Pager, { offset, shown: entries.length, total, onPage: setOffset }),
    );

  return h(
    Box,
    { "data-testid": "state-entries", "data-scope": scope.id },
    // No toolbar before the first answer: nothing to filter, add to or clear yet.
    data ? toolbar : null,
    data && !editable && !deletable
      ? h(Text, { fontSize: "sm", color: "fg.muted", mb: 2, "data-testid": "state-read-only" }, "Read only: your role may view this state but not change it.")
      : null,
    notice ? h(Text, { fontSize: "sm", color: "fg.success", mb: 2, "data-testid": "state-notice" }, notice) : null,
    live.phase === "stopped" ? h(ErrorAlert, { error: live.error, title: "Stopped refreshing" }) : null,
    body,
    renderDialog(dialog, scope, entries, total, changed, closeDialog),
  );
}

/** The open dialog of a StateEntries, if any. */
function renderDialog(dialog, scope, entries, total, changed, close) {
  if (!dialog) return null;
  if (dialog.kind === "add" || dialog.kind === "edit") {
    // The key as the table shows it now, which may be newer than when the dialog opened.
    const latest = dialog.entry ? entries.find((entry) => entry.key === dialog.entry.key) : undefined;
    return h(EntryDialog, {
      scope, entry: dialog.entry, latest,
      onClose: (stale) => (stale ? changed(`"${dialog.entry.key}" was written elsewhere: not saved.`) : close()),
      onSaved: (key) => changed(`Saved "${key}".`),
    });
  }
  if (dialog.kind === "delete") {
    const { key } = dialog.entry;
    return h(ConfirmDialog, {
      title: "Delete this key?",
      message: `The key "${key}" and its value will be deleted from this ${scope.noun}. This cannot be undone.`,
      confirmLabel: "Delete",
      action: () => request("DELETE", scope.entryUrl(key)),
      onDone: () => changed(`Deleted "${key}".`),
      onClose: close,
    });
  }
  return h(ConfirmDialog, {
    title: "Clear all state?",
    message: `All ${keys(total)} of this ${scope.noun} will be deleted. This cannot be undone.`,
    confirmLabel: "Clear all",
    action: () => request("DELETE", scope.clearUrl()),
    onDone: () => changed("Cleared all keys."),
    onClose: close,
  });
}

// ---------------------------------------------------------------------------------------------
// The task instance tab

/**
 * The State tab. A mapped task's page without a map index has no single task instance: offer
 * the map indices of this run that hold state instead.
 */
function TaskInstanceState({ dagId, runId, taskId, mapIndex }) {
  const scope = useMemo(() => taskScope(dagId, runId, taskId, mapIndex), [dagId, runId, taskId, mapIndex]);
  const renderError = (error) =>
    error.reason === "task_instance_not_found" && mapIndex === undefined ? h(MappedInstances, { dagId, runId, taskId }) : null;
  return h(
    Box,
    { p: 2, "data-testid": "state-task-tab" },
    h(Heading, { size: "md", mb: 1 }, "Task state"),
    h(
      Text,
      { fontSize: "sm", color: "fg.muted", mb: 3 },
      "What this task instance keeps between tries with task_state: read by its next try, kept until cleared.",
    ),
    h(StateEntries, { scope, follow: true, renderError }),
  );
}

/** The map indices of a mapped task that hold state, each opening its own State tab. */
function MappedInstances({ dagId, runId, taskId }) {
  const { data, error } = useFetch(`${STATE_API}/dags/${enc(dagId)}/dagRuns/${enc(runId)}/state`);
  if (error) return h(ErrorAlert, { error });
  if (!data) return h(Spinner, { size: "sm" });
  const mapped = data.task_instances.filter((ti) => ti.task_id === taskId && ti.map_index >= 0);
  if (mapped.length === 0) return h(Text, { color: "fg.muted" }, "No mapped instance of this task holds state.");
  return h(
    Stack,
    { gap: 2 },
    h(Text, null, "This task is mapped: each mapped instance has its own state."),
    h(
      HStack,
      { wrap: "wrap" },
      mapped.map((ti) =>
        h(RouterLink, { key: ti.map_index, to: taskTabPath(dagId, runId, taskId, ti.map_index) }, `Map index ${ti.map_index} (${keys(ti.key_count)})`),
      ),
    ),
  );
}

/** A link inside Airflow's UI (client-side navigation through the host's router). */
function RouterLink({ to, children }) {
  return h(Link, { asChild: true, colorPalette: "blue", variant: "underline" }, h(RouterDOM.Link, { to }, children));
}

// ---------------------------------------------------------------------------------------------
// The State page (Browse menu): asset state, and task state found by DAG and run

function StatePage() {
  return h(
    Box,
    { p: 4, "data-testid": "state-page" },
    h(Heading, { size: "lg", mb: 1 }, "State"),
    h(
      Text,
      { color: "fg.muted", mb: 6 },
      "Durable state kept by tasks: per asset (asset_state) and per task instance (task_state).",
    ),
    h(AssetStateSection),
    h(Box, { h: 8 }),
    h(TaskStateSection),
  );
}

/**
 * The selection, kept in the page's query string so that a reload or a shared link shows the
 * same. Returns [params, select], where select({name: value}) sets several at once (null or ""
 * removes one): React Router's functional updates are not queued, so two calls in a row would
 * lose the first.
 */
function useSelection() {
  const [params, setParams] = RouterDOM.useSearchParams();
  const select = useCallback(
    (changes) =>
      setParams(
        (current) => {
          const updated = new URLSearchParams(current);
          for (const [name, value] of Object.entries(changes)) {
            if (value === "" || value === null || value === undefined) updated.delete(name);
            else updated.set(name, String(value));
          }
          return updated;
        },
        { replace: true },
      ),
    [setParams],
  );
  return [params, select];
}

function AssetStateSection() {
  const [offset, setOffset] = useState(0);
  const [params, select] = useSelection();
  const selected = params.get("asset") || "";
  const { data, error, reload } = useFetch(`${STATE_API}/assets${queryString({ limit: PAGE_SIZE, offset })}`);
  let body;
  if (error) body = h(ErrorAlert, { error, title: "Could not list the assets" });
  else if (!data) body = h(Spinner, { size: "sm" });
  else if (data.assets.length === 0) body = h(Text, { color: "fg.muted", "data-testid": "state-no-assets" }, "No asset holds state.");
  else
    body = h(
      Fragment,
      null,
      h(AssetTable, { assets: data.assets, selected, onSelect: (asset) => select({ asset }), onChange: reload }),
      h(Pager, { offset, shown: data.assets.length, total: data.total_entries, onPage: setOffset }),
    );
  return h(
    Box,
    { as: "section", "data-testid": "state-assets" },
    h(Heading, { size: "md", mb: 3 }, "Asset state"),
    body,
  );
}

/** The assets holding state; the selected one unfolds into its entries under its row. */
function AssetTable({ assets, selected, onSelect, onChange }) {
  const rows = [];
  for (const asset of assets) {
    const id = String(asset.asset_id);
    const open = id === selected;
    rows.push(
      h(
        Table.Row,
        {
          key: id, "data-testid": "state-asset-row", "data-asset": asset.name, cursor: "pointer",
          "aria-expanded": open, bg: open ? "bg.muted" : undefined, onClick: () => onSelect(open ? "" : id),
        },
        h(Table.Cell, { width: "2rem" }, open ? "▾" : "▸"),
        h(Table.Cell, { fontWeight: "medium" }, asset.name),
        h(Table.Cell, { fontFamily: "mono", fontSize: "sm", wordBreak: "break-all" }, asset.uri),
        h(Table.Cell, null, asset.group),
        h(Table.Cell, { textAlign: "end" }, h(Badge, null, keys(asset.key_count))),
      ),
    );
    if (open) {
      rows.push(
        h(
          Table.Row,
          { key: `${id}-entries` },
          h(Table.Cell, { colSpan: 5, p: 3 }, h(StateEntries, { scope: assetScope(asset.asset_id), onChange })),
        ),
      );
    }
  }
  return h(
    Table.Root,
    { size: "sm", borderWidth: "1px", "data-testid": "state-asset-table" },
    h(
      Table.Header,
      null,
      h(
        Table.Row,
        null,
        h(Table.ColumnHeader, null, ""),
        h(Table.ColumnHeader, null, "Asset"),
        h(Table.ColumnHeader, null, "URI"),
        h(Table.ColumnHeader, null, "Group"),
        h(Table.ColumnHeader, { textAlign: "end" }, "Keys"),
      ),
    ),
    h(Table.Body, null, rows),
  );
}

/**
 * A text field with suggestions (a native <datalist>, themed like any input): pick a suggestion,
 * or type a value and press Enter. Typing matters: suggestions are only the first matches, and
 * some auth managers refuse to list DAGs to a user who may still read some of them.
 */
function ComboBox({ label, value, placeholder, suggestions, onType, onCommit, hint, testId, disabled }) {
  const [text, setText] = useState(value);
  const listId = React.useId();
  useEffect(() => setText(value), [value]);
  const commit = (next) => next.trim() !== value && onCommit(next.trim());
  const onChange = (event) => {
    const next = event.target.value;
    setText(next);
    onType(next);
    // A pick from the list is an input without an inputType (or a replacement): commit at once.
    const { inputType } = event.nativeEvent;
    if ((!inputType || inputType === "insertReplacementText") && suggestions.some((option) => option.value === next)) {
      commit(next);
    }
  };
  return h(
    Field.Root,
    { maxW: "24rem", disabled },
    h(Field.Label, null, label),
    h(Input, {
      size: "sm", value: text, placeholder, list: listId, autoComplete: "off", "data-testid": testId, onChange,
      onKeyDown: (event) => event.key === "Enter" && commit(text),
      onBlur: () => commit(text),
    }),
    h("datalist", { id: listId }, suggestions.map((option) => h("option", { key: option.value, value: option.value }, option.label))),
    hint ? h(Field.HelperText, null, hint) : null,
  );
}

/**
 * The task state of a run: a DAG and a run (suggested by Airflow's public API, so only what the
 * user may read), then the run's task instances holding state.
 */
function TaskStateSection() {
  const [params, select] = useSelection();
  const dagId = params.get("dag_id") || "";
  const runId = params.get("run_id") || "";
  const [dagText, setDagText] = useState(dagId);
  const [runText, setRunText] = useState(runId);
  const dagPattern = useDebounced(dagText === dagId ? "" : dagText, 300);
  const runPattern = useDebounced(runText === runId ? "" : runText, 300);

  const dags = useFetch(`${AIRFLOW_API}/dags${queryString({ limit: 50, order_by: "dag_id", dag_id_pattern: dagPattern })}`);
  const runs = useFetch(
    dagId
      ? `${AIRFLOW_API}/dags/${enc(dagId)}/dagRuns${queryString({ limit: 50, order_by: "-run_after", run_id_pattern: runPattern })}`
      : null,
  );
  const dagSuggestions = (dags.data ? dags.data.dags : []).map((dag) => ({ value: dag.dag_id, label: dag.dag_display_name || dag.dag_id }));
  const runSuggestions = (runs.data ? runs.data.dag_runs : []).map((run) => ({
    value: run.dag_run_id,
    label: `${run.state} · ${formatTime(run.run_after)}`,
  }));

  return h(
    Box,
    { as: "section", "data-testid": "state-tasks" },
    h(Heading, { size: "md", mb: 3 }, "Task state"),
    h(
      Flex,
      { gap: 4, wrap: "wrap", align: "flex-start", mb: 4 },
      h(ComboBox, {
        label: "DAG", value: dagId, placeholder: "DAG id", suggestions: dagSuggestions, testId: "state-dag-input",
        onType: setDagText,
        onCommit: (value) => select({ dag_id: value, run_id: null, task_id: null, map_index: null }),
        hint: dags.error ? `No suggestions (${dags.error.message}): type a DAG id and press Enter.` : null,
      }),
      h(ComboBox, {
        label: "Run", value: runId, placeholder: dagId ? "Run id" : "Choose a DAG first", suggestions: runSuggestions,
        testId: "state-run-input", disabled: !dagId, onType: setRunText,
        onCommit: (value) => select({ run_id: value, task_id: null, map_index: null }),
      }),
    ),
    h(ErrorAlert, { error: runs.error, title: "Could not list the runs" }),
    dagId && runId ? h(RunTaskInstances, { dagId, runId }) : null,
  );
}

/** The task instances of a run that hold state; choosing one shows its entries. */
function RunTaskInstances({ dagId, runId }) {
  const [params, select] = useSelection();
  const taskId = params.get("task_id") || "";
  const mapIndex = params.get("map_index") || "";
  const { data, error, reload } = useFetch(`${STATE_API}/dags/${enc(dagId)}/dagRuns/${enc(runId)}/state`);
  if (error) return h(ErrorAlert, { error, title: "Could not list the run's task instances" });
  if (!data) return h(Spinner, { size: "sm" });
  if (data.task_instances.length === 0)
    return h(Text, { color: "fg.muted", "data-testid": "state-no-task-instances" }, "No task instance of this run holds state.");

  const choose = (ti) => select({ task_id: ti.task_id, map_index: ti.map_index });
  const isSelected = (ti) => ti.task_id === taskId && String(ti.map_index) === (mapIndex || "-1");
  const selected = data.task_instances.find(isSelected);
  return h(
    Stack,
    { gap: 4 },
    h(
      Table.Root,
      { size: "sm", borderWidth: "1px", "data-testid": "state-ti-table" },
      h(
        Table.Header,
        null,
        h(
          Table.Row,
          null,
          h(Table.ColumnHeader, null, "Task"),
          h(Table.ColumnHeader, null, "Map index"),
          h(Table.ColumnHeader, null, "Keys"),
          h(Table.ColumnHeader, { textAlign: "end" }, ""),
        ),
      ),
      h(
        Table.Body,
        null,
        data.task_instances.map((ti) =>
          h(
            Table.Row,
            {
              key: `${ti.task_id}/${ti.map_index}`, "data-testid": "state-ti-row", "data-task": ti.task_id,
              "data-map-index": ti.map_index, cursor: "pointer", bg: isSelected(ti) ? "bg.muted" : undefined,
              onClick: () => choose(ti),
            },
            h(Table.Cell, { fontFamily: "mono" }, ti.task_id),
            h(Table.Cell, null, ti.map_index >= 0 ? ti.map_index : ""),
            h(Table.Cell, null, h(Badge, null, keys(ti.key_count))),
            h(
              Table.Cell,
              { textAlign: "end", onClick: (event) => event.stopPropagation() },
              h(RouterLink, { to: taskTabPath(dagId, runId, ti.task_id, ti.map_index) }, "Open task instance"),
            ),
          ),
        ),
      ),
    ),
    selected
      ? h(
          Box,
          { borderWidth: "1px", borderRadius: "md", p: 3 },
          h(Heading, { size: "sm", mb: 3, fontFamily: "mono" }, selected.map_index >= 0 ? `${selected.task_id} [${selected.map_index}]` : selected.task_id),
          h(StateEntries, { scope: taskScope(dagId, runId, selected.task_id, selected.map_index), onChange: reload }),
        )
      : h(Text, { color: "fg.muted", fontSize: "sm" }, "Choose a task instance to see its state."),
  );
}

// ---------------------------------------------------------------------------------------------
// Registration

/** The component of both apps: the task instance tab when the route names a task, else the page. */
function StatePlugin(props) {
  const { dagId, runId, taskId, mapIndex } = props || {};
  if (dagId && runId && taskId) return h(TaskInstanceState, { dagId, runId, taskId, mapIndex });
  return h(StatePage);
}

// Airflow 3.2 reads `globalThis[<app name>]` first and falls back to `globalThis.AirflowPlugin`;
// set the name (plugin.UI_APP_NAME) so that a cached module still resolves when the fallback was reset.
globalThis.State = StatePlugin;
globalThis.AirflowPlugin = StatePlugin;
