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


#: What CommonMark lets a backslash escape (spec 0.31, sec. 2.4): all ASCII punctuation.
_MARKDOWN_PUNCTUATION = frozenset("!\"#$%'()*+,-./:;=?@[\\]^_`{|}~")
_HTML_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def markdown(text) -> str:
    """``text`` as literal Markdown inline text: one line (line breaks become spaces), control
    characters escaped, ``&``, ``<`` and ``>`` as HTML entities (no tag can open) and every
    other ASCII punctuation character backslash-escaped (no link, emphasis, heading, list or
    code span can start)."""
    line = " ".join(printable(part) for part in str(text).splitlines()) if text else ""
    return "".join(_HTML_ENTITIES.get(c) or ("\\" + c if c in _MARKDOWN_PUNCTUATION else c)
                   for c in line)
