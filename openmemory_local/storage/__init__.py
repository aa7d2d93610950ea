"""The storage layer: the one SQLite file (store: connection, migrations) and the vectors file
beside it (vectors), and the functions every stage reads and writes the tables through.
"""
