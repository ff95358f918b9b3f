"""The trace analyses, each a function of a kernel table (and steps)."""
