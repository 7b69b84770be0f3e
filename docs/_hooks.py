"""mkdocs hook: serve the pictures that live beside the code (examples/images, bench/results)
under the same paths in the site, so the pages link them without a second copy in docs/."""

from __future__ import annotations

import pathlib

from mkdocs.structure.files import File

ROOT = pathlib.Path(__file__).resolve().parents[1]
PICTURES = ("examples/images/*.png", "bench/results/*.png", "bench/results/*/*/*.png")


def on_files(files, config):
    for pattern in PICTURES:
        for path in sorted(ROOT.glob(pattern)):
            rel = path.relative_to(ROOT).as_posix()
            files.append(File(rel, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files


def on_page_markdown(markdown, page, config, files):
    """Replace ``<!-- jln-help: parity -->`` with the current ``jln parity --help`` text."""
    import importlib
    import re

    def help_text(match):
        module = importlib.import_module(f"jln.cli.{match.group(1)}")
        return "```text\n" + module._parser().format_help().rstrip() + "\n```"

    return re.sub(r"<!-- jln-help: (\w+) -->", help_text, markdown)
