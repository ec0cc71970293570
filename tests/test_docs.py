"""Docs that cannot rot: README.md and docs/*.md say only what the code accepts, and hold together.

What this file promises, in a few seconds, without starting a process or training:
- every command in a shell block of README.md or docs/*.md that runs train_classification.py (by
  python, `accelerate launch [launcher flags]`, torchrun, srun, or the SLURM script, which passes its
  arguments on and adds `--resume latest`) is accepted by the training parser: no unknown or misspelt
  flag, no bad value; a recipe it names in configs/ loads (known keys, right types); and where every
  value is real (no placeholder, no timm/ or hf/ model), the script's own parse_args accepts it, its
  checks across options included;
- every `predict.py` command is accepted by predict.py's own parser and its checks, every `export.py` one by
  export.py's, every `audit.py` one by audit.py's (and its options after `--` by the training parser);
- every long flag of the training parser has a row (default, meaning) in docs/configuration.md's
  tables, and every flag those rows name is one the parser has;
- docs/resuming.md names every option the parser marks as one a resume must keep;
- every relative link resolves to a file, and a `#anchor` into a .md file to one of its headings
  (GitHub's slugs);
- every docs page opens with its commands (title, one line of purpose, a bash block), and the README
  stays short and links to every page.

Commands are read as a shell would split them: `\\` continuations joined, comments dropped, `<a
placeholder>` and `$VARS` taken as values, `...` (the docs' "and so on") ignored.
"""

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

import audit  # audit.get_args: audit.py's parser and its checks
import export  # export.get_args: export.py's parser and its checks
import predict  # predict.get_args: predict.py's parser and its checks
from utils.config.options import get_args_parser, parse_args  # the training options
from utils.config.recipes import load_recipe

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"", "bash", "sh", "shell", "console"}  # fence info strings whose lines are commands
RUNNERS = {"python", "python3", "accelerate", "torchrun", "srun", "sbatch"}
TRAIN_SCRIPTS = {"train_classification.py", "slurm_multi_node.sbatch"}  # the sbatch script passes $* on
README_MAX_LINES = 220  # the issue asked for ~200: what does not fit has a page in docs/


def fenced_blocks(text):
    """(info string, first line number, lines) of each fenced code block."""
    blocks, fence, start, info, body = [], None, 0, "", []
    for number, line in enumerate(text.splitlines(), 1):
        opening = re.match(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)", line)
        if fence is None and opening:
            fence, info, start, body = opening.group(1), opening.group(2).lower(), number + 1, []
        elif fence is not None and line.strip().startswith(fence) and not line.strip()[len(fence):].strip():
            blocks.append((info, start, body))
            fence = None
        elif fence is not None:
            body.append(line)
    return blocks


def without_code(text, inline=True):
    """The text with fenced blocks blanked (and inline code removed unless `inline` is False): a link
    or a heading in code is not one."""
    lines, fence = [], None
    for line in text.splitlines():
        opening = re.match(r"^\s*(`{3,}|~{3,})", line)
        if opening and (fence is None or line.strip().startswith(fence)):
            fence = opening.group(1) if fence is None else None
            lines.append("")
        else:
            lines.append("" if fence else line)
    text = "\n".join(lines)
    return re.sub(r"`[^`]*`", "", text) if inline else text  # a code span may run over a line break


def command_lines(lines, start):
    """(line number, command) per logical line: continuations joined."""
    commands, pending, first = [], "", None
    for number, line in enumerate(lines, start):
        first = number if not pending else first
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        commands.append((first, pending + line))
        pending = ""
    if pending:
        commands.append((first, pending))
    return commands


OTHER_SCRIPTS = {"predict.py", "export.py", "audit.py"}  # read by their own parsers


def script_calls():
    """(where, script name, its argv) for every call of a project script in the docs' shell blocks."""
    calls = []
    for page in PAGES:
        for info, start, lines in fenced_blocks(page.read_text()):
            if info not in SHELL:
                continue
            for number, line in command_lines(lines, start):
                if not any(script in line for script in TRAIN_SCRIPTS | OTHER_SCRIPTS):
                    continue  # other commands, or prose in an untagged block: not split
                where = f"{page.relative_to(ROOT)}:{number}"
                # A placeholder is one value, spaces and all: <hub name> -> <hub_name>.
                line = re.sub(r"<[^<>\n]*>", lambda m: m.group(0).replace(" ", "_"), line)
                try:
                    words = shlex.split(line, comments=True)
                except ValueError as e:
                    pytest.fail(f"{where}: cannot split {line.strip()!r} as a shell would: {e}")
                segment = []
                for word in words + [";"]:
                    if word not in ("&&", "||", ";", "|"):
                        segment.append(word)
                        continue
                    call = _script_call(segment)
                    if call:
                        calls.append((where, *call))
                    segment = []
    return calls


def _script_call(words):
    """(script, argv) if these words run one of our scripts through a runner, else None."""
    for i, word in enumerate(words):
        name = Path(word).name
        if name in TRAIN_SCRIPTS | OTHER_SCRIPTS and any(Path(w).name in RUNNERS for w in words[:i]):
            argv = [w for w in words[i + 1:] if w != "..."]
            if name == "slurm_multi_node.sbatch":
                argv += ["--resume", "latest"]  # what the script adds to every node's command
            return ("train_classification.py" if name in TRAIN_SCRIPTS else name), argv
    return None


def training_problem(argv):
    """Why the training parser refuses `argv` (None if it accepts it)."""
    parser = get_args_parser()
    long_flags = {s for a in parser._actions for s in a.option_strings}
    argv = [w for w in argv if w not in ("--help", "-h")]  # valid, and it would exit the parse
    for word in argv:  # in full: argparse would also take an abbreviation, which the docs must not use
        flag = word.split("=", 1)[0]
        if flag.startswith("--") and flag not in long_flags:
            return f"{flag} is not an option of the training parser"
    for i, word in enumerate(argv):
        recipe = word.split("=", 1)[1] if word.startswith("--config=") else \
            argv[i + 1] if word == "--config" and i + 1 < len(argv) else None
        if recipe is None or "<" in recipe or recipe.startswith("runs/"):  # a placeholder, or a run's own
            continue
        if not (ROOT / recipe).is_file():
            return f"--config {recipe}: no such file"
        try:
            parser.set_defaults(**load_recipe(ROOT / recipe, parser))
        except ValueError as e:
            return f"--config {recipe}: {e}"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            _, unknown = parser.parse_known_args(argv)
        except SystemExit:
            return err.getvalue().strip()
    if unknown:
        return f"unknown arguments {unknown}"
    if concrete(argv):  # then the script's own parse, checks across options included, must accept it too
        with contextlib.redirect_stderr(err):
            try:
                parse_args(argv)
            except SystemExit:
                return err.getvalue().strip()
    return None


def concrete(argv):
    """Whether every value is real: no placeholder or variable, no model that only its library can check
    (timm/ and hf/ names need that library, a Hub cache or a folder)."""
    return not any("<" in w or "$" in w or w.startswith(("timm/", "hf/")) for w in argv)


def predict_problem(argv, script=predict):
    """Why predict.py's (or export.py's) parser refuses `argv` (None if it accepts it)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            script.get_args(argv)
        except SystemExit as e:
            return (err.getvalue().strip().splitlines() or [f"exit {e.code}"])[-1]  # argparse's own line
    return None


CALLS = script_calls()


def test_the_docs_hold_the_commands_they_are_read_for():
    # Guards the extraction itself: a fence or a runner it stopped recognising would pass every check below.
    scripts = [script for _, script, _ in CALLS]
    assert scripts.count("train_classification.py") >= 40, scripts
    assert scripts.count("predict.py") >= 5, scripts
    assert scripts.count("export.py") >= 5, scripts
    assert scripts.count("audit.py") >= 5, scripts


@pytest.mark.parametrize("where,argv", [(w, a) for w, s, a in CALLS if s == "train_classification.py"],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_every_training_command_in_the_docs_parses(where, argv):
    problem = training_problem(argv)
    assert problem is None, f"{where}: train_classification.py {shlex.join(argv)}: {problem}"


@pytest.mark.parametrize("where,argv", [(w, a) for w, s, a in CALLS if s == "predict.py"],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_every_predict_command_in_the_docs_parses(where, argv):
    problem = predict_problem(argv)
    assert problem is None, f"{where}: predict.py {shlex.join(argv)}: {problem}"


@pytest.mark.parametrize("where,argv", [(w, a) for w, s, a in CALLS if s == "export.py"],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_every_export_command_in_the_docs_parses(where, argv):
    problem = predict_problem(argv, export)
    assert problem is None, f"{where}: export.py {shlex.join(argv)}: {problem}"


def test_every_training_option_has_its_row_in_the_configuration_page():
    # A row of its own (option | default | meaning), not a mention in passing; and no row for an option
    # the parser no longer has.
    page = (ROOT / "docs" / "configuration.md").read_text()
    flags = {s for a in get_args_parser()._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
    rows = {flag for line in page.splitlines() if line.startswith("| `--")
            for flag in re.findall(r"--[\w-]+", line.split("|")[1])}
    assert not flags - rows, f"docs/configuration.md has no row for {sorted(flags - rows)}"
    assert not rows - flags, f"docs/configuration.md has rows for options the parser lacks: {sorted(rows - flags)}"


def test_the_resuming_page_names_every_option_a_resume_must_keep():
    # The parser declares it per option (resume_key); the page's list must follow it.
    page = (ROOT / "docs" / "resuming.md").read_text()
    section = page[page.index("## What a resume must keep"):].split("\n## ", 1)[0]
    kept = [a for a in get_args_parser()._actions if getattr(a, "resume_key", False)]
    assert len(kept) >= 10, "the parser no longer marks the options a resume must keep (resume_key)"
    unnamed = [a.option_strings[0] for a in kept
               if not any(re.search(rf"`{re.escape(f)}`", section) for f in a.option_strings)]
    assert not unnamed, f"docs/resuming.md, 'What a resume must keep', does not name {unnamed}"


def slug(heading):
    """GitHub's anchor for a heading: lowercase, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page):
    """Every heading anchor of a .md file, duplicates numbered as GitHub numbers them."""
    seen, found = {}, set()
    for line in without_code(page.read_text(), inline=False).splitlines():  # code in a heading is in its slug
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            found.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
    return found


def links(page):
    text = without_code(page.read_text())
    inline = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    reference = re.findall(r"^\s*\[[^\]]+\]:\s*(\S+)", text, flags=re.M)
    return inline + reference


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:: not ours to check
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target} (no heading #{anchor} in {file.relative_to(ROOT)})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


@pytest.mark.parametrize("page", PAGES[1:], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_docs_page_opens_with_its_commands(page):
    lines = [line for line in page.read_text().splitlines() if line.strip()]
    assert lines[0].startswith("# "), f"{page.name}: the first line is not a title"
    assert not lines[1].startswith(("#", "```", "|", "-")), f"{page.name}: no one-line purpose under the title"
    assert lines[2].strip() == "```bash", f"{page.name}: the purpose is not followed by a bash block"


def test_the_readme_is_short_and_links_every_docs_page():
    readme = ROOT / "README.md"
    assert len(readme.read_text().splitlines()) <= README_MAX_LINES, \
        f"README.md has grown past {README_MAX_LINES} lines: move the detail to a page in docs/"
    linked = {(readme.parent / t.partition("#")[0]).resolve() for t in links(readme)}
    unlinked = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not unlinked, f"README.md does not link {unlinked}"


def test_ci_runs_the_readmes_test_command_on_the_current_releases():
    """.ci/run calls the README's test command word for word, with pip told to upgrade to the newest allowed release of
    every requirement and of what they pull in: a machine that kept older packages must fail where a new one would."""
    readme = (ROOT / "README.md").read_text()
    command = "pip install -r requirements-dev.txt && python -m pytest"
    assert command in readme
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert lines[-1] == command
    exports = dict(word.split("=", 1) for line in lines if line.startswith("export ") for word in line.split()[1:])
    assert exports.get("PIP_UPGRADE") == "1" and exports.get("PIP_UPGRADE_STRATEGY") == "eager"


@pytest.mark.parametrize("where,argv", [(w, a) for w, s, a in CALLS if s == "audit.py"],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_every_audit_command_in_the_docs_parses(where, argv):
    """audit.py's own options by its parser, the data's after `--` by the training parser."""
    problem = predict_problem(argv, audit)
    if problem is None and "--" in argv:
        problem = training_problem(argv[argv.index("--") + 1:])
    assert problem is None, f"{where}: audit.py {shlex.join(argv)}: {problem}"
