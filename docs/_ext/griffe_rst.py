"""Griffe extension: the reST parts of Google-style docstrings, as Markdown.

The package's docstrings are Google style with reST math, cross-reference roles
and a few reST tables. Before mkdocstrings parses them, this extension rewrites

* ``:math:`x``` as ``\\(x\\)`` (inline math, typeset by MathJax through
  pymdownx.arithmatex), and a ``.. math::`` directive with its indented body as
  a ``$$ ... $$`` block;
* ``:func:``, ``:class:``, ``:meth:``, ``:attr:``, ``:mod:``, ``:data:``,
  ``:exc:`` roles as optional cross-references: a link where the target has an
  API entry, plain code otherwise (a leading ``~`` keeps only the last name, as
  in Sphinx, and ``title <target>`` shows the title); relative and re-exported
  names are resolved to where they are defined;
* reST simple tables (columns ruled by ``===``) as Markdown tables;
* doctest blocks (``>>>`` lines and their output) as fenced ``pycon`` code;
* the continuation blocks of bullet items, indented by two spaces in reST, by
  four, as Python-Markdown needs, so that a formula stays in its item.

An attribute with no docstring takes the ``#:`` comment lines just above it, as
Sphinx does. Nothing else changes: double-backtick literals are already
Markdown code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(func|class|meth|attr|mod|data|exc|obj):`([^`]+)`")
_MATH_ROLE = re.compile(r":math:`([^`]+)`")
_DIRECTIVE = re.compile(r"^(?P<indent>[ ]*)\.\. math::[ ]*(?P<rest>.*)$")
_BULLET = re.compile(r"^(?P<indent>[ ]*)[*-][ ]+\S")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _list_items(text: str) -> str:
    """Indent what follows a blank line inside a reST bullet item by two more."""
    out: list[str] = []
    items: list[int] = []  # content indents of the open items, innermost last
    blank = False
    split = False  # the last item holds a block after a blank line
    for line in text.split("\n"):
        if not line.strip():
            out.append(line)
            blank = True
            continue
        width = _indent(line)
        bullet = _BULLET.match(line)
        while items and width < items[-1] and (blank or bullet):
            items.pop()
        if bullet and split and not blank:
            out.append("")  # else Markdown reads the bullet as part of that block
        if bullet:
            split = False
        elif blank and items:
            split = True
        shift = 2 * len(items) if blank or any(width >= c for c in items) else 0
        out.append(" " * shift + line if shift else line)
        if bullet:
            items.append(width + 2)
        blank = False
    return "\n".join(out)


def _math_blocks(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _DIRECTIVE.match(lines[i])
        if match is None:
            out.append(lines[i])
            i += 1
            continue
        indent = match["indent"]
        body = [match["rest"]] if match["rest"].strip() else []
        i += 1
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(indent)
        ):
            body.append(lines[i].strip())
            i += 1
        while body and not body[-1]:
            body.pop()
        # Blank lines inside the block would split it: keep the formula only.
        body = [line for line in body if line]
        out.append(f"{indent}$$")
        out.extend(f"{indent}{line}" for line in body)
        out.append(f"{indent}$$")
        if i < len(lines):
            out.append("")
    return "\n".join(out)


_RULE = re.compile(r"^[ ]*=+(?:[ ]+=+)+[ ]*$")


def _cells(line: str, spans: list[tuple[int, int]]) -> list[str]:
    """The cells of one table line, split at the columns' starts."""
    bounds = [start for start, _ in spans[1:]] + [len(line)]
    return [line[a:b].strip() for (a, _), b in zip(spans, bounds, strict=True)]


def _simple_tables(text: str) -> str:
    """Rewrite each reST simple table: rule, [header, rule,] rows, rule.

    A row whose first cell is empty continues the row above it. A table with no
    header gets an empty one (Markdown tables need a header row).
    """
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        rule = lines[i]
        ends = [j for j in range(i + 1, len(lines)) if lines[j] == rule]
        if not _RULE.match(rule) or not ends:
            out.append(rule)
            i += 1
            continue
        spans = [m.span() for m in re.finditer(r"=+", rule)]
        indent = rule[: len(rule) - len(rule.lstrip())]
        if ends[0] == i + 2 and len(ends) > 1:  # a header row between two rules
            header = _cells(lines[i + 1], spans)
            body, i = lines[i + 3 : ends[1]], ends[1] + 1
        else:
            header, body, i = [""] * len(spans), lines[i + 1 : ends[0]], ends[0] + 1
        rows: list[list[str]] = []
        for line in filter(str.strip, body):
            values = _cells(line, spans)
            if rows and not values[0]:
                pairs = zip(rows[-1], values, strict=True)
                rows[-1] = [f"{a} {b}".strip() for a, b in pairs]
            else:
                rows.append(values)
        for values in [header, ["---"] * len(spans), *rows]:
            out.append(indent + "| " + " | ".join(values) + " |")
    return "\n".join(out)


def _doctests(text: str) -> str:
    """Fence each run of doctest lines (from ``>>>`` to the next blank line)."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].lstrip(" ")
        if not stripped.startswith(">>>"):
            out.append(lines[i])
            i += 1
            continue
        indent = lines[i][: len(lines[i]) - len(stripped)]
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip():
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)


def _identifier(obj: griffe.Object, target: str) -> str:
    """The path of the documented object ``target`` names, as seen from ``obj``.

    A re-exported name (``ax_chaining.ax.chaining_generation_strategy``) becomes
    the path where it is defined, which is where its API entry is.
    """
    name = target.lstrip(".")
    if not name.startswith("ax_chaining"):
        head, _, tail = name.partition(".")
        try:
            resolved = obj.resolve(head)
        except Exception:  # not resolvable in scope: keep the name as written
            return name
        name = f"{resolved}.{tail}" if tail else resolved
    try:
        found = obj.modules_collection[name]
        return found.final_target.path if found.is_alias else found.path
    except Exception:  # outside the package, or not found: as written
        return name


def _roles(obj: griffe.Object, text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        target = match[2].strip()
        # reST's explicit title form, :meth:`title <target>`.
        explicit = re.fullmatch(r"(?P<title>.+?)\s*<(?P<target>[^<>]+)>", target)
        if explicit:
            target = explicit["target"].strip().lstrip("~")
            title = explicit["title"]
        else:
            short = target.startswith("~")
            target = target.lstrip("~")
            title = target.rsplit(".", 1)[-1] if short else target
        identifier = _identifier(obj, target)
        code = f"<code>{title}</code>"
        return f'<autoref identifier="{identifier}" optional>{code}</autoref>'

    return _ROLE.sub(replace, text)


def _doc_comment(obj: griffe.Object) -> str | None:
    """The ``#:`` comment lines right above an attribute, without the markers."""
    if not obj.is_attribute or obj.lineno is None or obj.filepath is None:
        return None
    try:
        lines = obj.lines_collection[obj.filepath]
    except KeyError:
        return None
    found: list[str] = []
    index = obj.lineno - 2  # the line above, 0-based
    while index >= 0 and lines[index].lstrip().startswith("#:"):
        found.append(lines[index].lstrip()[2:].strip())
        index -= 1
    return "\n".join(reversed(found)) or None


def rst_to_markdown(obj: griffe.Object, text: str) -> str:
    """Rewrite the reST math and roles of one docstring as Markdown."""
    text = _list_items(_doctests(_simple_tables(_math_blocks(text))))
    text = _MATH_ROLE.sub(lambda m: f"\\({m[1]}\\)", text)
    return _roles(obj, text)


class RstToMarkdown(griffe.Extension):
    """Convert every docstring of a loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        seen: set[int] = set()
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if obj.docstring is None and (comment := _doc_comment(obj)):
                obj.docstring = griffe.Docstring(comment, parent=obj)
            if obj.docstring is not None:
                obj.docstring.value = rst_to_markdown(obj, obj.docstring.value)
            stack.extend(m for m in obj.members.values() if not m.is_alias)
