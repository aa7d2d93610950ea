"""Measures: ``openmemory eval``'s six (measures), retrieval methods compared (retrieval), plots.
"""
