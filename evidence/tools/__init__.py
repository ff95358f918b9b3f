"""Tools beside the pipeline: the stand-in server (faults, exact timing) and the tiny weightless model."""
