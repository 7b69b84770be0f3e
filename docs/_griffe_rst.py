"""Griffe extension: render jln's reST-flavoured docstrings as Markdown for mkdocstrings.

The docstrings are written for ``help()`` and doctest (``.. math::``, ``:func:`x```, an
``Example:`` section of doctest lines). This rewrites those spellings before griffe parses
the docstring; the source is untouched.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

_ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|obj):`~?([^`]+)`")
_MATH = re.compile(r"^( *)\.\. math::\n\n((?:\1 {2,}.*\n|\n)+)", re.M)
_EXAMPLE = re.compile(r"^( *)Example:$", re.M)


def _math(match: re.Match[str]) -> str:
    indent, body = match.group(1), textwrap.dedent(match.group(2)).strip()
    return f"{indent}$$\n" + textwrap.indent(body, indent) + f"\n{indent}$$\n\n"


def to_markdown(text: str) -> str:
    text = _ROLE.sub(r"`\1`", text)
    text = _MATH.sub(_math, text + "\n")
    return _EXAMPLE.sub(r"\1Examples:", text).rstrip("\n")


class RstToMarkdown(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
