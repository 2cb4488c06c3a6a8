"""The committed icon style sheet is what tools/course_icons.py writes (edit the script, run it)."""
from tools import course_icons


def test_the_icon_css_is_the_script_s_output():
    assert course_icons.TARGET.read_text(encoding="utf-8") == course_icons.css(), \
        "book/_static/course-icons.css is stale: run `python tools/course_icons.py`"


def test_every_icon_is_a_small_svg():
    for name, body in {**course_icons.ICONS, **course_icons.PSEUDO}.items():
        assert body.startswith("<path ") and "#" not in body and len(body) < 400, name
