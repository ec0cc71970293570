"""The project's licence and its dependencies': Apache-2.0 here (LICENSE), and nothing that `pip install -r
requirements-dev.txt` pulls in (directly or through another package) under a strong copyleft (GPL, AGPL) or a
non-commercial licence; each requirement's licence listed in docs/licences.md as its package states it."""

import importlib.metadata as metadata
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
REFUSED = re.compile(r"affero|agpl|(?<!l)gpl|(?<!lesser )general public license|non-?commercial|\bcc-by-nc", re.I)
# Releases of a requirement that were under a refused licence: its range must leave them out.
REFUSED_RELEASES = {"cleanlab": ["2.7.1", "2.0.0"]}  # AGPL-3.0 until 2.8.0 (2.8.0's wheel: Apache-2.0)
# Distributions that state no licence in their metadata or files, each read by hand.
READ_BY_HAND = {"cuda-toolkit": "NVIDIA's CUDA EULA: a meta-package of torch's CUDA wheels, as nvidia-* are"}
DOC_FAMILIES = {"Apache-2.0": "apache", "MIT": "mit", "BSD-2-Clause": "bsd", "BSD-3-Clause": "bsd",
                "PSF": "python software foundation", "MPL-2.0": "mpl"}


def requirement_lines(path):
    """The Requirements of one requirements file, following its -r lines."""
    found = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r"):
            found += requirement_lines(path.parent / line.split()[1])
        elif line:
            found.append(Requirement(line))
    return found


def installed_closure(requirements):
    """{name: Distribution} of the requirements and of what they require, as installed here (markers this platform
    does not meet left out)."""
    found, todo = {}, [r.name for r in requirements]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        try:
            found[name] = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for line in found[name].requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return found


def stated_licence(dist):
    """What a distribution says its licence is: its SPDX expression, else its licence classifiers, else its
    License field's first line, else the head of its licence file; '' if none."""
    meta = dist.metadata
    if meta.get("License-Expression"):
        return meta["License-Expression"]
    classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    if classifiers:
        return "; ".join(classifiers)
    first = (meta.get("License") or "").strip().split("\n", 1)[0].strip("= ")
    if first and first.upper() != "UNKNOWN":
        return first
    for file in dist.files or []:
        if re.search(r"LICEN[CS]E|COPYING", file.name, re.I) and "third_party" not in str(file):
            return " ".join(file.read_text()[:400].split())
    return ""


def doc_rows():
    rows = re.findall(r"^\| `([\w.-]+)` \| ([^|]+) \|", (ROOT / "docs" / "licences.md").read_text(), re.M)
    return {canonicalize_name(name): licence.strip() for name, licence in rows}


def test_the_project_is_apache_2_and_says_so():
    assert (ROOT / "LICENSE").read_text().split()[:3] == ["Apache", "License", "Version"]
    assert "Version 2.0, January 2004" in (ROOT / "LICENSE").read_text()
    assert re.search(r"^## Licence\n\nApache-2\.0 \(\[LICENSE\]\(LICENSE\)\)", (ROOT / "README.md").read_text(), re.M)


def test_no_dependency_installed_by_the_requirements_is_copyleft_or_non_commercial():
    closure = installed_closure(requirement_lines(ROOT / "requirements-dev.txt"))
    assert {"torch", "accelerate", "cleanlab", "optuna", "timm"} <= closure.keys()
    licences = {name: READ_BY_HAND.get(name) or stated_licence(dist) for name, dist in closure.items()}
    assert [name for name, licence in licences.items() if not licence] == [], "no licence stated: read it, say it"
    assert {name: licence for name, licence in licences.items() if REFUSED.search(licence)} == {}


@pytest.mark.parametrize("name, releases", REFUSED_RELEASES.items())
def test_a_requirements_range_leaves_out_its_copyleft_releases(name, releases):
    (requirement,) = [r for r in requirement_lines(ROOT / "requirements.txt") if r.name == name]
    assert [release for release in releases if requirement.specifier.contains(release)] == []


def test_docs_list_each_requirement_with_the_licence_its_package_states():
    rows = doc_rows()
    for requirement in requirement_lines(ROOT / "requirements-dev.txt"):
        name = canonicalize_name(requirement.name)
        assert name in rows, f"{name}: not in docs/licences.md"
        family = DOC_FAMILIES[rows[name]]
        assert re.search(rf"\b{family}", stated_licence(metadata.distribution(name)), re.I), (name, rows[name])


@pytest.mark.parametrize("licence, refused", [("AGPL-3.0", True), ("GNU Affero General Public License v3", True),
                                              ("GPL-2.0-or-later", True),
                                              ("GNU General Public License v3 (GPLv3)", True),
                                              ("CC-BY-NC-4.0", True), ("Non-Commercial Use Only", True),
                                              ("LGPL-2.1-or-later", False),
                                              ("GNU Lesser General Public License v3 (LGPLv3)", False),
                                              ("MPL-2.0 AND MIT", False), ("BSD-3-Clause", False)])
def test_what_the_check_refuses(licence, refused):
    assert bool(REFUSED.search(licence)) is refused
