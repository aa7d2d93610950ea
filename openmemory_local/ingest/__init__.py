"""Where a transcript becomes episodes: read the raw stream (rawstream, archive), turn one agent's
format into agent-neutral events (adapters), build episodes from events (episodes: errors with
their reason line and resolution, corrections), all driven by transcripts.ingest_all.
"""
