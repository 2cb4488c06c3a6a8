"""Tests of the built book, its notebooks and pages."""
