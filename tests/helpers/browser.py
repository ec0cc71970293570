"""A headless browser for the tests of a page: Debian's chromium, installed with apt-get where it is missing, and what a
page measures of itself once loaded."""

import os
import re
import shutil
import subprocess

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
# How the browser is started: in a session of its own, reading nothing from ours (a pytest-xdist worker's process
# group holds the controller and the other workers, and nothing the browser does to its group may reach them).
ISOLATED = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE,
            "stdin": subprocess.DEVNULL, "start_new_session": True, "text": True, "timeout": 120}


def chromium():
    """A headless browser: Debian's chromium, installed with apt-get where it is missing (as root); the test is
    skipped, saying why, where neither works."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if not shutil.which("apt-get") or os.geteuid() != 0:
        pytest.skip("no chromium, and apt-get cannot install it here (not root, or not Debian): "
                    "the page is not rendered")
    install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
    for command in (install, ["apt-get", "update"], install):
        try:
            subprocess.run(command, capture_output=True, timeout=900,
                           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        except subprocess.TimeoutExpired:
            break
        if shutil.which("chromium"):
            return shutil.which("chromium")
    pytest.skip("Debian's chromium could not be installed with apt-get (no package index reachable?): the page is not "
                "rendered")


def measured(browser, page, script, tmp_path, width=1200):
    """The title `script` (JavaScript run once the page has loaded) gives `page` (its HTML) in `browser`, at a window
    `width` px wide."""
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", f"<script>addEventListener('load', () => {{{script}}})</script></body>"))
    dom = subprocess.run([browser, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},900",
                          "--dump-dom", "--virtual-time-budget=10000", probe.as_uri()], **ISOLATED).stdout
    found = re.search(r"<title>(.*?)</title>", dom)
    return found.group(1) if found else dom[:300]
