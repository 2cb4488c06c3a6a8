"""The instructors' guide states counts and places that the code decides; they must agree."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "book" / "instructors.md").read_text(encoding="utf-8")


def test_the_red_team_counts_are_the_suites():
    from tests.redteam.cases import CASES

    honest = [c for c in CASES if not c.lost and not c.keeps]
    said = re.search(r"grades (\d+) submissions in `tests/redteam/submissions/`:\s+(\d+) hostile or broken "
                     r"ones and (\d+) honest variants", GUIDE)
    assert said, "the guide no longer states the red-team suite's size"
    assert tuple(map(int, said.groups())) == (len(CASES), len(CASES) - len(honest), len(honest))


def test_every_path_the_guide_names_exists():
    named = set(re.findall(r"`((?:sandbox|grading|assignments|autograde|instructor|tests|solutions|labs)/"
                           r"[\w./-]+?\.(?:py|json|md))`", GUIDE))
    assert named, "the guide names no file"
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert not missing, f"the guide names files that do not exist: {missing}"


def test_the_memory_probes_bound_is_the_graders():
    from assignments import a3_zero

    said = re.search(r"beyond the layer, (\d+) shards and (\d+(?:\.\d+)?) MiB", GUIDE)
    assert said, "the guide no longer states A3's memory bound"
    assert int(said.group(1)) == a3_zero.STATE_SHARDS
    assert abs(float(said.group(2)) * 2**20 - a3_zero.PROBE_SLACK) < 1.0  # bytes


def test_the_rendezvous_tries_are_the_graders():
    from sandbox.multirank import RENDEZVOUS_TRIES

    words = {2: "two", 3: "three", 4: "four", 5: "five"}
    said = re.search(r"it is started again,\s+up\s+to\s+(\w+)\s+times", GUIDE)
    assert said, "the guide no longer states how often a group that never met is started"
    assert said.group(1) == words.get(RENDEZVOUS_TRIES, str(RENDEZVOUS_TRIES))


def test_the_longest_wait_before_a_cut_is_the_graders():
    from sandbox.multirank import SETTLE_MAX_S

    said = re.search(r"group\s+has\s+gone\s+idle\s+\(at\s+most\s+([\d.]+)\s+s", GUIDE)
    assert said, "the guide no longer states how long the grader waits before it cuts the traffic"
    assert abs(float(said.group(1)) - SETTLE_MAX_S) < 1e-9  # seconds
