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


#: API pages -> the module whose every public name the page must show
API_PAGES = {"api/jln.md": "jln", "api/linen.md": "jln.linen", "api/nnx.md": "jln.nnx"}


def on_post_page(output, page, config):
    """Fail the build when an API page leaves out a public name of its module (``__all__``):
    each linen and NNX class, each function, with its own heading."""
    import importlib

    from mkdocs.exceptions import PluginError

    module = API_PAGES.get(page.file.src_uri)
    if module is None:
        return output
    names = importlib.import_module(module).__all__
    missing = [n for n in names if f'id="{module}.{n}"' not in output]
    if missing:
        raise PluginError(f"{page.file.src_uri} does not show {module}'s public {missing}: list them on the page.")
    return output
