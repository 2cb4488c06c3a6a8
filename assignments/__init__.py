"""Assignments: students write torch.distributed code, graded on real gloo ranks in the
multi-rank sandbox (``sandbox.multirank``). One module per assignment holds its grader;
its notebook (``assignments/a1-*.md``) holds the statement, the stub and, in the master,
the reference solution."""

#: id -> (grader module, notebook master)
ASSIGNMENTS = {
    "a1": ("assignments.a1_ring", "assignments/a1-ring-allreduce.md"),
    "a2": ("assignments.a2_ddp", "assignments/a2-ddp-by-hand.md"),
    "a3": ("assignments.a3_zero", "assignments/a3-zero-sharded-optimizer.md"),
    "a4": ("assignments.a4_tp", "assignments/a4-tensor-parallel.md"),
    "a5": ("assignments.a5_pipeline", "assignments/a5-pipeline-1f1b.md"),
    "a6": ("assignments.a6_moe", "assignments/a6-expert-parallel.md"),
}
