"""Markdown and HTML typed by an outsider never become markup on the dashboard's pages.

One `gpuwaste dashboard` in Debian's chromium (Playwright). Every URL query parameter of every
page gets a payload holding a Markdown image, a Markdown link, an HTML <img> and Markdown bold,
all pointing at a host nothing serves (127.0.0.2:9). The pages and their parameters are read from
the code (the app's pages, gpuwaste/dashboard/pages.py; every widget bound to the URL, the sidebar's on every page), so
a new page or parameter is covered without touching this file. The same payload is the user, the
job name and the host of one job of the warehouse, and a VC, for the data-driven case.

After each page has run: no element links to or loads from the payload's host (an <a href>, an
<img src>, a style's url()), no request went to it, no <strong>/<em>/<a> holds the payload's
words, and where the payload's words show, they show as the payload's literal text.

`widgets.plain` is the pages' one way to put such text into Markdown; its property test is here
too (no browser).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import pytest
from harness.browser import dashboard_session, require_browser, visit, wait_for_charts
from harness.result_warehouse import Built, build_result_warehouse
from hypothesis import given
from hypothesis import strategies as st
from markdown_it import MarkdownIt

import gpuwaste.dashboard
from gpuwaste.dashboard.pages import PAGES as APP_PAGES
from gpuwaste.dashboard.widgets import plain
from gpuwaste.render import safe_text
from tests.reliability.fuzzing import fuzz_settings

HOST = "127.0.0.2:9"  # loopback, nothing listens on port 9: a request to it fails, but is seen
IMAGE = f"![x](http://{HOST}/p.png)"
LINK = f"[Session expired: click](http://{HOST}/)"
HTML = f"<img src=http://{HOST}/i.png>"
BOLD = "**pwnbold**"
PAYLOAD = f"{IMAGE} {LINK} {HTML} {BOLD}"
# The payload's visible words: each must show only inside the payload's literal text.
WORDS = {"Session expired": LINK, "pwnbold": BOLD, "p.png": IMAGE, "i.png": HTML}

DASHBOARD = Path(gpuwaste.dashboard.__file__).parent  # its scripts are read, never run


def _resolve(node: ast.expr, namespace: dict[str, Any]) -> str | None:
    """A widget key: a string, or a constant the module imports (`CLUSTER`, `widgets.JOB`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and isinstance(namespace.get(node.id), str):
        return str(namespace[node.id])
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        value = getattr(namespace.get(node.value.id), node.attr, None)
        return value if isinstance(value, str) else None
    return None


def _names(tree: ast.Module) -> dict[str, Any]:
    """The names a script imports and its top-level string constants (only these statements
    are run: a page script is not importable)."""
    namespace: dict[str, Any] = {}
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    exec(compile(ast.Module(body=imports, type_ignores=[]), "<imports>", "exec"), namespace)
    for n in tree.body:
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant):
            namespace.update((t.id, n.value.value) for t in n.targets if isinstance(t, ast.Name))
    return namespace


def url_params(path: Path) -> list[str]:
    """The URL query parameters a script reads: the keys of its widgets bound to the URL
    (`bind="query-params"`), and the keys it reads from `st.query_params` by name."""
    tree = ast.parse(path.read_text())
    namespace = _names(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        kw = {k.arg: k.value for k in node.keywords}
        bind = kw.get("bind")
        if isinstance(bind, ast.Constant) and bind.value == "query-params":
            key = _resolve(kw["key"], namespace)
            assert key is not None, f"{path.name}:{node.lineno}: a bound key this test cannot read"
            found.append(key)
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr in ("get", "get_all")
                and ast.unparse(func.value) == "st.query_params" and node.args):  # fmt: skip
            key = _resolve(node.args[0], namespace)
            if key is not None:
                found.append(key)
    return list(dict.fromkeys(found))


def pages() -> list[tuple[str, str, Path]]:
    """(url path, title, script) of each page of the app (the default page's path: "", it is
    served at the root only)."""
    return [("" if p.default else p.url_path, p.title, p.path) for p in APP_PAGES]


SIDEBAR = url_params(DASHBOARD / "widgets.py")  # drawn by app.py on every page
PAGES = pages()


def test_the_pages_and_parameters_are_found() -> None:
    """The derivation above reads what the code has (a guard against it finding nothing)."""
    assert {"cluster", "vc", "model", "period", "user", "size", "state"} <= set(SIDEBAR)
    assert len(PAGES) >= 7
    own = {p[0]: url_params(p[2]) for p in PAGES}
    assert {"idle_hours", "grace", "only", "cap"} <= set(own["policies"])
    assert {"job", "q"} <= set(own["job"]) and "sql" in own["sql"] and "" in own


@fuzz_settings
@given(st.text())
def test_plain_is_one_code_span_of_the_text(text: str) -> None:
    """Whatever the text, CommonMark reads `plain(text)` as one code span holding the text (its
    control characters escaped): nothing in it is markup."""
    shown = plain(text)
    if not safe_text(text):
        assert shown == ""
        return
    (block,) = [t for t in MarkdownIt("commonmark").parse(f"x {shown}") if t.type == "inline"]
    kinds = [t.type for t in block.children or []]
    assert kinds == ["text", "code_inline"], (shown, kinds)
    assert (block.children or [])[1].content == safe_text(text)


# ------------------------------------------------------------------------------ the browser
@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Built:
    require_browser()
    d = tmp_path_factory.mktemp("markup") / "data"
    return build_result_warehouse(d, n_jobs=300, seed=7, vcs=("vision", PAYLOAD, "speech"),
                                  planted=PAYLOAD)  # fmt: skip


@pytest.fixture(scope="module")
def session(
    warehouse: Built, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Any, list[str]]]:
    """The dashboard, a page, and every URL the page requested (appended as they happen)."""
    with dashboard_session(warehouse.data_dir, tmp_path_factory) as (url, page):
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        yield url, page, requests


MARKUP_JS = """
([host, words]) => {
  const named = [];
  // attributes that fetch or link (a label, title or input value naming the host is text)
  const urls = ['href', 'src', 'srcset', 'xlink:href', 'action', 'formaction', 'poster', 'data',
                'background', 'style', 'ping', 'cite'];
  for (const el of document.querySelectorAll('*')) {
    for (const a of el.attributes) {
      if (urls.includes(a.name) && a.value.includes(host))
        named.push(`<${el.tagName.toLowerCase()} ${a.name}=${a.value}>`);
    }
  }
  const styled = Array.from(document.querySelectorAll('strong, em, b, i, a, h1, h2, h3, h4, h5, h6'))
    .filter(el => words.some(w => el.textContent.includes(w)))
    .map(el => el.outerHTML.slice(0, 200));
  // counted apart, as text cut short there is literal anyway: a chart's labels (SVG text, cut
  // to fit with an ellipsis) and code blocks (st.code: the SQL error quotes the query cut short)
  const apart = Array.from(document.querySelectorAll(
    '[data-testid="stVegaLiteChart"], [data-testid="stCode"]')).map(el => el.innerText);
  return {named, styled, text: document.body.innerText, apart};
}
"""


def _around(text: str, word: str) -> list[str]:
    return [text[max(0, i - 60) : i + 60] for i in range(len(text)) if text.startswith(word, i)]


def _check(page: Any, requests: list[str], where: str) -> str:
    """Assert the page shows no markup made of the payload; returns the page's text."""
    page.wait_for_timeout(300)  # an <img> the page drew would have requested by now
    found = page.evaluate(MARKUP_JS, [HOST, list(WORDS)])
    outside = [r for r in requests if urlsplit(r).netloc == HOST]
    assert found["named"] == [], f"{where}: elements naming {HOST}: {found['named']}"
    assert outside == [], f"{where}: requests to {HOST}: {outside}"
    assert found["styled"] == [], f"{where}: payload rendered as markup: {found['styled']}"
    text = str(found["text"])

    def shown(s: str) -> int:
        return text.count(s) - sum(c.count(s) for c in found["apart"])

    for word, literal in WORDS.items():
        assert shown(word) == shown(literal), (
            f"{where}: {word!r} shown {shown(word)} times, as {literal!r} only "
            f"{shown(literal)} times: {_around(text, word)}"
        )
    return text


def _open(session: tuple[str, Any, list[str]], path: str, title: str,
          params: dict[str, str]) -> str:  # fmt: skip
    url, page, requests = session
    requests.clear()
    query = f"?{urlencode(params, quote_via=quote)}" if params else ""
    where = f"/{path}{query}"
    visit(page, f"{url}/{path}{query}", title, [])
    run = page.get_by_role("button", name="Run", exact=True)
    if run.count():  # a page that runs what the URL holds on a press (SQL): press it
        run.first.click()
        page.wait_for_timeout(500)
        wait_for_charts(page, [])
    return _check(page, requests, where)


@pytest.mark.browser
@pytest.mark.slow
def test_url_parameters_never_become_markup(session: tuple[str, Any, list[str]]) -> None:
    shown = {}
    for path, title, script in PAGES:
        # the sidebar's parameters all at once (each warns on its own), then each of the page's
        _open(session, path, title, dict.fromkeys(SIDEBAR, PAYLOAD))
        for key in url_params(script):
            if key not in SIDEBAR:
                shown[(path, key)] = PAYLOAD in _open(session, path, title, {key: PAYLOAD})
    # the reported case: the Policies page quotes ?idle_hours= in its warning, as text
    assert shown[("policies", "idle_hours")]


@pytest.mark.browser
@pytest.mark.slow
def test_names_from_the_data_never_become_markup(
    session: tuple[str, Any, list[str]], warehouse: Built
) -> None:
    job = warehouse.drill_jobs[0]  # its user, name and host are the payload; a VC is too
    texts = [_open(session, path, title, {}) for path, title, _ in PAGES if path != "job"]
    texts.append(_open(session, "", "Overview", {"user": PAYLOAD}))
    texts.append(_open(session, "waste", "Waste tables", {"vc": PAYLOAD}))
    texts.append(_open(session, "job", "Job", {"job": job}))
    texts.append(_open(session, "job", "Job", {"q": "Session"}))
    assert sum(PAYLOAD in t for t in texts) >= 3  # shown, as text
