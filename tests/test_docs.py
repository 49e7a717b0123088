"""The docs site and the README: the site builds with ``--strict`` (no broken link, every API page
resolves), every ``python -m fedray`` command a page gives composes and plans, every experiment
preset has a command on a page, and the main job prints the numbers the pages quote."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, load_script, shared_ray_address

DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md")) + [REPO / "README.md"]
_FENCE = re.compile(r"(?:^<!-- docs-test: (?P<tag>[\w-]+) -->\n)?^```(?P<info>\w*)[^\n]*\n(?P<body>.*?)^```",
                    re.M | re.S)


def blocks(page: Path) -> list[tuple[str, str | None, str]]:
    """(language, docs-test tag or None, body) of every fenced block of a page."""
    return [(m["info"], m["tag"], m["body"]) for m in _FENCE.finditer(page.read_text())]


def shell_commands(page: Path) -> list[str]:
    """The `python -m fedray` commands of a page's bash blocks, continuation lines joined and
    comments dropped."""
    commands = []
    for info, _, body in blocks(page):
        if info != "bash":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:3] == ["python", "-m", "fedray"]:
                commands.append(shlex.join(words))
    return commands


def table_commands() -> list[str]:
    """The commands in table cells (`python -m fedray ...` in backticks)."""
    found = []
    for page in PAGES:
        found += re.findall(r"`(python -m fedray [^`]+)`", page.read_text())
    return found


COMMANDS = sorted({c for page in PAGES for c in shell_commands(page)} | set(table_commands()))


def overrides(command: str) -> list[str]:
    """What the command line would compose: a sweep's first value of each swept key, Hydra's own
    settings (launcher, sweeper) left to Hydra, but for the search path (a user's config folder)."""
    words = shlex.split(command)[3:]
    sweep = "-m" in words
    chosen = []
    for word in words:
        if word == "-m" or (word.startswith(("hydra/", "hydra.")) and not word.startswith("hydra.searchpath=")) \
                or "$" in word:
            continue            # Hydra's own settings, and a recipe's shell variables (addresses)
        if sweep and "=" in word and "[" not in word:
            key, value = word.split("=", 1)
            word = f"{key}={value.split(',')[0]}"
        chosen.append(word)
    return chosen


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    """``mkdocs build --strict`` once for the tests that read the site: (return code, stderr, folder)."""
    site = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stderr, site


@pytest.mark.slow  # about 10 s (20 s on a busy machine); the browser test reads the same build
def test_the_site_builds_strictly(built_site):
    """Catches a broken internal link, an API page naming a module that no longer exists, or a
    config reference the hook cannot generate."""
    code, stderr, site = built_site
    assert code == 0, stderr[-4000:]
    reference = (site / "guide" / "config-reference" / "index.html").read_text()
    assert "runtime.connect_timeout" in reference and "privacy.epsilon" in reference


def test_every_experiment_preset_has_a_command_on_a_papers_page():
    """Catches a preset added to the config tree without a documented command."""
    hook = load_script(DOCS / "hooks" / "config_reference.py")
    presets = {p.stem for p in (hook.config_dir(REPO) / "experiment").glob("*.yaml")}
    papers = "\n".join(p.read_text() for p in (DOCS / "papers").glob("*.md"))
    documented = set(re.findall(r"python -m fedray (?:-m )?experiment=(\w+)", papers))
    assert presets - documented == set()
    assert documented - presets == set()


def test_every_preset_has_its_expected_output_on_a_papers_page():
    """Catches a preset without a row in experiments/presets/results.csv (the papers pages' expected
    output), a row that failed, or a papers page that names a preset the config tree lacks."""
    import csv

    hook = load_script(DOCS / "hooks" / "config_reference.py")
    presets = {p.stem for p in (hook.config_dir(REPO) / "experiment").glob("*.yaml")}
    marked = set()
    for page in (REPO / "docs" / "papers").glob("*.md"):
        for names in re.findall(r"<!-- expected-output: ([a-z0-9_, ]+) -->", page.read_text()):
            marked |= {n.strip() for n in names.split(",") if n.strip()}
    assert marked == presets
    with open(REPO / "experiments" / "presets" / "results.csv") as f:
        rows = {r["preset"]: r for r in csv.DictReader(f)}
    assert set(rows) == presets and all(r["exit"] == "0" for r in rows.values()), {
        k: r["metrics"] for k, r in rows.items() if r["exit"] != "0"}


@pytest.mark.slow  # about 3 minutes on 2 cores with a cold accounting cache
@pytest.mark.parametrize("command", COMMANDS)
def test_every_documented_command_plans(command):
    """Catches a page whose command names a key, an option or a value the code no longer accepts
    (each is planned as the command line would plan it, before any Ray start)."""
    from fedray.compose import compose_plan

    compose_plan(overrides(command))


def _numbers(text: str) -> list[str]:
    return re.findall(r"\d+\.\d+", text)


@pytest.mark.slow
def test_the_main_job_prints_the_numbers_the_pages_quote(tmp_path, ray_local, monkeypatch):
    """Catches a change that moves the main job's committed numbers (train loss, test errors,
    eps spent) away from what the README and the getting-started page show. The command joins the
    test run's shared local Ray: the numbers do not depend on where the actors run."""
    quoted = [body for page in (DOCS / "getting-started.md", REPO / "README.md")
              for _, tag, body in blocks(page) if tag == "main-job"]
    assert len(quoted) == 2 and quoted[0] == quoted[1]
    row = next(line for line in quoted[0].splitlines() if line.strip().startswith("0.3"))
    proc = subprocess.run(
        [sys.executable, "-m", "fedray", "experiment=isrl_dp_convex", "progress=false",
         f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/artifacts",
         f"runtime.address={shared_ray_address(ray_local, monkeypatch)}"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    printed = next(line for line in proc.stdout.splitlines() if line.strip().startswith("0.3"))
    assert _numbers(printed) == _numbers(row)


class Browser:
    """One headless Chromium for many pages, driven through the DevTools protocol over the pipe
    Chromium offers for it (``--remote-debugging-pipe``: JSON messages ending in a NUL byte, read
    on its fd 3, written on its fd 4), so no websocket library is needed. ``dom(url)`` is what
    ``chromium --dump-dom url`` prints (the document once its load event fired), without a
    browser start per page. A fresh profile; no background network, which this machine's closed
    network would refuse."""

    def __init__(self, timeout: float = 120.0):
        import tempfile

        self.timeout, self.ids, self.buffer, self.events = timeout, 0, b"", []
        self.profile = tempfile.TemporaryDirectory()
        commands_in, commands_out = os.pipe()            # we write, Chromium reads on its fd 3
        replies_in, replies_out = os.pipe()              # Chromium writes on its fd 4, we read

        def pipes_at_3_and_4():          # by way of fds past 4, so that neither end overwrites the other
            import fcntl

            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (commands_in, replies_out)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)
        self.process = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-quic",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", f"--user-data-dir={self.profile.name}", "--window-size=1280,900",
             "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4), preexec_fn=pipes_at_3_and_4, start_new_session=True, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(commands_in)
        os.close(replies_out)
        self.writer, self.reader = commands_out, replies_in
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session=self.session)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        """Send one command and return its result (events that arrive first are kept in ``events``)."""
        self.ids += 1
        message = {"id": self.ids, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self.writer, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._next()
            if reply.get("id") == self.ids:
                assert "error" not in reply, (method, reply["error"])
                return reply["result"]
            self.events.append(reply)

    def _next(self) -> dict:
        import select
        import time

        deadline = time.monotonic() + self.timeout
        while b"\0" not in self.buffer:
            ready, _, _ = select.select([self.reader], [], [], max(deadline - time.monotonic(), 0))
            chunk = os.read(self.reader, 1 << 20) if ready else b""
            assert chunk, "Chromium stopped answering" if ready else f"Chromium gave no answer in {self.timeout} s"
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def dom(self, url: str) -> str:
        """The page's DOM once its load event fired, as ``--dump-dom`` prints it."""
        self.events.clear()
        self.call("Page.navigate", session=self.session, url=url)
        while not any(event.get("method") == "Page.loadEventFired" for event in self.events):
            self.events.append(self._next())
        found = self.call("Runtime.evaluate", session=self.session, returnByValue=True,
                          expression="document.documentElement.outerHTML")
        return found["result"]["value"]

    def close(self) -> None:
        """Chromium closed through the protocol (its helper processes end with it), killed with
        its process group if it has not ended within 10 s."""
        import signal

        try:
            self.call("Browser.close")
            self.process.wait(timeout=10)
        except (AssertionError, OSError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for fd in (self.writer, self.reader):
            os.close(fd)
        self.profile.cleanup()


def _serve(folder: Path):
    """The built site over HTTP on a free local port, in a thread; returns (server, base URL)."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.slow
def test_every_page_renders_in_a_browser_and_every_internal_link_resolves(built_site):
    """Catches a page that renders empty or as an error in a real browser, a link the browser
    would follow to nothing, and API pages that lost the public names they document."""
    from urllib.parse import urldefrag, urljoin, urlparse

    if shutil.which("chromium") is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium); .ci/run installs it when it can")
    code, stderr, site = built_site
    assert code == 0, stderr[-4000:]
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("index.html"))
    server, base = _serve(site)
    browser = Browser()
    try:
        doms = {page: browser.dom(f"{base}/{page}") for page in pages}
    finally:
        browser.close()
        server.shutdown()
    broken = []
    for page, dom in doms.items():
        assert "<h1" in dom and "404 - Not found" not in dom, page
        for href in re.findall(r'<a [^>]*href="([^"]+)"', dom):
            target = urlparse(urljoin(f"{base}/{page}", urldefrag(href)[0]))
            if target.netloc != urlparse(base).netloc:
                continue
            path = site / target.path.lstrip("/")
            if not (path.is_file() or (path / "index.html").is_file()):
                broken.append(f"{page} -> {href}")
    assert broken == []
    text = {page: re.sub(r"<[^>]+>", " ", dom) for page, dom in doms.items()}
    assert "RoundProtocol" in text["reference/core/index.html"]
    assert "Ledger" in text["reference/privacy/index.html"]
    assert "make_plan" in text["reference/runtime/index.html"]


PYTHON_BLOCKS = [(page.relative_to(REPO).as_posix(), i, body) for page in PAGES
                 for i, (info, tag, body) in enumerate(blocks(page)) if info == "python" and tag != "skip"]


@pytest.mark.slow
@pytest.mark.parametrize("page, index, code", PYTHON_BLOCKS, ids=[f"{p}#{i}" for p, i, _ in PYTHON_BLOCKS])
def test_every_python_block_runs(page, index, code, tmp_path):
    """Catches a page whose Python example no longer runs (in a fresh directory, as a reader's)."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{page} block {index}:\n{proc.stderr[-3000:]}"
