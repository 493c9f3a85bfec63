"""Sinks: where labels are published (feature file, stdout, NodeFeature, Node)."""
