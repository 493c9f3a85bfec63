"""Tests of the test suite itself: its layout."""
