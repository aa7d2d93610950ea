"""The storage layer: the one SQLite file (store: connection, migrations) and the vectors file
beside it (vectors), and the functions every stage reads and writes the tables through. Outside
this package only a short allow-list calls SQL (``tests/test_storage_layer.py`` holds it, each
entry with its reason).

One module per family of tables, each function named for what it reads or writes:

=================  ===========================================================================
store              the connection, transactions, migrations, meta and counters, episodes by id,
                   events (``record_event``), a lesson's predictions withdrawn
episodes           transcripts, dirty sessions, episodes (what ingest writes; what sleep and
                   verify read of them)
recall             the columns recall's index loads, in bulk; the lessons it ranks
rendered           ``rendered_files``: what Open Memory wrote into memory folders
commons            received lessons, commons predictions and attestations
published          opt-ins, the outbox, the published records
events             events and morning reports
views              what the local page reads
measures           what the paper's measures read; a scratch copy reset
phrasing           the lesson texts the local model rephrases
trust_boundary     which received lessons may be rendered: SQL, standard library only, so the
                   SessionStart hook's fast path asks it without importing the engine
vectors            the vectors file
=================  ===========================================================================

Plain SQL over ``store.conn`` rather than sqlite-utils' table API: the queries are the engine's
(joins, ``json_extract``, ``group_concat`` for bulk loads, upserts with ``ON CONFLICT``), and
sqlite-utils would add an import to paths a person waits for (one-shot recall, the hooks) for
no simpler function. Writers run inside the caller's ``store.write()`` (one transaction for a
step), never open their own.
"""
