"""Where inline code may break on a narrow screen (book/_ext/course_site.py, item 11)."""
from __future__ import annotations

import importlib.util

import pytest

from tools.browser import ROOT

_spec = importlib.util.spec_from_file_location("course_site", ROOT / "book" / "_ext" / "course_site.py")
course_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(course_site)


@pytest.mark.parametrize("word, parts", [
    ("labs.collectives", ["labs.", "collectives"]),
    ("labs.predict_vs_measure", ["labs.", "predict_", "vs_", "measure"]),
    ("reports/fsdp-cpu.json", ["reports/", "fsdp-", "cpu.", "json"]),
    ("--nproc", ["--nproc"]),            # an option's dashes stay with it
    ("1.5e12", ["1.5e12"]),              # a number is not cut at its decimal point
    ("__init__.py", ["__init__.py"]),      # short, and its dunder stays whole
    ("carlosabe_100517_5899695_09-exercises.ipynb", ["carlosabe_", "100517_", "5899695_", "09-", "exercises.", "ipynb"]),
    ("torch&gt;=2.4", ["torch&gt;=2.4"]),  # an escaped character is never cut
])
def test_words_are_cut_only_where_a_reader_expects_a_break(word, parts):
    assert course_site.code_word_parts(word) == parts


def test_the_page_keeps_its_text_and_gains_only_break_opportunities():
    body = ('<p><code class="docutils literal notranslate"><span class="pre">python</span> '
            '<span class="pre">-m</span> <span class="pre">labs.collectives</span></code></p>')
    context = {"body": body}
    course_site._code_breaks(None, "page", "page.html", context, None)
    assert context["body"].count("<wbr>") == 1
    assert context["body"].replace('</span><wbr><span class="pre">', "") == body
