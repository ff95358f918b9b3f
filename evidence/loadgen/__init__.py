"""The load generator: HTTP and time, nothing about analysis (one record per request)."""
