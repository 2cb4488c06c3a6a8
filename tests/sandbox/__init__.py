"""Tests of the grading engine, sandbox/."""
