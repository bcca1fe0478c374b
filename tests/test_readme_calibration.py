"""The README's calibration quick start, run exactly as written (issue 23): its code block is
parsed from README.md and its commands run in order, as subprocesses in a fresh directory
(so a fresh data directory), after the commands of ``make demo`` it starts from. Passwords
are typed on stdin where a command asks for one; ``review serve`` is started, and the
approval its comment describes is done over HTTP with a real client (logged in as the
approver; the run's starter tries to approve her own run and is refused); then Ctrl-C."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from streaming import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SECTION = "## Quick start: refusal-style calibration"
PASSWORDS = {"priya": "priya-password-1", "omar": "omar-password-22"}
_CSRF = re.compile(r'name="csrftoken" value="([^"]+)"')


def quick_start() -> tuple[list[list[str]], list[str]]:
    """The commands of the quick start's code block (continuations joined, comments dropped)
    and the comment of each."""
    text = (REPO / "README.md").read_text(encoding="utf-8").split(SECTION, 1)[1]
    block = text.split("```bash\n", 1)[1].split("\n```", 1)[0].replace("\\\n", " ")
    commands, comments = [], []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            commands.append(words)
            comments.append(line.split("#", 1)[1] if "#" in line else "")
    return commands, comments


def demo() -> list[list[str]]:
    """The commands of ``make demo`` (the quick start begins "After `make demo`")."""
    recipe = (REPO / "Makefile").read_text(encoding="utf-8").split("\ndemo:", 1)[1]
    lines = []
    for line in recipe.splitlines()[1:]:
        if not line.startswith("\t"):
            break
        lines.append(shlex.split(line.strip().replace("$(BIN)/", "")))
    return lines


def stdin_for(words: list[str]) -> str:
    """What a person types for ``words``: the account's password where one is asked."""
    if words[1:3] == ["review", "add-reviewer"]:
        return PASSWORDS[words[3]] + "\n"
    if words[1:3] == ["calibrate", "run"] and "--started-by" in words:
        return PASSWORDS[words[words.index("--started-by") + 1]] + "\n"
    return ""


def run(words: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = [str(BIN / words[0]), *words[1:]] if words[0] == "refusal-audit" else words
    done = subprocess.run(argv, cwd=cwd, env=env, input=stdin_for(words), text=True,
                          capture_output=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, f"{shlex.join(words)} exited {done.returncode}:\n" + (
        done.stdout[-3000:] + done.stderr[-3000:]
    )
    return done


class Browser:
    """A logged-in HTTP client of the review app (the forms a browser would send)."""

    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, follow_redirects=False, timeout=30,
                                 headers={"Origin": url, "Referer": url + "/"})  # fmt: skip
        token = _CSRF.search(self.http.get("/login").text)
        assert token, "no CSRF token on the login page"
        form = {"csrftoken": token.group(1), "name": name, "password": PASSWORDS[name],
                "next": "/"}  # fmt: skip
        reply = self.http.post("/login", data=form)
        assert reply.status_code == 303, reply.text

    def decide(self, run_id: str, style: str, decision: str, note: str) -> httpx.Response:
        page = self.http.get(f"/calibration/runs/{run_id}").text
        nonce = re.search(
            rf'name="style" value="{re.escape(style)}">\s*<input type="hidden" name="nonce" '
            r'value="([^"]+)"', page,
        )  # fmt: skip
        token = _CSRF.search(page)
        assert token, "no CSRF token on the run page"
        return self.http.post("/calibration/decision", data={
            "csrftoken": token.group(1), "run_id": run_id, "style": style, "decision": decision,
            "note": note, "nonce": nonce.group(1) if nonce else "n" * 22,
        })  # fmt: skip


def approve_as_described(url: str, comment: str) -> None:
    """What the ``review serve`` line's comment says: log in as the approver, open
    Calibration, the run, approve the two named variants with a note; and the run's
    starter may not approve her own run."""
    approver = re.search(r"log in as (\w+)", comment)
    styles = re.search(r"approve (\w+) and (\w+)", comment)
    assert approver and styles, comment
    omar = Browser(url, approver.group(1))
    queue = omar.http.get("/calibration")
    assert queue.status_code == 200
    runs = re.findall(r'data-run="([^"]+)"', queue.text)
    assert len(runs) == 1 and "6 pending" in queue.text and "started by: priya" in queue.text
    run_id = runs[0]
    page = omar.http.get(f"/calibration/runs/{run_id}").text
    assert page.count('class="decision-form"') == 6, page
    assert "starter verified by password" in page  # priya typed her password
    priya = Browser(url, "priya")  # an approver too, but she started this run
    own = priya.http.get(f"/calibration/runs/{run_id}").text
    assert 'class="decision-form"' not in own and "You started this run" in own
    refused = priya.decide(run_id, styles.group(1), "approve", "my own run, looks great")
    assert refused.status_code == 403 and "you started this run" in refused.text
    for style in styles.groups():
        saved = omar.decide(run_id, style, "approve", f"{style}: clear, still refuses")
        assert saved.status_code == 303, saved.text
    after = omar.http.get("/calibration").text
    assert "4 pending" in after
    priya.http.close()
    omar.http.close()


def serve(words: list[str], cwd: Path, env: dict[str, str], comment: str) -> None:
    """Run ``review serve`` until the approval is done, then Ctrl-C."""
    port = free_port()
    env = {**env, "REFUSAL_AUDIT_REVIEW_WEB_PORT": str(port)}
    log = cwd / "review-serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(BIN / words[0]), *words[1:]], cwd=cwd, env=env,
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "review serve did not start"
            time.sleep(0.3)
        approve_as_described(url, comment)
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()[-3000:]


def test_the_calibration_quick_start_works_as_written(tmp_path: Path) -> None:
    commands, comments = quick_start()
    assert [" ".join(c[:3]) for c in commands][:2] == [
        "refusal-audit review add-reviewer", "refusal-audit calibrate run",
    ]  # fmt: skip
    (tmp_path / "examples").symlink_to(REPO / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFUSAL_AUDIT_")}
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "COLUMNS": "200"})
    for words in demo():
        run(words, tmp_path, env)
    outputs = []
    for words, comment in zip(commands, comments, strict=True):
        if words[1:3] == ["review", "serve"]:
            serve(words, tmp_path, env, comment)
            continue
        outputs.append(run(words, tmp_path, env).stdout)
        if words[1:3] == ["calibrate", "list"]:
            assert "6/6" in outputs[-1] and "priya" in outputs[-1]
    arms = (tmp_path / "out" / "arms.json").read_text(encoding="utf-8")
    assert "policy_citing" in arms and "empathetic_warm" in arms
    assert re.search(r"winner: policy_citing", outputs[-1]), outputs[-1]
