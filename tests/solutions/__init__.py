"""Tests of solutions/."""
