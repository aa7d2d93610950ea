"""The ``openmemory`` command line (main), and its ``commons``/``team`` commands (commons).
"""
