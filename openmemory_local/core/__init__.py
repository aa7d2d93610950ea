"""The ground every stage stands on: configuration (where data and transcripts are, every
tunable), the injected clock, JSON in and out, and which embedder is in use.
"""
