"""Train a tiny run and open its report.html in headless chromium, in a process of its own: what
tests/test_failures.py's browser test checks, away from the pytest worker (whose process, after hundreds of tests,
twice in a row died without a trace while that test ran in it; alone it never did).

    python tests/helpers/report_in_browser.py BROWSER FOLDER   # prints a JSON line: the probe's DOM, chromium's log

FOLDER gets run/ (the run), probe.html, profile/ and report.png (the screenshot)."""

import json
import subprocess
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

from helpers.browser import ISOLATED  # noqa: E402

PROBE = ("<script>addEventListener('load', () => {document.title = 'images ' + document.images.length + ' broken ' + "
         "[...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).length})</script></body>")


def main(browser, folder):
    import train_classification

    folder = Path(folder)
    out = folder / "run"
    train_classification.main(["--dataset", "synthetic", "--image_size", "16", "--synthetic_train_samples", "24",
                               "--synthetic_val_samples", "9", "--batch_size", "8", "--epochs", "2", "--num_workers",
                               "0", "--top_losses", "6", "--output_dir", str(out)])
    page = (out / "report.html").read_text()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={folder / 'profile'}"]
    probe = folder / "probe.html"  # the page, and a check of its images run by the browser once it has loaded
    probe.write_text(page.replace("</body>", PROBE))
    dom = subprocess.run([browser, *flags, "--dump-dom", "--virtual-time-budget=10000", probe.as_uri()],
                         **ISOLATED).stdout
    rendered = subprocess.run([browser, *flags, f"--screenshot={folder / 'report.png'}", "--window-size=1200,2400",
                               "--enable-logging=stderr", "--v=0", (out / "report.html").as_uri()], **ISOLATED)
    print(json.dumps({"dom": dom, "log": rendered.stderr}))


if __name__ == "__main__":
    main(*sys.argv[1:])
