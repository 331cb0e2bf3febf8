"""The documentation: the mkdocs site builds in strict mode (broken links and anchors fail it, shown on a copy with
a broken link), README.md's links resolve, and every results table on a page is what docs/tables.py renders from
results/*.json (a hand-edited table in a copy fails the check, and the rewrite restores it)."""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def tables():
    spec = importlib.util.spec_from_file_location("docs_tables", REPO / "docs" / "tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=root,
                          capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1", "PATH": ""})


def _copy_site_sources(dest: Path) -> Path:
    shutil.copy(REPO / "mkdocs.yml", dest / "mkdocs.yml")
    shutil.copytree(REPO / "docs", dest / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_site_builds_strict(tmp_path):
    r = _build(REPO, tmp_path / "site")
    assert r.returncode == 0, r.stdout + r.stderr
    pages = {p.parent.name for p in (tmp_path / "site").glob("*/index.html")}
    assert {"quickstart", "training", "motions", "evaluation", "deploy", "robot-computer", "third-party",
            "calibration", "safety", "experiments", "architecture", "development"} <= pages


@pytest.mark.parametrize("broken, words", [("[gone](nowhere.md)", "nowhere.md"),
                                           ("[anchor](training.md#no-such-heading)", "no-such-heading")])
def test_strict_build_fails_on_a_broken_link(tmp_path, broken, words):
    root = _copy_site_sources(tmp_path)
    page = root / "docs" / "safety.md"
    page.write_text(page.read_text() + f"\nSee {broken}.\n")
    r = _build(root, tmp_path / "site")
    assert r.returncode != 0 and words in r.stdout + r.stderr, r.stdout + r.stderr


def _headings(md: Path) -> set[str]:
    return {slugify(m.group(1).strip(), "-") for m in re.finditer(r"^#+ (.+)$", md.read_text(), re.M)}


def broken_links(page: Path) -> list[str]:
    """Relative links of a markdown page whose file (or heading anchor, in a markdown file) does not exist."""
    out = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+://|mailto:|#", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve()
        if not dest.exists():
            out.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _headings(dest):
            out.append(f"{target}: no heading #{anchor} in {path}")
    return out


def test_readme_links_resolve_and_the_checker_catches_broken_ones(tmp_path):
    readme = REPO / "README.md"
    assert broken_links(readme) == []
    assert len(LINK.findall(readme.read_text())) >= 12  # one per page
    bad = tmp_path / "README.md"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "motions.md").write_text("# Motions\n\n## Committed motions\n")
    bad.write_text("[a](docs/motions.md#committed-motions) [b](docs/motions.md#nope) [c](docs/gone.md)\n")
    assert broken_links(bad) == ["docs/motions.md#nope: no heading #nope in docs/motions.md", "docs/gone.md: no such file"]


def test_links_from_the_pages_into_the_repository_resolve():
    """mkdocs checks the links between pages; a page's links out of docs/ (the policy cards) are checked here."""
    outside = [(p.name, t) for p in (REPO / "docs").glob("*.md") for t in LINK.findall(p.read_text()) if t.startswith("../")]
    assert outside, "the motions page links the policy cards"
    assert [(p.name, b) for p in (REPO / "docs").glob("*.md") for b in broken_links(p) if b.startswith("../")] == []


def test_readme_is_a_short_product_page():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "    make deploy ROBOT=sim MOTION=jump" in text and "    make test   " in text  # the two set-up commands


def test_every_page_table_is_what_the_script_renders(tables):
    assert tables.differences(REPO) == []
    names = {m.group("name") for p in tables.pages(REPO) for m in tables.BLOCK.finditer(p.read_text())}
    assert names == set(tables.TABLES), set(tables.TABLES) ^ names  # every registered table is on a page


def test_no_rendered_table_keeps_a_format_placeholder(tables):
    """A header written as a plain string with {NAME:g} in it would reach the page unsubstituted."""
    for name in tables.TABLES:
        text = tables.render(name)
        assert not re.search(r"\{[A-Za-z_][A-Za-z_0-9]*(:[^}]*)?\}", text), (name, text.splitlines()[0])


def _copy_pages(dest: Path) -> Path:
    shutil.copy(REPO / "README.md", dest / "README.md")
    (dest / "docs").mkdir()
    for p in (REPO / "docs").glob("*.md"):
        shutil.copy(p, dest / "docs" / p.name)
    shutil.copytree(REPO / "results", dest / "results")
    return dest


def test_a_hand_edited_table_fails_the_check_and_the_rewrite_restores_it(tmp_path, tables, capsys):
    root = _copy_pages(tmp_path)
    page = root / "docs" / "motions.md"
    original = page.read_text()
    assert "| jump | 0/20 |" in original
    page.write_text(original.replace("| jump | 0/20 |", "| jump | 1/20 |", 1))  # a figure copied by hand, wrong
    assert tables.main(["--check", "--root", str(root)]) == 1
    err = capsys.readouterr().err
    assert "docs/motions.md: table 'motions' differs" in err and "make docs-tables" in err
    assert "README.md" not in err  # the other pages still agree
    assert tables.main(["--root", str(root)]) == 0
    assert page.read_text() == original
    assert tables.main(["--check", "--root", str(root)]) == 0


def test_a_changed_results_file_changes_the_table(tmp_path, tables):
    root = _copy_pages(tmp_path)
    res = root / "results" / "motions.json"
    text = res.read_text()
    falls = re.search(r'"falls": (\d+)', text)  # the first motion's falls, one more
    res.write_text(text.replace(falls.group(0), f'"falls": {int(falls.group(1)) + 1}', 1))
    diff = tables.differences(root)
    assert any("table 'motions' differs" in d for d in diff) and any("table 'motions_headline'" in d for d in diff)


def test_unknown_tables_and_unclosed_markers_are_refused(tmp_path, tables):
    root = tmp_path
    (root / "docs").mkdir()
    (root / "README.md").write_text("<!-- BEGIN TABLE nosuch -->\n<!-- END TABLE nosuch -->\n")
    (root / "docs" / "a.md").write_text("<!-- BEGIN TABLE motions -->\n| x |\n")
    diff = tables.differences(root)
    assert any("unknown table 'nosuch'" in d and "add it to TABLES" in d for d in diff), diff
    assert any(d.startswith("docs/a.md") and "without a matching END" in d for d in diff), diff
