"""Students whose code is likely copied, with the evidence side by side.

Fingerprints are winnowed k-grams of the tokenised code (Schleimer, Wilkerson and Aiken,
"Winnowing: local algorithms for document fingerprinting", SIGMOD 2003, the method of MOSS),
computed by the maintained library ``copydetect`` (pinned in requirements.in). Its filter
replaces every identifier by one token, so a copy with renamed variables keeps its
fingerprints. Before that, the code is normalised (:func:`normalised`): parsed and printed
again, statements without effect dropped, and functions that nothing the grader calls can
reach dropped, so that padding a copy with ``pass`` statements or unused code does not hide
it. Only the student's own code is compared: the code cells or statements the grader runs
(markdown and outputs left out), with the fingerprints of the hand-out's template (the
exercises notebook, or the assignment's) removed as boilerplate.

A pair scores the share of the *smaller* file found in the other, so a copy padded out to
twice the length still scores as a copy. Students whose code is the same form one group
(:class:`Group`), shown once, so that a common correct answer shared by many does not crowd
the pairs out of the report.
"""
from __future__ import annotations

import ast
import io
import re
from dataclasses import dataclass
from pathlib import Path

from sandbox.submission import read_submission

K = 20  # characters of the filtered code per k-gram (an identifier is one): a line or two
WINDOW = 4  # winnowing window (a match of K + WINDOW - 1 characters is always found)
ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "chapters" / "09-exercises.md"
SAME = 0.95  # both shares at least this: the same code (a group, when three or more share it)
#: Shared code counts only in runs of at least this many characters of filtered code (two or
#: three statements): idioms that any two solutions share (``np.sqrt(abs(V)) + ``) are short
#: and scattered, a copy is long runs. On 200 random programs of one shape, no two unrelated
#: ones share anything in such runs, while renamed and padded copies share all of it.
RUN = 3 * K


@dataclass
class Pair:
    a: str  # student ids
    b: str
    similarity: float  # the share of the smaller file found in the other, 0 to 1
    evidence: tuple  # (a's code with the copied parts marked, b's code likewise), HTML


@dataclass
class Group:
    ids: tuple  # the students, sorted
    code: str  # the code they share (one of them), HTML-escaped


def student_code(path) -> str:
    """The code the grader would run, joined: what a student wrote (no markdown, no outputs)."""
    submission = read_submission(path)
    return "\n\n".join(u.source for u in submission.units) if not submission.problem else ""


def template_code(assignment: str | None = None) -> str:
    """The hand-out's code as students receive it (the exercises notebook, or
    ``assignment``'s): each solution between ``### BEGIN SOLUTION`` and ``### END SOLUTION``
    replaced by ``raise NotImplementedError``, as the student version has it."""
    import tempfile

    path = TEMPLATE
    if assignment:
        from assignments import ASSIGNMENTS

        path = ROOT / ASSIGNMENTS[assignment][1]
    if not path.exists():
        return ""
    text = re.sub(r"^([ \t]*)### BEGIN SOLUTION.*?### END SOLUTION[^\n]*$", r"\1raise NotImplementedError",
                  path.read_text(encoding="utf-8"), flags=re.S | re.M)
    with tempfile.TemporaryDirectory(prefix="template-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_text(text, encoding="utf-8")
        return student_code(copy)


# ----------------------------------------------------------------------------- normalising

def _without_no_ops(body: list) -> list:
    """``body`` without statements that do nothing (``pass``, ``...``, a bare constant or
    name, docstrings included) or only say "not done" (``raise NotImplementedError``),
    recursively; an emptied body keeps one ``pass``."""
    kept = []
    for node in body:
        if isinstance(node, ast.Pass) or (isinstance(node, ast.Expr)
                                          and isinstance(node.value, (ast.Constant, ast.Name))):
            continue
        if isinstance(node, ast.Raise) and "NotImplementedError" in ast.dump(node):
            continue  # a stub's "not done yet" says nothing about who wrote what
        for name in ("body", "orelse", "finalbody"):
            inner = getattr(node, name, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(node, name, _without_no_ops(inner) or ([ast.Pass()] if name == "body" else []))
        for handler in getattr(node, "handlers", []) or []:
            handler.body = _without_no_ops(handler.body) or [ast.Pass()]
        kept.append(node)
    return kept


def _used(nodes) -> set:
    """Every name the code of ``nodes`` reads, and every attribute it takes (methods)."""
    used = set()
    for node in nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                used.add(n.id)
            elif isinstance(n, ast.Attribute):
                used.add(n.attr)
    return used


def normalised(units, keep=()) -> str:
    """The code of ``units`` (sources, in order) as the comparison sees it: each parsed and
    printed again (``ast.unparse``: comments, blank lines, quotes and spacing gone), statements
    without effect dropped, and top-level functions and classes dropped unless reachable from
    ``keep`` (what the grader calls) or from the other top-level statements, by the names they
    use. A unit that does not parse is kept as it is, and so is a statement too deep to print."""
    trees, sources, raw = [], [], []
    for source in units:
        try:
            trees.append(ast.parse(source))
            sources.append(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raw.append(source)
    defs = {}
    for tree in trees:
        tree.body = _without_no_ops(tree.body)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defs.setdefault(node.name, []).append(node)
    definitions = tuple(defs)
    roots = set(keep) | _used(n for t in trees for n in t.body if not isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))
    reachable, todo = set(), [n for n in definitions if n in roots]
    while todo:
        name = todo.pop()
        if name in reachable:
            continue
        reachable.add(name)
        todo += [n for n in _used(defs[name]) if n in defs and n not in reachable]
    out = []
    for tree, source in zip(trees, sources):
        tree.body = [n for n in tree.body if not isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or n.name in reachable]
        try:
            out.append(ast.unparse(tree))
        except (ValueError, RecursionError):  # statement by statement: one too deep to print
            out += [_printed(node, source) for node in tree.body]  # must not hide the rest
    return "\n\n".join([o for o in out if o.strip()] + raw)


def _printed(node, source: str) -> str:
    """One statement as :func:`normalised` prints it, or its own text where it is too deep to
    print (a padding expression of thousands of terms, say)."""
    try:
        return ast.unparse(node)
    except (ValueError, RecursionError):
        return ast.get_source_segment(source, node) or ""


# ----------------------------------------------------------------------------- comparing

def _stable_kgram_hashes(string: str, k: int):
    """copydetect's k-gram hashes, but the same in every process: it uses Python's ``hash``,
    which is salted per process, so the k-grams winnowing keeps, and with them a pair's score,
    changed from run to run. BLAKE2b's first 8 bytes instead (RFC 7693)."""
    import hashlib

    import numpy as np

    return np.array([int.from_bytes(hashlib.blake2b(string[i:i + k].encode("utf-8", "surrogatepass"),
                                                    digest_size=8).digest(), "little", signed=True)
                     for i in range(len(string) - k + 1)], dtype=np.int64)


def _deterministic():
    import copydetect.utils

    copydetect.utils.hashed_kgrams = _stable_kgram_hashes  # what get_document_fingerprints calls


def _fingerprint(code: str, boilerplate=None):
    from copydetect import CodeFingerprint

    _deterministic()
    return CodeFingerprint("submission.py", K, WINDOW, boilerplate=boilerplate,
                           fp=io.StringIO(code))


def _shares(a, b) -> tuple:
    """The share of each fingerprinted file found in the other, counting only runs of at
    least :data:`RUN` characters (copydetect's overlap, before it maps back to the raw text)."""
    from copydetect.utils import find_fingerprint_overlap, get_copied_slices

    in_a, in_b = find_fingerprint_overlap(a.hashes, b.hashes, a.hash_idx, b.hash_idx)
    shares = []
    for found, fingerprint in ((in_a, a), (in_b, b)):
        starts, ends = get_copied_slices(found, K)
        long = sum(int(e - s) for s, e in zip(starts, ends) if e - s >= RUN)
        shares.append(long / fingerprint.token_coverage if fingerprint.token_coverage else 0.0)
    return tuple(shares)


def _exercise_functions() -> tuple:
    from grading import EXERCISES

    return tuple(e.function for e in EXERCISES)


def compare(codes: dict, template: str = "", keep=None):
    """``codes``: {student id: code}. ``(groups, scored, fingerprints)``: the groups of three
    or more students with the same code, and every other pair that shares code, as ``(score,
    a, b)``, most similar first; a group takes part through its first member only. ``keep``:
    what the grader calls (the exercises' functions when None)."""
    import numpy as np

    keep = _exercise_functions() if keep is None else tuple(keep)
    template = normalised([template], keep) if template.strip() else ""
    boilerplate = (np.array(sorted(_fingerprint(template).hashes), dtype=np.int64)
                   if template.strip() else None)
    prints = {}
    for sid, code in codes.items():
        if not code.strip():
            continue
        try:
            fingerprint = _fingerprint(normalised([code], keep), boilerplate)
        except Exception:
            continue
        if len(fingerprint.hashes):  # nothing left beyond the template: nothing to compare
            prints[sid] = fingerprint
    ids = sorted(prints)
    parent = {sid: sid for sid in ids}

    def root(sid):
        while parent[sid] != sid:
            parent[sid] = parent[parent[sid]]
            sid = parent[sid]
        return sid

    found = []
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            if prints[a].raw_code == prints[b].raw_code:
                sa = sb = 1.0  # the same code: its shares can fall short where the template's
                # lines, left out, cut its runs below RUN (a hand-out notebook filled in alike).
                # The code as written (normalised), not copydetect's filtered tokens, where every
                # name is the same letter: short answers the exercises force alike, their names
                # the students' own, are not "the same code" (RUN is what keeps them apart)
            else:
                sa, sb = _shares(prints[a], prints[b])
            if not sa:
                continue
            if min(sa, sb) >= SAME:
                parent[root(b)] = root(a)
            found.append((max(sa, sb), a, b))
    members: dict = {}
    for sid in ids:
        members.setdefault(root(sid), []).append(sid)
    groups = sorted((tuple(sorted(m)) for m in members.values() if len(m) >= 3), key=lambda g: (-len(g), g))
    in_group = {sid: g for g in groups for sid in g}
    scored = []
    for score, a, b in found:
        ga, gb = in_group.get(a), in_group.get(b)
        if (ga and ga == gb) or (ga and a != ga[0]) or (gb and b != gb[0]):
            continue  # inside one group, or a group's other members: said once, by the group
        scored.append((score, a, b))
    scored.sort(key=lambda p: (-p[0], p[1], p[2]))
    return groups, scored, prints


def similar(codes: dict, template: str = "", keep=None, threshold: float = 0.5, limit: int = 30):
    """``(groups, pairs)``: the :class:`Group` s of three or more students with the same code,
    and the :class:`Pair` s sharing at least ``threshold`` of the smaller file, most similar
    first, at most ``limit`` (a group counts as its first member)."""
    from html import escape

    from copydetect.utils import highlight_overlap

    from copydetect.detector import compare_files

    groups, scored, prints = compare(codes, template, keep)
    pairs = []
    for score, a, b in [s for s in scored if s[0] >= threshold][:limit]:
        _, _, (slices_a, slices_b) = compare_files(prints[a], prints[b])
        left, _ = highlight_overlap(prints[a].raw_code, slices_a, "<mark>", "</mark>", escape_html=True)
        right, _ = highlight_overlap(prints[b].raw_code, slices_b, "<mark>", "</mark>", escape_html=True)
        pairs.append(Pair(a, b, score, (left, right)))
    return [Group(g, escape(prints[g[0]].raw_code)) for g in groups], pairs


def similar_pairs(codes: dict, threshold: float = 0.5, limit: int = 30, template: str | None = None,
                  keep=None) -> list:
    """The :class:`Pair` s of :func:`similar` (the exercises' template unless given)."""
    return similar(codes, template_code() if template is None else template, keep, threshold, limit)[1]


def pairs_html(found) -> list:
    """The class report's section: each group once, then each pair with both students' code
    side by side. ``found``: ``(groups, pairs)`` of :func:`similar`, or a list of pairs."""
    from html import escape

    groups, pairs = found if isinstance(found, tuple) else ([], found)
    out = ['<h2 id="similarity">Likely copied code</h2>']
    if not pairs and not groups:
        return out + ["<p>No pair of submissions shares most of its code.</p>"]
    out.append("<p>Code compared with identifiers ignored, the template left out, and padding "
               "(statements that do nothing, functions nothing calls) dropped. A lead, not a "
               "verdict.</p>")
    for g in groups:
        out.append(f'<details class="group"><summary>{len(g.ids)} students with the same code: '
                   f"{escape(', '.join(g.ids))}</summary><pre tabindex=\"0\">{g.code}</pre></details>")
    if pairs:
        out.append("<p>Pairs whose code is mostly the same (the share of the smaller file found "
                   "in the other), most similar first. Shared parts are marked.</p>")
    for p in pairs:
        out.append(f'<details class="pair"><summary>{escape(p.a)} and {escape(p.b)}: '
                   f"{100 * p.similarity:.0f}% shared</summary><div class=\"side\">"
                   f"<pre tabindex=\"0\">{p.evidence[0]}</pre><pre tabindex=\"0\">{p.evidence[1]}</pre></div></details>")
    return out
