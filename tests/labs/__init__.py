"""Tests of labs/."""
