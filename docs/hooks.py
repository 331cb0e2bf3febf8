"""mkdocs hooks (mkdocs.yml `hooks:`): the committed policies' eval cards (`policies/g1/<motion>/eval/`, written by
`python -m experiments.policy_cards`) are part of the site, where they sit at `policies/...` beside the pages.
The pages link them as `../policies/...`, which is right in the repository; the site's copy of each link drops
the `../`."""
from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

REPO = Path(__file__).resolve().parents[1]
CARDS = "policies/g1/*/eval/*"


def on_files(files, config):
    for p in sorted(REPO.glob(CARDS)):
        files.append(File(p.relative_to(REPO).as_posix(), str(REPO), config["site_dir"], config["use_directory_urls"]))
    return files


def on_page_markdown(markdown, page, config, files):
    return markdown.replace("](../policies/", "](policies/")
