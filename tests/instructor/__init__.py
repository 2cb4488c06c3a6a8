"""Tests of the instructor's tools, instructor/."""
