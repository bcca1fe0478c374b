"""The review app in a real browser: Debian's Chromium (``/usr/bin/chromium``, or
``REFUSAL_AUDIT_CHROMIUM``) driven by Playwright, nothing downloaded (issue 10).

Set ``REFUSAL_AUDIT_SCREENSHOT_DIR`` to keep the screenshots (the README's come from here).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from review_app_harness import PASSWORDS, ReviewServer, serve

from warehouse import Warehouse
from warehouse.review import current_verdicts

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("REFUSAL_AUDIT_CHROMIUM") or shutil.which("chromium") or ""
# no background traffic (this machine's network is closed), no sandbox (CI runs as root)
CHROMIUM_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert CHROMIUM and Path(CHROMIUM).exists(), (
        "Chromium not found: install Debian's chromium package (.ci/run does) or set "
        "REFUSAL_AUDIT_CHROMIUM"
    )
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture
def server(warehouse: Warehouse, tmp_path: Path) -> Iterator[ReviewServer]:
    with serve(warehouse, tmp_path / "data") as running:
        yield running


def open_page(browser: Any, server: ReviewServer, name: str) -> Any:
    page = browser.new_context(viewport={"width": 1366, "height": 900}).new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    page.goto(server.url + "/")
    assert "/login" in page.url
    page.fill("input[name=name]", name)
    page.fill("input[name=password]", PASSWORDS[name])
    page.press("input[name=password]", "Enter")
    page.wait_for_url(server.url + "/")
    return page


def log_id_of(page: Any) -> str:
    return str(page.locator("h1 code").inner_text())


def screenshot(page: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    keep = os.environ.get("REFUSAL_AUDIT_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / name)
    return path


def test_review_with_the_mouse_and_a_second_reviewer_never_gets_the_held_item(
    browser: Any, server: ReviewServer, tmp_path: Path
) -> None:
    alice = open_page(browser, server, "alice")
    # 166: the example log's review items since the pre-filter reads the request (153 before)
    assert "0 / 166" in alice.locator("table.queues").inner_text()
    alice.click("form[data-claim] button")
    alice.wait_for_selector("#verdict-form")
    held = log_id_of(alice)
    assert alice.locator("#request").inner_text().strip()
    assert alice.locator("#model-category").inner_text().strip()
    assert "held for you" in alice.locator(".item-head").inner_text()

    bob = open_page(browser, server, "bob")
    bob.click("form[data-claim] button")
    bob.wait_for_selector("#verdict-form")
    assert log_id_of(bob) != held  # alice holds hers

    alice.check("#verdict-agree")
    assert alice.locator("#correction").is_hidden()  # corrections only on Disagree
    with alice.expect_navigation():
        alice.click("#submit-next")
    second = log_id_of(alice)
    assert second not in (held, log_id_of(bob))

    model_says = alice.locator("#model-category").inner_text().strip()
    model_fp = alice.locator("#model-fp").inner_text().startswith("yes")
    corrected = "policy_gray_zone" if model_says == "over_refusal" else "over_refusal"
    alice.check("#verdict-disagree")
    alice.check(f'input[name="corrected_category"][value="{corrected}"]')
    alice.check("#fp-no" if model_fp else "#fp-yes")
    alice.select_option("#clause", "none")
    alice.fill("#note", "the model misread the request")
    screenshot(alice, tmp_path, "review-item.png")
    with alice.expect_navigation():
        alice.click("#submit-next")

    stored = {v.log_id: v for v in current_verdicts(server.store)}
    assert set(stored) == {held, second}
    assert stored[held].verdict == "agree" and stored[held].reviewer == "alice"
    fix = stored[second]
    assert (fix.verdict, fix.corrected_category, fix.corrected_false_positive) == (
        "disagree", corrected, not model_fp,
    )  # fmt: skip
    assert fix.corrected_clause is None and fix.note == "the model misread the request"
    assert not alice.errors and not bob.errors


def test_the_keyboard_only_flow(browser: Any, server: ReviewServer, tmp_path: Path) -> None:
    page = open_page(browser, server, "carol")
    with page.expect_navigation():
        page.keyboard.press("r")  # review the first queue
    first = log_id_of(page)

    page.keyboard.press("?")
    assert page.locator("#help").is_visible()
    screenshot(page, tmp_path, "review-help.png")
    page.keyboard.press("Escape")
    assert page.locator("#help").is_hidden()

    def code(key: str) -> str:
        selector = f'input[name="corrected_category"][data-key="{key}"]'
        return str(page.locator(selector).get_attribute("value"))

    page.keyboard.press("d")
    assert page.locator("#correction").is_visible()
    page.keyboard.press("1")
    page.keyboard.press("2")  # quickly after the 1: category 12
    assert page.locator('input[name="corrected_category"]:checked').get_attribute("value") == (
        code("12")
    )
    page.wait_for_timeout(900)  # a pause: the next digit starts a new number
    page.keyboard.press("1")
    first_code = code("1")
    assert page.locator('input[name="corrected_category"]:checked').get_attribute("value") == (
        first_code
    )
    page.keyboard.press("y")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    second = log_id_of(page)
    assert second != first

    # typing in the note does not trigger shortcuts; Escape leaves the field
    page.keyboard.press("t")
    page.keyboard.type("a and d are letters, s too")
    assert not page.locator("#verdict-agree").is_checked()
    assert not page.locator("#verdict-disagree").is_checked()
    page.keyboard.press("Escape")
    page.keyboard.press("a")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    third = log_id_of(page)

    with page.expect_navigation():
        page.keyboard.press("s")  # skip: the next item
    fourth = log_id_of(page)
    assert fourth not in (first, second, third)

    with page.expect_navigation():
        page.keyboard.press("p")  # previous: the item judged last
    assert log_id_of(page) == second

    stored = {v.log_id: v for v in current_verdicts(server.store) if v.reviewer == "carol"}
    assert set(stored) == {first, second}
    assert stored[first].verdict == "disagree" and stored[first].corrected_category == first_code
    assert stored[first].corrected_false_positive is True
    assert stored[second].verdict == "agree"
    assert stored[second].note == "a and d are letters, s too"
    assert server.service.skipped("carol") == 1
    assert not page.errors


def test_pages_render_for_an_admin(browser: Any, server: ReviewServer, tmp_path: Path) -> None:
    page = open_page(browser, server, "alice")
    screenshot(page, tmp_path, "review-queues.png")
    page.click("text=Manage queues")
    page.fill("input[name=name]", "gaps")
    page.select_option("select[name=review_reason]", "policy_gap")
    with page.expect_navigation():
        page.click("text=Save queue")
    assert "review_reason: policy_gap" in page.locator("main table").inner_text()
    page.click("text=Queues")
    page.wait_for_url(server.url + "/")
    assert "gaps" in page.locator("table.queues").inner_text()
    page.click("text=My verdicts")
    assert "No verdicts yet" in page.inner_text("main")
    assert not page.errors


# "agree: a, Enter; disagree: d, a category number, y or n, Enter" in the README's quick start
# and in docs/review.md; each documented step and the key it stands for
DOCUMENTED = re.compile(r"press r\W.*?agree: (?P<agree>[^;]+?); disagree: (?P<disagree>.+?, Enter)")
STEP_KEYS = {"a": "a", "d": "d", "Enter": "Enter", "a category number": "1", "y or n": "y"}


def documented_sequences() -> tuple[list[str], list[str]]:
    """The agree and disagree key sequences as the README and docs/review.md write them
    (both must say the same)."""
    found = []
    for path in (REPO / "README.md", REPO / "docs" / "review.md"):
        text = " ".join(path.read_text(encoding="utf-8").replace("`", "").split())
        match = DOCUMENTED.search(text)
        assert match, f"{path.name} does not document the review key sequence"
        found.append((match["agree"].split(", "), match["disagree"].split(", ")))
    assert found[0] == found[1], found
    return found[0]


def test_the_documented_key_sequence_judges_items(
    browser: Any, server: ReviewServer, tmp_path: Path
) -> None:
    """Exactly the keys the README and docs/review.md give: r, then agree and disagree."""
    agree, disagree = documented_sequences()
    assert set(agree + disagree) <= set(STEP_KEYS), agree + disagree
    page = open_page(browser, server, "bob")
    with page.expect_navigation():
        page.keyboard.press("r")
    judged = []
    for steps in (agree, disagree):
        judged.append(log_id_of(page))
        *keys, last = [STEP_KEYS[step] for step in steps]
        for key in keys:
            page.keyboard.press(key)
        with page.expect_navigation():
            page.keyboard.press(last)
        assert not page.locator("#form-error").count(), page.locator("#form-error").inner_text()
        assert log_id_of(page) not in judged  # stored, and the next item is open
    stored = {v.log_id: v for v in current_verdicts(server.store) if v.reviewer == "bob"}
    assert set(stored) == set(judged)
    assert stored[judged[0]].verdict == "agree"
    fix = stored[judged[1]]
    category_1 = page.locator('input[name="corrected_category"][data-key="1"]')
    assert (fix.verdict, fix.corrected_category, fix.corrected_false_positive) == (
        "disagree", category_1.get_attribute("value"), True,
    )  # fmt: skip
    assert not page.errors


_LEFT_EDGES = """([selector, needle]) => {
  const walker = document.createTreeWalker(document.querySelector(selector), NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.data.indexOf(needle);
    if (at < 0) continue;
    const left = (k) => {
      const range = document.createRange();
      range.setStart(node, at + k);
      range.setEnd(node, at + k + 1);
      return range.getBoundingClientRect().left;
    };
    return [left(0), left(needle.length - 1)];
  }
  return null;
}"""


def test_a_right_to_left_override_does_not_reverse_the_following_text(
    browser: Any, warehouse: Warehouse, tmp_path: Path
) -> None:
    """A logged U+202E before "AFTER-TEXT" (in the request) and in the model name (before the
    page's own "product:" chip): both read left to right in Chromium (issue 23, item 7)."""
    from review_app_harness import audit_in_review
    from test_review_app import bidi_docs

    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API keeps an event loop here
        pool.submit(audit_in_review, warehouse, bidi_docs(), tmp_path / "bidi.jsonl").result()
    with serve(warehouse, tmp_path / "data", audit_log=False) as running:
        page = open_page(browser, running, "bob")
        with page.expect_navigation():
            page.keyboard.press("r")
        screenshot(page, tmp_path, "review-bidi.png")
        for selector, needle in (("#request", "AFTER-TEXT"), (".item-head .meta", "product")):
            edges = page.evaluate(_LEFT_EDGES, [selector, needle])
            assert edges is not None, (selector, needle)
            first, last = edges
            assert first < last, f"{needle!r} in {selector} is drawn right to left"
        assert page.locator("#request .invisible-char").first.is_visible()
        assert not page.errors


def test_the_disagreements_page_lists_both_directions_and_filters(
    browser: Any, warehouse: Warehouse, tmp_path: Path
) -> None:
    """The review app lists the events on which the platform classifier and our detection
    disagree (issue 25), and keeps one direction when asked."""
    from review_app_harness import audit_in_review
    from test_refusal_disagreement import EVENTS

    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API keeps an event loop here
        pool.submit(audit_in_review, warehouse, EVENTS, tmp_path / "verdicts.jsonl").result()
    with serve(warehouse, tmp_path / "data", audit_log=False) as running:
        page = open_page(browser, running, "bob")
        page.click("text=Classifier vs detector")
        page.wait_for_url(running.url + "/disagreements")
        rows = page.locator("#disagreements tbody tr")
        assert rows.count() == 2
        listed = rows.all_inner_texts()
        assert any("missed-refusal" in r and "detector refusal classifier not" in r for r in listed)
        assert any("flagged-answer" in r and "classifier refusal detector not" in r for r in listed)
        screenshot(page, tmp_path, "review-disagreements.png")
        with page.expect_navigation():
            page.click("text=detector refusal classifier not")
        assert rows.count() == 1 and "missed-refusal" in rows.first.inner_text()
        assert "apology" in rows.first.inner_text()  # our cues say why we call it a refusal
        assert not page.errors
