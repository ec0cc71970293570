"""The lines of tests/breaks.tsv whose pytest arguments select no test. A test renamed leaves the `-k` of its breaks
naming nothing, and break-and-test then reports those breaks as survivors ("no test ran") that no test was ever
given the chance to catch. pytest's own matchers decide, as `-k` and `-m` do on the command line.

    python tests/helpers/break_selectors.py      # (from the project's root) each such line, with its number
"""

import shlex
import sys
from pathlib import Path

from _pytest.mark import KeywordMatcher, MarkMatcher
from _pytest.mark.expression import Expression

BREAKS = Path(__file__).resolve().parent.parent / "breaks.tsv"
TAKES_A_VALUE = {"-n", "-p", "--deselect", "--junitxml", "--durations"}


def selector(argv):
    """(the test paths, the -k expression, the -m expression) of one line's pytest arguments."""
    paths, keyword, marks, words = [], None, None, iter(argv)
    for word in words:
        if word == "-k":
            keyword = next(words)
        elif word == "-m":
            marks = next(words)
        elif word in TAKES_A_VALUE:
            next(words)
        elif not word.startswith("-"):
            paths.append(word)
    return paths, keyword, marks


def selects(item, paths, keyword, marks):
    """Whether one line's selector (selector()) runs the collected test `item`."""
    in_paths = not paths or any(item.nodeid == p or item.nodeid.startswith((p.rstrip("/") + "::", p.rstrip("/") + "/"))
                                for p in paths)
    return in_paths and (keyword is None or Expression.compile(keyword).evaluate(KeywordMatcher.from_item(item))) \
        and (marks is None or Expression.compile(marks).evaluate(MarkMatcher.from_markers(item.iter_markers())))


def stale(items, text=None):
    """[(line number, pytest arguments)] of every line of breaks.tsv that selects none of `items`."""
    found = []
    for number, line in enumerate((text or BREAKS.read_text()).splitlines(), 1):
        fields = line.split("\t")
        if len(fields) == 4 and not any(selects(item, *selector(shlex.split(fields[3]))) for item in items):
            found.append((number, fields[3]))
    return found


def main():
    import pytest

    class Collected:
        items = []

        def pytest_collection_finish(self, session):
            self.items.extend(session.items)

    collected = Collected()
    code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0", "tests"],
                       plugins=[collected])
    if code != 0:
        return code
    lines = stale(collected.items)
    print("\n".join(f"STALE {number}\t{args}" for number, args in lines))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
