"""evidence: publishable, auditable performance evidence for LLM serving engines."""

__version__ = "0.1.0"
