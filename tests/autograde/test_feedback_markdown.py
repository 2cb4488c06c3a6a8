"""A student's feedback file is Markdown that an LMS or a viewer renders: whatever a student
puts in a name, a file name or an exception message must show as the literal text, never as
a tag, a link, emphasis or the end of the code block. Rendered here with markdown-it-py, a
CommonMark renderer (the spec LMS viewers follow)."""
import html
import re

from markdown_it import MarkdownIt

from autograde.reports import feedback_markdown
from sandbox import textsafe
from sandbox.results import Check, Part, Result, SubmissionReport

HOSTILE = ["<img src=x onerror=alert(1)>", "[click](javascript:alert(1))", "**bold** _it_",
           "`code` # heading", "&lt;b&gt; entity", "<script>alert(1)</script>", "a\\b|c"]


def rendered_text(markdown: str) -> tuple[str, str]:
    page = MarkdownIt("commonmark").render(markdown)
    return page, html.unescape(re.sub(r"<[^>]+>", "", page))


def test_markdown_text_shows_every_hostile_string_literally():
    for text in HOSTILE:
        page, shown = rendered_text(textsafe.markdown(text))
        assert shown.strip() == text
        assert not re.search(r"<(img|script|a|em|strong|code|h\d)\b", page), page


def test_a_feedback_file_is_inert_whatever_the_student_wrote():
    name = "<img src=x onerror=alert(1)>"
    message = "raised ValueError: ~~~~~\n<script>alert(1)</script>\n~~~~\n# not a heading"
    part = Part("ex1", "Exercise 1 (easy): Chinchilla loss calculator", "chinchilla_loss", 10)
    report = SubmissionReport(submission="[x](javascript:alert(1)).ipynb", student_id="**bob**", name=name,
                              parts=[part],
                              results=[(Check("ex1", "ex1_gpt3", 10, False, "chinchilla_loss"),
                                        Result(False, message))])
    page, shown = rendered_text(feedback_markdown(report))
    assert not re.search(r"<(img|script|a|em|strong|h[2-6])\b", page), page
    assert page.count("<pre>") == 1 and page.count("</pre>") == 1  # the report stays one code block
    assert name in shown and "[x](javascript:alert(1)).ipynb" in shown and "**bob**" in shown
    assert "<script>alert(1)</script>" in shown  # shown as text, inside the code block
