"""Executing runs elsewhere: local, debug, or on many hosts through Slurm (submitit)."""
