"""``python -m labs``: which labs there are and the command that runs each (the table of
``labs/00-running-the-labs.md``, read from each lab's own docstring)."""
from __future__ import annotations

import importlib
import textwrap

#: The labs in the order the course runs them, then the one that runs them all on GPUs.
LABS = ("collectives", "ddp", "fsdp", "tensor_parallel", "pipeline_parallel", "grid3d", "scaling_law",
        "predict_vs_measure", "expert_parallel", "gpu_check")


#: Ranks each lab is shown with: the 2 x 2 grid of grid3d needs four.
NPROC = {"grid3d": 4, "gpu_check": None}


def summary(name: str, width: int = 100) -> str:
    """The first paragraph of lab ``name``'s docstring, shortened to ``width`` characters."""
    doc = (importlib.import_module(f"labs.{name}").__doc__ or "").split("\n\n")[0].replace("``", "")
    return textwrap.shorten(" ".join(doc.split()), width, placeholder=" ...")


def main() -> int:
    width = max(len(n) for n in LABS) + len("python -m labs.") + len(" --nproc 2")
    print("The labs (labs/00-running-the-labs.md); each takes --help:")
    for name in LABS:
        n = NPROC.get(name, 2)
        command = f"python -m labs.{name}" + (f" --nproc {n}" if n else "")
        print(f"  {command:<{width}}  {summary(name)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
