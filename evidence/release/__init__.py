"""Releases: freeze runs into a BagIt-compatible, tagged release, and verify one."""
