"""Write ``book/_static/course-icons.css``: the theme's icons drawn with small SVGs of the course's
own, as CSS masks in the text colour, so that no page loads Font Awesome's script (1.5 MB) or its
icon fonts (book/_ext/course_site.py, item 8).

    python tools/course_icons.py

Each icon is a 16 x 16 SVG: strokes 1.6 wide with round ends (``S``) or filled shapes (``F``).
:data:`ICONS` are the classes the theme puts on ``<i>`` elements; :data:`PSEUDO` the icons its
style sheet puts in ``::before`` and ``::after`` (admonition titles, external links, breadcrumbs,
downloads). ``tests/tools/test_course_icons.py`` checks that the committed file is this script's output,
and the site tests that every icon on every page has a rule.
"""
from __future__ import annotations

import sys
from pathlib import Path

TARGET = Path(__file__).resolve().parents[1] / "book" / "_static" / "course-icons.css"

S = "fill='none' stroke='black' stroke-width='1.6' stroke-linecap='round' stroke-linejoin='round'"
F = "fill='black'"
#: The classes the theme puts on <i> elements -> the icon.
ICONS = {
 "bars": f"<path {S} d='M2 4h12M2 8h12M2 12h12'/>",
 "list": f"<path {S} d='M6 4h8M6 8h8M6 12h8'/><path {F} d='M1.5 4a1 1 0 1 0 2 0a1 1 0 1 0-2 0M1.5 8a1 1 0 1 0 2 0a1 1 0 1 0-2 0M1.5 12a1 1 0 1 0 2 0a1 1 0 1 0-2 0'/>",
 "outdent": f"<path {S} d='M2 3h12M8 6.5h6M8 9.5h6M2 13h12'/><path {F} d='M5.5 5.5v5L2 8z'/>",
 "magnifying-glass": f"<path {S} d='M2 6.5a4.5 4.5 0 1 0 9 0a4.5 4.5 0 1 0-9 0M10 10l4 4'/>",
 "angle-left": f"<path {S} d='M10 3L5 8l5 5'/>",
 "angle-right": f"<path {S} d='M6 3l5 5-5 5'/>",
 "arrow-up": f"<path {S} d='M8 14V2.5M3.5 7L8 2.5 12.5 7'/>",
 "download": f"<path {S} d='M8 2v8.5M4 7l4 4 4-4M2.5 14h11'/>",
 "expand": f"<path {S} d='M2 6V2h4M10 2h4v4M14 10v4h-4M6 14H2v-4'/>",
 "file": f"<path {S} d='M3.5 1.5h5.5l3.5 3.5v9.5h-9zM9 1.5V5h3.5'/>",
 "file-pdf": f"<path {S} d='M3.5 1.5h5.5l3.5 3.5v9.5h-9zM9 1.5V5h3.5M5.5 8.5h5M5.5 11h5'/>",
 "lightbulb": f"<path {S} d='M6 11.5C4.5 10.5 3.5 9 3.5 7a4.5 4.5 0 0 1 9 0c0 2-1 3.5-2.5 4.5zM6 14h4'/>",
 "rocket": f"<path {S} d='M8 1.5c2.5 2 3.5 5 3 8.5H5c-.5-3.5.5-6.5 3-8.5zM5 10l-2 3.5h3M11 10l2 3.5h-3M7 6a1 1 0 1 0 2 0a1 1 0 1 0-2 0'/>",
 "code": f"<path {S} d='M5 4L1.5 8 5 12M11 4l3.5 4-3.5 4M9.5 2.5l-3 11'/>",
 "github": f"<path {S} d='M4.5 4.5v7M4.5 8.5c0-2 1-3 3-3h3M2.5 2.5a2 2 0 1 0 4 0a2 2 0 1 0-4 0M2.5 13.5a2 2 0 1 0 4 0a2 2 0 1 0-4 0M10.5 5.5a2 2 0 1 0 4 0a2 2 0 1 0-4 0'/>",
 "sun": f"<path {S} d='M5 8a3 3 0 1 0 6 0a3 3 0 1 0-6 0M8 1v1.5M8 13.5V15M1 8h1.5M13.5 8H15M3 3l1 1M12 12l1 1M3 13l1-1M12 4l1-1'/>",
 "moon": f"<path {F} d='M13.5 10.5A6 6 0 0 1 5.5 2.5a6 6 0 1 0 8 8z'/>",
 "circle-half-stroke": f"<path {S} d='M2 8a6 6 0 1 0 12 0a6 6 0 1 0-12 0'/><path {F} d='M8 2a6 6 0 0 0 0 12z'/>",
 "xmark": f"<path {S} d='M3.5 3.5l9 9M12.5 3.5l-9 9'/>",
}
#: Icons the theme's style sheet draws with the icon font in ::before and ::after.
PSEUDO = {
 "info-circle": f"<path {S} d='M2 8a6 6 0 1 0 12 0a6 6 0 1 0-12 0M8 7.2V11.5'/><path {F} d='M7.1 4.8a.9.9 0 1 0 1.8 0a.9.9 0 1 0-1.8 0'/>",
 "exclamation-circle": f"<path {S} d='M2 8a6 6 0 1 0 12 0a6 6 0 1 0-12 0M8 4.5V8.8'/><path {F} d='M7.1 11.2a.9.9 0 1 0 1.8 0a.9.9 0 1 0-1.8 0'/>",
 "exclamation-triangle": f"<path {S} d='M8 1.8L14.8 13.8H1.2zM8 6v3.8'/><path {F} d='M7.15 11.8a.85.85 0 1 0 1.7 0a.85.85 0 1 0-1.7 0'/>",
 "times-circle": f"<path {S} d='M2 8a6 6 0 1 0 12 0a6 6 0 1 0-12 0M5.8 5.8l4.4 4.4M10.2 5.8l-4.4 4.4'/>",
 "bell": f"<path {S} d='M3.5 11.5h9c-1-1-1.5-2-1.5-4a3 3 0 0 0-6 0c0 2-.5 3-1.5 4zM6.8 13.8h2.4'/>",
 "lightbulb": ICONS["lightbulb"],
 "share": f"<path {S} d='M9.5 2.5H13.5V6.5M13.5 2.5L7 9M11.5 9.5v4h-9v-9h4'/>",
 "pencil": f"<path {S} d='M2.5 13.5l.8-3.3 7.5-7.5 2.5 2.5-7.5 7.5zM9.5 4l2.5 2.5'/>",
 "external-link": f"<path {S} d='M9.5 2.5H13.5V6.5M13.5 2.5L7 9M11.5 9.5v4h-9v-9h4'/>",
 "angle-right": ICONS["angle-right"],
 "download": ICONS["download"],
 "search-minus": f"<path {S} d='M2 6.5a4.5 4.5 0 1 0 9 0a4.5 4.5 0 1 0-9 0M10 10l4 4M4.5 6.5h4'/>",
 "github": ICONS["github"],
}
#: Admonition classes -> the icon of their title ("": any other admonition).
ADMONITIONS = {"": "bell", "note": "info-circle", "attention": "exclamation-circle", "important": "exclamation-circle",
               "caution": "exclamation-triangle", "warning": "exclamation-triangle", "danger": "exclamation-triangle",
               "error": "times-circle", "hint": "lightbulb", "tip": "lightbulb", "seealso": "share", "todo": "pencil"}

#: Pseudo-elements of the theme's style sheet that draw an icon, with the icon and their box.
PSEUDO_RULES = (
    ("nav.bd-links li > a.reference.external::after, .nav-link.nav-external::after", "external-link",
     "width: 0.75em; height: 0.75em;"),
    ("ul.bd-breadcrumbs li.breadcrumb-item:not(.breadcrumb-home)::before", "angle-right",
     "width: 0.8rem; height: 0.8rem; padding: 0; margin: 0 0.4rem;"),
    ("a.reference.download::before", "download", "width: 0.8em; height: 0.8em; padding: 0; margin: 0 0.25em;"),
    ("div#searchbox p.highlight-link a::before", "search-minus", "width: 1em; height: 1em;"),
    ("a.github::before, a.gitlab::before", "github", "width: 1em; height: 1em;"),
    ("span.versionmodified::before", "info-circle", "width: 1em; height: 1em;"),
)
MASK = ('content: "" !important; font: inherit !important; background-color: currentColor; '
        "-webkit-mask: var(--course-icon) center / contain no-repeat; mask: var(--course-icon) center / contain no-repeat;")


def uri(body: str) -> str:
    """A 16 x 16 SVG of ``body`` as a CSS ``url()`` (percent-encoded where CSS needs it)."""
    svg = f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'>{body}</svg>"
    return 'url("data:image/svg+xml,' + svg.replace("<", "%3C").replace(">", "%3E").replace("#", "%23") + '")'


def css() -> str:
    """The style sheet's text."""
    out = ['''/* The theme's icons (Font Awesome class names) drawn with small SVGs written for this course,
   as CSS masks in the text colour: no icon font and no icon script to download
   (book/_ext/course_site.py, item 8). Written by tools/course_icons.py: edit that, not this. */
:is(.fa, .fas, .far, .fab, .fa-solid, .fa-regular, .fa-brands)::before { content: none !important; }
:is(.fa, .fas, .far, .fab, .fa-solid, .fa-regular, .fa-brands) {
  font-family: inherit !important;
  width: 1em; height: 1em; vertical-align: -0.125em;
  background-color: currentColor;
  -webkit-mask: var(--course-icon) center / contain no-repeat;
  mask: var(--course-icon) center / contain no-repeat;
}''']
    out += [f".fa-{name} {{ --course-icon: {uri(body)}; }}" for name, body in ICONS.items()]
    out.append('''
/* The same for the icons the theme's style sheet puts in ::before and ::after with the icon font:
   admonition titles, external links, breadcrumbs, downloads, the search page's highlight link. */''')
    out.append(f".admonition > .admonition-title::after, div.admonition > .admonition-title::after {{ {MASK} }}")
    for cls, icon in ADMONITIONS.items():
        sel = f".admonition{'.' + cls if cls else ''}, div.admonition{'.' + cls if cls else ''}"
        out.append(f"{sel} {{ --course-icon: {uri(PSEUDO[icon])}; }}")
    for sel, icon, box in PSEUDO_RULES:
        out.append(f"{sel} {{ {MASK} display: inline-block; vertical-align: -0.1em; {box} --course-icon: {uri(PSEUDO[icon])}; }}")
    return "\n".join(out) + "\n"


def main() -> int:
    TARGET.write_text(css(), encoding="utf-8")
    print(f"wrote {TARGET.relative_to(TARGET.parents[2])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
