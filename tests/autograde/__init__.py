"""Tests of the grader's front ends, autograde/."""
