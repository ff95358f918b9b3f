"""evidence run: the sweep, its run directory, provenance, the separate profiling workload."""
