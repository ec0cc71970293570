"""report.html: the run in one self-contained file to send to a colleague: its command and settings, final figures,
the pictures (curves, confusion matrix or per-class AP, calibration, top losses) embedded as data, the per-class table
and the classes most confused. No script, no stylesheet or font fetched: it opens offline, from anywhere."""

import base64
import html
import numbers

from utils.core.io import write_text_atomic

STYLE = """body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:2em}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left}
pre{background:#f6f6f6;padding:1em;overflow-x:auto}img{max-width:100%;border:1px solid #eee}
.wide{overflow-x:auto}"""


def figure_rows(results):
    """The scalar figures of results.json worth a table: validation's, the test's, and the run's own."""
    keys = [key for key, value in results.items() if isinstance(value, numbers.Real) and not isinstance(value, bool)
            and key.startswith(("val_", "video_", "clip_", "macro_", "test_"))]
    keys += [key for key in ("epochs_completed", "global_step", "world_size", "train_samples", "train_time_s")
             if key in results]
    return [(key, results[key]) for key in keys]


def embedded(path):
    """An <img> holding the PNG at `path` as a data URL."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(path.name)}">'


def render(results, settings, pictures, per_class, confused):
    """The page's HTML: `settings` config.yaml's text, `pictures` the PNG paths to embed, `per_class` and `confused`
    the console's tables."""
    title = f"{results.get('model', '')} on {results.get('dataset', '')}"
    rows = "".join(f"<tr><th>{html.escape(key)}</th><td>{value:.6g}</td></tr>" if isinstance(value, float) else
                   f"<tr><th>{html.escape(key)}</th><td>{value}</td></tr>" for key, value in figure_rows(results))
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>",
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<h2>Command</h2><pre>{html.escape(results.get('command', '(not recorded)'))}</pre>",
             f"<h2>Final figures</h2><table>{rows}</table>"]
    for path in pictures:
        parts.append(f"<h2>{html.escape(path.stem.replace('_', ' '))}</h2>{embedded(path)}")
    parts.append(f"<h2>Per class</h2><pre>{html.escape(per_class)}</pre>")
    if confused:
        parts.append(f"<h2>Most confused</h2><pre>{html.escape(chr(10).join(confused))}</pre>")
    parts.append(f"<h2>Settings (config.yaml)</h2><pre>{html.escape(settings)}</pre></body></html>")
    return "\n".join(parts)


def write_html(out, results, pictures, per_class, confused):
    """<out>/report.html (see the module's docstring); returns its path."""
    config = out / "config.yaml"
    settings = config.read_text() if config.is_file() else ""
    write_text_atomic(out / "report.html", render(results, settings, pictures, per_class, confused))
    return out / "report.html"
