"""Helpers shared by several test modules (no tests here): builders, processes, clocks."""
