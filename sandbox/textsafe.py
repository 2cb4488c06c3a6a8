"""Text from a submission, made safe to show: on a terminal, in a CSV cell, in Markdown, as a
file name.

Everything a report shows may come from a student: a file name, the first line of a
statement that failed, an exception message. A terminal obeys escape sequences (one can
clear the screen and print a fake "Total: 100 / 100 points"), a spreadsheet runs a cell
that starts with ``=`` as a formula, and a file name need not be UTF-8 at all (then
printing it raises ``UnicodeEncodeError``), and Markdown passes raw HTML through (a file
named ``<img src=x onerror=...>`` would run in the reader's viewer). These helpers make each
case plain text.
"""
from __future__ import annotations

import os

#: Characters a spreadsheet takes as the start of a formula (OWASP, "CSV injection").
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def printable(text: str) -> str:
    """``text`` with control characters, lone surrogates and other unprintable characters
    escaped as Python does (``\\x1b``, ``\\udcff``); newlines included."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def console(text: str) -> str:
    """Like :func:`printable`, but keeps line breaks: a multi-line report."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


def file_name(path) -> str:
    """A path for display: bytes that are not UTF-8 (which Python keeps as lone surrogates)
    shown as ``\\xe9``, and control characters escaped."""
    raw = os.fsencode(os.fspath(path))
    return printable(raw.decode("utf-8", "backslashreplace"))


def csv_cell(value) -> str:
    """A CSV cell that a spreadsheet shows as text: escaped, and a leading formula
    character neutralised with an apostrophe."""
    text = printable(value)
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


#: Characters that can start Markdown markup inside a line (CommonMark 0.31: code spans,
#: emphasis, links and images, hard breaks; GFM: tables, strikethrough): backslash-escaped.
_MARKDOWN_MARKUP = frozenset("\\`*[]|~")
_HTML_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def markdown(text) -> str:
    """``text`` as literal Markdown inline text, still readable as plain text: one line (line
    breaks become spaces), control characters escaped, ``&``, ``<`` and ``>`` as HTML
    entities (no tag can open), the characters that start inline markup backslash-escaped,
    and ``_`` too unless it sits inside a word (``smith_hw``: CommonMark's intraword rule)."""
    line = " ".join(printable(part) for part in str(text).splitlines()) if text else ""
    out = []
    for i, c in enumerate(line):
        inside_word = 0 < i < len(line) - 1 and line[i - 1].isalnum() and line[i + 1].isalnum()
        if c in _HTML_ENTITIES:
            out.append(_HTML_ENTITIES[c])
        elif c in _MARKDOWN_MARKUP or (c == "_" and not inside_word):
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)
