"""Tests of the development tools, tools/."""
