"""The console (/_console) in a real headless Chromium, against a real server and the fake OpenAI.

One browser for the module, a fresh context (its own sessionStorage) per test, one server
shared by the tests (each creates what it needs under names of its own). Every page is
screenshotted into the module's temporary directory; with MLSTREAM_CONSOLE_SCREENSHOTS set
to a directory (docs/console), the screenshots are copied there too.

Chromium is Debian's (/usr/bin/chromium: `.ci/run` installs it when absent); Playwright
drives it without downloading a browser of its own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Iterator

import pytest
import urllib3

from mlstream.access.keys import KeyStore
from mlstream.fronts.console.routes import CONTENT_SECURITY_POLICY
from mlstream.app.compose import Server
from mlstream.settings.server import ServerSettings
from mlstream.testing.fake_openai import FakeOpenAI, Scenario, fake_tokens

from ..support.clients import bearer, client_with
from ..support.connectors import openai_connector
from ..support.servers import LOOPBACK_TRUST

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
WIDE = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
MARKUP = '<img src=x onerror="window.__pwned=1">'
UI_TIMEOUT_MS = 15_000
OVERVIEW_INTERVAL_MS = 2000  # page-overview.js: INTERVAL_MS, its scrape timer

playwright_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is in the test extras")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        message = f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


class Setup:
    """The server, the fake provider, an admin key and a client holding it."""

    def __init__(self, server: Server, fake: FakeOpenAI, shots: Path) -> None:
        self.server, self.fake, self.shots = server, fake, shots
        self.url = server.url
        _, self.admin_key = KeyStore(server.app.store).create("admin", "console-admin")
        _, self.user_key = KeyStore(server.app.store).create("user", "console-user")
        self.admin = client_with(server.url, bearer(self.admin_key))

    def model(self, name: str, scenario: Scenario, **connector: Any) -> str:
        """A deployed model on a fresh connector to the fake, answering as ``scenario`` says."""
        connector_id = self.admin.create_connector(openai_connector(self.fake, model=scenario.to_model(), **connector))
        return self.admin.register(connector_id, name=name)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    data = tmp_path_factory.mktemp("console-data")
    shots = tmp_path_factory.mktemp("console-screenshots")
    with FakeOpenAI() as fake:
        server = Server(ServerSettings(port=0, data_dir=data, trusted_endpoints=(LOOPBACK_TRUST,),
                                       allow_private_endpoints=True, drain_timeout=0.0)).start()
        try:
            yield Setup(server, fake, shots)
        finally:
            server.stop(drain_timeout=0)
    target = os.environ.get("MLSTREAM_CONSOLE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        for shot in shots.glob("*.png"):
            shutil.copy(shot, Path(target) / shot.name)


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=WIDE)
    context.set_default_timeout(UI_TIMEOUT_MS)
    one = context.new_page()
    one.errors = []  # uncaught script errors: none is expected
    one.on("pageerror", lambda error: one.errors.append(str(error)))
    try:
        yield one
    finally:
        context.close()
    assert not one.errors, one.errors


def sign_in(page: Any, setup: Setup, key: str | None = None, hash_: str = "") -> None:
    page.goto(f"{setup.url}/_console{hash_}")
    page.fill("#key-input", key or setup.admin_key)
    page.press("#key-input", "Enter")
    page.wait_for_selector("#nav:not([hidden])")


def go(page: Any, name: str) -> None:
    page.click(f"nav a[data-page={name}]")
    page.wait_for_selector(f"#page-{name}:not([hidden])")


def shoot(page: Any, setup: Setup, name: str) -> Path:
    path = setup.shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def wait_text(page: Any, selector: str, pattern: str, timeout: float = UI_TIMEOUT_MS / 1000) -> str:
    """The element's text once it matches ``pattern`` (a regex)."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = page.text_content(selector) or ""
        if re.search(pattern, text):
            return text
        page.wait_for_timeout(50)
    raise AssertionError(f"{selector} never matched {pattern!r}: {text!r}")


# --- the files and their headers, without a browser -------------------------------------------

class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.inline: list[str] = []
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        if tag == "script" and not names.get("src"):
            self.inline.append("inline <script>")
        self.inline += [f"{tag} {name}=" for name, _ in attrs if name == "style" or name.startswith("on")]
        if tag == "style":
            self.inline.append("<style>")
        for name in ("src", "href"):
            value = names.get(name)
            if value and value.startswith("/_console/"):
                self.sources.append(value)


def test_the_console_is_served_with_its_policy_and_no_inline_code(setup: Setup) -> None:
    http = urllib3.PoolManager(retries=False, timeout=10)
    index = http.request("GET", f"{setup.url}/_console")
    assert index.status == 200 and index.headers["Content-Type"].startswith("text/html")
    policy = index.headers["Content-Security-Policy"]
    assert policy == CONTENT_SECURITY_POLICY
    assert "default-src 'self'" in policy and "script-src 'self'" in policy and "unsafe" not in policy
    assert index.headers["X-Content-Type-Options"] == "nosniff"
    markup = _Markup()
    markup.feed(index.data.decode())
    assert not markup.inline, markup.inline
    assert markup.sources and "/_console/app.js" in markup.sources
    for source in markup.sources:
        reply = http.request("GET", setup.url + source)
        assert reply.status == 200, source
        assert reply.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    # every script: no innerHTML, no eval, no string handlers
    for script in (Path(__file__).parents[2] / "mlstream/fronts/console/static").glob("*.js"):
        text = script.read_text()
        for banned in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert banned not in text, (script.name, banned)
    # the same for "/_console/", HEAD, and no file outside the directory
    assert http.request("GET", f"{setup.url}/_console/").data == index.data
    assert http.request("HEAD", f"{setup.url}/_console/app.js").status == 200
    for path in ("/_console/nope.js", "/_console/..%2Froutes.py", "/_console/%2e%2e/__init__.py"):
        missing = http.request("GET", setup.url + path)
        assert missing.status == 404 and missing.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


# --- in the browser ---------------------------------------------------------------------------------

def test_sign_in_keeps_the_key_in_the_tab_and_a_wrong_key_gets_the_consoles_message(page, setup: Setup) -> None:
    refused: list[Any] = []
    page.on("response", lambda response: refused.append(response) if response.status == 401 else None)
    page.on("dialog", lambda dialog: (refused.append(dialog), dialog.dismiss()))
    page.goto(f"{setup.url}/_console")
    assert page.evaluate("document.activeElement.id") == "key-input"  # ready for the keyboard
    page.keyboard.type("mls_this-is-not-a-key")
    page.keyboard.press("Enter")
    message = wait_text(page, "#sign-in-message", "not accepted")
    assert "check that it is a key of this server" in message
    assert refused and all(not hasattr(r, "dismiss") for r in refused), refused  # no dialog of any kind
    assert all("Basic" not in (r.headers.get("www-authenticate") or "") for r in refused)
    assert page.evaluate("sessionStorage.length") == 0
    shoot(page, setup, "sign-in")

    page.fill("#key-input", setup.admin_key)
    page.press("#key-input", "Enter")
    page.wait_for_selector("#nav:not([hidden])")
    assert page.text_content("#who-role") == "admin key"
    wait_text(page, "#ov-version", r"\d+\.\d+")
    # kept in this tab's sessionStorage, nowhere else
    assert page.evaluate("Object.values(sessionStorage)") == [setup.admin_key]
    assert page.context.cookies() == [] and setup.admin_key not in page.url
    assert page.evaluate("localStorage.length") == 0
    page.reload()  # the same tab keeps it
    page.wait_for_selector("#nav:not([hidden])")
    # keyboard: a page link by Tab focus and Enter
    page.focus("nav a[data-page=playground]")
    page.keyboard.press("Enter")
    page.wait_for_selector("#page-playground:not([hidden])")
    assert page.evaluate("document.activeElement.id") == "playground-title"
    page.click("#sign-out")
    page.wait_for_selector("#sign-in:not([hidden])")
    assert page.evaluate("sessionStorage.length") == 0

    # a user key: no keys page, and what the API refuses it, in the API's words
    sign_in(page, setup, setup.user_key)
    assert page.text_content("#who-role") == "user key"
    assert page.is_hidden("nav a[data-page=keys]")
    go(page, "models")
    refusal = client_with(setup.url, bearer(setup.user_key)).call(
        "POST", "/_plugins/_ml/connectors/_search", {"query": {"match_all": {}}, "size": 1000})
    assert refusal.status == 403
    wait_text(page, "#connectors-table", re.escape(f"Cannot list connectors: {refusal.body['error']['reason']}"))


def test_a_key_revoked_while_signed_in_sends_the_console_back_to_sign_in(page, setup: Setup) -> None:
    keys = KeyStore(setup.server.app.store)
    key, secret = keys.create("admin", "short-lived")
    sign_in(page, setup, secret, "#models")
    keys.revoke(key.key_id)
    # a DOM click: the page may have found the revocation itself already (a timer's call)
    # and be back at sign-in, its Refresh button hidden (a UI click then waits for it in vain)
    page.evaluate("document.getElementById('models-refresh').click()")
    wait_text(page, "#sign-in-message", "no longer accepts this key")
    assert page.evaluate("sessionStorage.length") == 0


def test_names_descriptions_and_errors_carrying_markup_are_shown_as_text(page, setup: Setup) -> None:
    connector_id = setup.admin.create_connector(openai_connector(setup.fake, name=MARKUP, description=MARKUP))
    model_id = setup.admin.register(connector_id, name=MARKUP, description=MARKUP)
    sign_in(page, setup, hash_="#models")
    page.fill("#models-search", model_id)
    page.wait_for_selector(f"#models-table td:text-is('{model_id}')")
    row = page.locator("#models-table tbody tr", has_text=model_id)
    assert row.locator("td").first.text_content() == MARKUP
    page.fill("#models-search", connector_id)
    connector_row = page.locator("#connectors-table tbody tr", has_text=connector_id)
    assert connector_row.locator("td").nth(0).text_content() == MARKUP
    assert connector_row.locator("td").nth(3).text_content() == MARKUP
    # the API's error, itself carrying the markup, shown in its words
    page.fill("#connector-json", json.dumps({"name": "x", "protocol": "http", MARKUP: 1, "actions": []}))
    page.click("#connector-form button[type=submit]")
    assert wait_text(page, "#models-message", "unknown field") == f"unknown field [{MARKUP}] in connector"
    # in the details and the playground's model list too
    connector_row.get_by_role("button", name="Details").click()
    assert json.loads(wait_text(page, "#details-body", "name"))["name"] == MARKUP
    go(page, "playground")
    page.wait_for_selector(f"#play-model option[value='{model_id}']", state="attached")
    assert page.text_content(f"#play-model option[value='{model_id}']").startswith(MARKUP)
    # nothing of it became an element or ran
    assert page.locator("main img").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_create_a_connector_and_a_model_from_a_blueprint_deploy_undeploy_delete(page, setup: Setup) -> None:
    blueprint = openai_connector(setup.fake, name="Console blueprint connector",
                                 description="created from a pasted blueprint")
    sign_in(page, setup, hash_="#models")
    page.fill("#connector-json", json.dumps(blueprint, indent=2))
    page.click("#connector-form button[type=submit]")
    connector_id = wait_text(page, "#models-status", "Created connector").split()[-1]
    assert setup.admin.ok("GET", f"/_plugins/_ml/connectors/{connector_id}")["name"] == blueprint["name"]
    page.fill("#model-name", "console chat model")
    page.fill("#model-description", "registered from the console")
    assert page.input_value("#model-connector") == connector_id
    page.click("#model-form button[type=submit]")
    model_id = re.search(r"Registered model (\S+) and deployed it",
                         wait_text(page, "#models-status", "Registered model")).group(1)
    model = setup.admin.ok("GET", f"/_plugins/_ml/models/{model_id}")
    assert model["name"] == "console chat model" and model["connector_id"] == connector_id
    assert model["model_state"] == "DEPLOYED"

    page.fill("#models-search", "console")
    row = page.locator("#models-table tbody tr", has_text=model_id)
    assert row.locator("td").nth(2).text_content() == "DEPLOYED"
    # details: everything but the credential, which is never shown
    page.locator("#connectors-table tbody tr", has_text=connector_id).get_by_role("button", name="Details").click()
    details = json.loads(wait_text(page, "#details-body", "Console blueprint connector"))
    assert details["parameters"] == blueprint["parameters"] and details["actions"][0]["url"] == blueprint["actions"][0]["url"]
    assert "credential" not in details
    assert setup.fake.api_key not in page.content()
    shoot(page, setup, "models")

    # the API's own refusals, in its words
    page.locator("#connectors-table tbody tr", has_text=connector_id).get_by_role("button", name="Delete").click()
    page.get_by_role("group", name=re.compile("Delete connector")).get_by_role("button", name="Delete").click()
    refusal = wait_text(page, "#models-message", ".")
    assert refusal == setup.admin.call("DELETE", f"/_plugins/_ml/connectors/{connector_id}").body["error"]["reason"]
    row.get_by_role("button", name="Undeploy").click()
    page.wait_for_selector(f"#models-table tr:has-text('{model_id}') button:text-is('Deploy')")
    state = setup.admin.ok("GET", f"/_plugins/_ml/models/{model_id}")["model_state"]
    assert state != "DEPLOYED" and row.locator("td").nth(2).text_content() == state
    row = page.locator("#models-table tbody tr", has_text=model_id)
    row.get_by_role("button", name="Delete").click()
    page.get_by_role("group", name=re.compile("Delete model")).get_by_role("button", name="Cancel").click()
    assert setup.admin.call("GET", f"/_plugins/_ml/models/{model_id}").status == 200  # cancelled: still there
    row.get_by_role("button", name="Delete").click()
    page.get_by_role("group", name=re.compile("Delete model")).get_by_role("button", name="Delete").click()
    wait_text(page, "#models-status", "Deleted model")
    assert setup.admin.call("GET", f"/_plugins/_ml/models/{model_id}").status == 404


def test_the_playground_streams_tokens_as_they_come_and_stop_cancels_upstream(page, setup: Setup) -> None:
    slow = Scenario(chunks=30, delay_ms=120)
    model_id = setup.model("playground slow", slow)
    fast = setup.model("playground fast", Scenario(chunks=30))  # the same answer, at once
    endless = setup.model("playground endless", Scenario(chunks=500, delay_ms=100))
    sign_in(page, setup, hash_="#playground")
    page.wait_for_selector(f"#play-model option[value='{model_id}']", state="attached")
    page.select_option("#play-model", model_id)
    page.fill("#play-prompt", "Tell me about Hamlet.")
    completed = setup.fake.stats.streams_completed
    page.click("#play-send")
    # tokens are on the page while the provider is still sending
    partial = wait_text(page, "#play-output", r"\S")
    assert setup.fake.stats.streams_completed == completed, "the answer ended before the page showed a token"
    assert page.text_content("#play-state").startswith("streaming")
    answer = "".join(fake_tokens(slow))
    assert answer.startswith(partial) and len(partial) < len(answer)
    wait_text(page, "#play-state", "^done", timeout=20)
    assert page.text_content("#play-output") == answer
    assert re.fullmatch(r"[\d,]+ ms", page.text_content("#play-ttft"))
    assert page.text_content("#play-tokens") == str(len(fake_tokens(slow)))
    assert float(page.text_content("#play-rate").replace(",", "")) > 0
    shoot(page, setup, "playground")

    # Stop: the fetch is aborted, the server hangs up on the provider
    page.select_option("#play-model", endless)
    disconnects, completed = setup.fake.stats.client_disconnects, setup.fake.stats.streams_completed
    page.click("#play-send")
    wait_text(page, "#play-output", r"\S")
    page.click("#play-stop")
    wait_text(page, "#play-state", "^stopped after")
    assert setup.fake.stats.wait_for(lambda s: s.client_disconnects > disconnects, timeout=10), \
        "the provider never saw the stream cancelled"
    assert setup.fake.stats.streams_completed == completed
    assert page.is_enabled("#play-send") and page.is_disabled("#play-stop")

    # through the OpenAI front too (the pacing was proven above: the same answer at once here)
    page.select_option("#play-model", fast)
    page.select_option("#play-api", "openai")
    page.click("#play-send")
    wait_text(page, "#play-state", "^done", timeout=20)
    assert page.text_content("#play-output") == answer


def next_scrape(page: Any) -> None:
    """The overview's next scrape of /metrics, now: the page's clock (Playwright's, paused)
    moved on by one interval of its timer, and the answer awaited."""
    with page.expect_response(lambda response: response.url.endswith("/metrics")):
        page.clock.run_for(OVERVIEW_INTERVAL_MS)


def test_the_overview_shows_the_server_and_live_charts(page, setup: Setup) -> None:
    fast = setup.model("overview traffic", Scenario(chunks=3, first_delay_ms=30))
    user = client_with(setup.url, bearer(setup.user_key))
    page.clock.install()
    sign_in(page, setup)
    wait_text(page, "#ov-uptime", r"\d+s")
    page.clock.pause_at(int(page.evaluate("Date.now()")) + 100)  # from here the test says when a scrape comes
    assert page.text_content("#ov-processes") == "1"
    assert page.text_content("#ov-stream-workers") == str(setup.server.app.pool.workers)
    assert page.text_content("#ov-ready") == "Ready: taking traffic"
    next_scrape(page)
    page.wait_for_selector("#ov-rps-chart path.line", state="attached")  # two scrapes make a rate
    for round_ in range(5):  # traffic over a few scrapes, so the charts have a course to show
        for _ in range(round_ % 3 + 1):
            reply = user.call("POST", f"/_plugins/_ml/models/{fast}/_predict/stream",
                              {"parameters": {"messages": [{"role": "user", "content": "hi"}]}})
            assert reply.status == 200
        next_scrape(page)
    # the streams' first tokens, as quantiles over the last minute
    page.wait_for_selector("#ov-ttft-chart path.line[data-series=p95]", state="attached", timeout=10_000)
    label = page.get_attribute("#ov-ttft-chart svg", "aria-label")
    p50 = float(re.search(r"p50: latest ([\d.,]+)", label).group(1).replace(",", ""))
    assert 20 <= p50 <= 2000, label  # the fake waits 30 ms before its first byte
    shoot(page, setup, "overview")


def test_the_console_fits_a_phone(browser, setup: Setup) -> None:
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    try:
        sign_in(page, setup)
        for name in ("overview", "models", "usage", "playground", "keys"):
            go(page, name)
            page.wait_for_timeout(300)
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, (name, overflow)
            if name in ("overview", "playground"):
                shoot(page, setup, f"{name}-phone")
    finally:
        context.close()


# --- the keys and usage pages: on the usage API (issue 25) ------------------------------------------

def test_create_a_key_with_limits_see_its_secret_once_and_revoke_it(page, setup: Setup) -> None:
    sign_in(page, setup, hash_="#keys")
    page.fill("#key-name", "console-team")
    page.select_option("#key-role", "user")
    page.fill("#key-budget", "5")
    page.select_option("#key-period", "week")
    page.fill("#key-tpm", "100000")
    page.fill("#key-rpm", "60")
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("#secret-box:not([hidden])")
    secret = page.input_value("#secret-value")
    assert secret.startswith("mls_")
    assert page.evaluate("document.activeElement.id") == "secret-value"
    created = setup.admin.ok("GET", "/_plugins/_mlstream/keys/console-team")
    assert {k: created[k] for k in ("role", "budget", "budget_period", "tpm", "rpm")} == {
        "role": "user", "budget": 5.0, "budget_period": "week", "tpm": 100000, "rpm": 60}
    team = client_with(setup.url, bearer(secret))
    assert team.call("GET", "/_plugins/_ml/models/_search").status != 401
    row = page.locator("#keys-table tbody tr", has_text="console-team")
    assert "5 per week" in row.text_content()
    shoot(page, setup, "keys")
    page.click("#secret-done")
    assert page.is_hidden("#secret-box") and secret not in page.content()  # shown once
    page.reload()
    page.wait_for_selector("#keys-table tbody tr")
    assert secret not in page.content()

    row = page.locator("#keys-table tbody tr", has_text="console-team")
    row.get_by_role("button", name="Revoke").click()
    page.get_by_role("group", name=re.compile("Revoke key console-team")).get_by_role("button", name="Revoke").click()
    wait_text(page, "#keys-status", "Revoked key console-team")
    assert team.call("GET", "/_plugins/_ml/models/_search").status == 401
    # the page says "Revoked" first, then lists the keys again: the row goes with that list
    page.locator("#keys-table tbody tr", has_text="console-team").wait_for(state="detached", timeout=UI_TIMEOUT_MS)
    assert page.locator("#keys-table tbody tr", has_text="console-team").count() == 0


def test_a_key_revoked_on_the_keys_page_is_refused_at_once_on_every_front(page, setup: Setup) -> None:
    """As ``DELETE /_plugins/_mlstream/keys/<name>`` does: the next call with the key, on a
    connection it used a moment before (its key known to the server then), is a 401 in the
    error body of the front it calls."""
    _, secret = KeyStore(setup.server.app.store).create("user", "console-revoked")
    model_id = setup.model("revoked key's model", Scenario(chunks=2))
    user = client_with(setup.url, bearer(secret))
    chat = {"model": model_id, "messages": [{"role": "user", "content": "hi"}]}
    calls = {  # front -> (method, path, body)
        "ml-commons": ("POST", f"/_plugins/_ml/models/{model_id}/_predict", {"parameters": {"messages":
                                                                                      chat["messages"]}}),
        "openai": ("POST", "/v1/chat/completions", chat),
        "responses": ("POST", "/v1/responses", {"model": model_id, "input": "hi", "store": False}),
        "anthropic": ("POST", "/v1/messages", {**chat, "max_tokens": 20}),
    }
    for front, (method, path, body) in calls.items():
        assert user.call(method, path, body).status == 200, front
    sign_in(page, setup, hash_="#keys")
    row = page.locator("#keys-table tbody tr", has_text="console-revoked")
    row.get_by_role("button", name="Revoke").click()
    page.get_by_role("group", name=re.compile("Revoke key console-revoked")).get_by_role("button",
                                                                                      name="Revoke").click()
    wait_text(page, "#keys-status", "Revoked key console-revoked")
    refused = {front: user.call(method, path, body) for front, (method, path, body) in calls.items()}
    assert {front: reply.status for front, reply in refused.items()} == dict.fromkeys(calls, 401)
    reason = "the API key is not valid"
    assert refused["ml-commons"].body == {"error": {"root_cause": [{"type": "security_exception", "reason": reason}],
                                                    "type": "security_exception", "reason": reason}, "status": 401}
    for front in ("openai", "responses"):
        assert refused[front].body == {"error": {"message": reason, "type": "authentication_error", "param": None,
                                                 "code": "invalid_api_key"}}, front
    assert refused["anthropic"].body == {"type": "error", "error": {"type": "authentication_error",
                                                                    "message": reason}}
    assert all("Bearer" in reply.headers["WWW-Authenticate"] for reply in refused.values())


def test_usage_charts_and_csv_after_calls(page, setup: Setup, tmp_path: Path) -> None:
    model_id = setup.model("usage model", Scenario(chunks=4))
    user = client_with(setup.url, bearer(setup.user_key))
    for client in (setup.admin, user, user):
        reply = client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                            {"parameters": {"messages": [{"role": "user", "content": "count"}]}})
        assert reply.status == 200
    expected = setup.admin.ok("GET", f"/_plugins/_mlstream/usage?model={model_id}&group_by=key")
    assert expected["totals"]["requests"] == 3, expected
    sign_in(page, setup, hash_="#usage")
    page.wait_for_selector("#usage-tokens-chart path.line[data-series='console-user']", state="attached")
    legend = page.text_content("#usage-tokens-chart .legend")
    assert "console-user" in legend and "console-admin" in legend
    page.select_option("#usage-by", "model")
    page.wait_for_selector("#usage-tokens-chart .legend li:has-text('usage model')")
    rows = page.locator("#usage-table tbody tr", has_text=model_id)
    assert rows.count() >= 2  # one per key
    shoot(page, setup, "usage")
    with page.expect_download() as download:
        page.click("#usage-csv")
    csv = Path(download.value.path()).read_text()
    lines = csv.strip().splitlines()
    assert lines[0] == ("period,tenant,key,model,requests,errors,input_tokens,output_tokens,cached_input_tokens,cost,"
                        "cache_hits,saved_cost")
    mine = [line for line in lines if model_id in line]
    assert sum(int(line.split('","')[4]) for line in mine) == 3
    assert all(line.split('","')[1] == "default" for line in mine)


# --- tenants (issue 39) -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def teams(setup: Setup) -> dict[str, str]:
    """Two tenants, each with a user key, and a tenant_admin of the first: name -> secret."""
    for name in ("console-red", "console-blue"):
        setup.admin.ok("POST", "/_plugins/_mlstream/tenants", {"name": name})
    keys = KeyStore(setup.server.app.store)
    return {name: keys.create(role, name, tenant=tenant)[1] for name, role, tenant in (
        ("red-lead", "tenant_admin", "console-red"), ("red-dev", "user", "console-red"),
        ("blue-dev", "user", "console-blue"))}


def key_rows(page: Any) -> dict[str, list[str]]:
    """The keys table: name -> its cells' text."""
    rows = page.locator("#keys-table tbody tr")
    return {cells[0]: cells for cells in (rows.nth(i).locator("td").all_text_contents()
                                           for i in range(rows.count()))}


def test_a_tenant_admin_sees_and_makes_only_its_tenants_keys(page, setup: Setup, teams: dict[str, str]) -> None:
    sign_in(page, setup, teams["red-lead"], hash_="#keys")
    page.wait_for_selector("#page-keys:not([hidden])")
    assert page.text_content("#who-role") == "tenant_admin key · tenant console-red"
    page.wait_for_selector("#keys-table tbody tr:has-text('red-dev')")
    listed = key_rows(page)
    assert set(listed) == {"red-lead", "red-dev"}, listed  # blue's key, the admins' keys: not shown
    assert listed["red-dev"][1:3] == ["user", "console-red"]
    # nothing to pick that the API would refuse: no tenant, no admin role
    assert page.is_hidden("#keys-tenant-bar") and page.is_hidden("#key-tenant-field")
    assert page.eval_on_selector("#key-role option[value=admin]", "option => option.disabled")

    page.fill("#key-name", "red-bot")
    page.select_option("#key-role", "user")
    page.fill("#key-models", "gpt-small, gpt-large")
    page.fill("#key-backend-roles", "search, ops")
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("#secret-box:not([hidden])")
    page.wait_for_selector("#keys-table tbody tr:has-text('red-bot')")
    created = setup.admin.ok("GET", "/_plugins/_mlstream/keys/red-bot")
    assert {k: created[k] for k in ("role", "tenant", "models", "backend_roles")} == {
        "role": "user", "tenant": "console-red", "models": ["gpt-small", "gpt-large"],
        "backend_roles": ["search", "ops"]}
    assert key_rows(page)["red-bot"][3:5] == ["gpt-small, gpt-large", "search, ops"]
    shoot(page, setup, "keys-tenant-admin")

    go(page, "usage")
    assert page.is_hidden("#usage-tenant-field")
    assert page.eval_on_selector("#usage-by option[value=tenant]", "option => option.hidden")


def test_an_admin_sees_keys_and_usage_by_tenant(page, setup: Setup, teams: dict[str, str]) -> None:
    model_id = setup.model("tenants' model", Scenario(chunks=3))
    for name in ("red-dev", "blue-dev"):
        reply = client_with(setup.url, bearer(teams[name])).call(
            "POST", f"/_plugins/_ml/models/{model_id}/_predict", {"parameters": {"messages": [
                {"role": "user", "content": "hi"}]}})
        assert reply.status == 200, reply.body
    sign_in(page, setup, hash_="#keys")
    page.wait_for_selector("#keys-table tbody tr:has-text('blue-dev')")
    assert key_rows(page)["blue-dev"][2] == "console-blue"
    page.wait_for_selector("#keys-tenant option[value=console-blue]", state="attached")
    page.select_option("#keys-tenant", "console-blue")
    page.locator("#keys-table tbody tr", has_text="red-dev").wait_for(state="detached")
    assert set(key_rows(page)) == {"blue-dev"}

    page.fill("#key-name", "blue-lead")
    page.select_option("#key-role", "tenant_admin")
    page.select_option("#key-tenant", "console-blue")
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("#keys-table tbody tr:has-text('blue-lead')")
    created = setup.admin.ok("GET", "/_plugins/_mlstream/keys/blue-lead")
    assert (created["role"], created["tenant"]) == ("tenant_admin", "console-blue")
    assert page.input_value("#key-tenant") == "default"  # the form is reset to the default tenant

    go(page, "usage")
    page.wait_for_selector("#usage-tenant option[value=console-red]", state="attached")
    page.select_option("#usage-by", "tenant")
    page.wait_for_selector("#usage-tokens-chart path.line[data-series='console-blue']", state="attached")
    legend = page.text_content("#usage-tokens-chart .legend")
    assert "console-red" in legend and "console-blue" in legend
    page.select_option("#usage-tenant", "console-red")
    page.locator("#usage-tokens-chart path.line[data-series='console-blue']").wait_for(state="detached")
    tenants = {cells[1] for cells in (row.locator("td").all_text_contents()
                                      for row in page.locator("#usage-table tbody tr").all())}
    assert tenants == {"console-red"}, tenants
    shoot(page, setup, "usage-tenants")


def test_usage_shows_the_calls_the_response_cache_answered(page, setup: Setup) -> None:
    connector_id = setup.admin.create_connector(openai_connector(setup.fake, model=Scenario(chunks=2).to_model()))
    model_id = setup.admin.register(connector_id, name="cached model", cache={"mode": "exact"})
    for status in ("MISS", "HIT", "HIT"):
        reply = setup.admin.call("POST", "/v1/chat/completions", {"model": model_id, "messages": [
            {"role": "user", "content": "again"}]})
        assert reply.headers["x-mlstream-cache"] == status
    sign_in(page, setup, hash_="#usage")
    row = page.locator("#usage-table tbody tr", has_text=model_id)
    row.wait_for()
    cells = row.locator("td").all_text_contents()
    assert cells[4] == "3" and cells[10] == "2", cells  # requests, cache hits
    wait_text(page, "#usage-totals", r"\d+ answered from the response cache")


def test_the_pages_arithmetic_quantiles_and_csv_cells(page, setup: Setup) -> None:
    """The console's own pure functions, run in the browser: Prometheus' histogram_quantile
    (linear within the bucket holding the rank), and CSV cells a spreadsheet will not run."""
    page.goto(f"{setup.url}/_console")
    got = page.evaluate("""async () => {
        const m = await import("/_console/metrics.js");
        const u = await import("/_console/page-usage.js");
        const cumulative = [[0.1, 5], [0.25, 10], [Infinity, 10]];
        const later = [[0.1, 7], [0.25, 12], [Infinity, 13]];
        return {
            p50: m.quantile(0.5, cumulative), p95: m.quantile(0.95, cumulative),
            none: m.quantile(0.5, [[0.1, 0], [Infinity, 0]]), past: m.quantile(0.99, later),
            delta: m.bucketDelta(later, cumulative).map(([le, n]) => [String(le), n]),
            parsed: m.parseMetrics('a_total{route="/x",q="a\\\\"b"} 3\\n# HELP b x\\nb 1.5\\n'),
            cells: ["=HYPERLINK(1)", "+1", "-2", "-2.5", "@x", "plain", 'say "hi"', null].map(u.csvCell),
        };
    }""")
    assert got["p50"] == pytest.approx(0.1) and got["p95"] == pytest.approx(0.1 + 0.15 * 4.5 / 5)
    assert got["none"] is None and got["past"] == pytest.approx(0.25)  # past the last bound: that bound
    assert got["delta"] == [["0.1", 2], ["0.25", 2], ["Infinity", 3]]
    assert got["parsed"] == [{"name": "a_total", "labels": {"route": "/x", "q": 'a"b'}, "value": 3},
                             {"name": "b", "labels": {}, "value": 1.5}]
    assert got["cells"] == ['"\'=HYPERLINK(1)"', '"\'+1"', '"-2"', '"-2.5"', '"\'@x"', '"plain"', '"say ""hi"""', '""']
