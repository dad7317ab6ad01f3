"""zsnli: zero-shot text classification served from an NLI cross-encoder."""

__version__ = "0.1.0"
