"""Hostile and broken submissions for the autograder (see cases.py)."""
