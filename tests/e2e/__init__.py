"""End to end: gfd as a process or through its real clients, against the fakes."""
