"""Integrations with the agents whose memory Open Memory keeps (Claude Code first).

An integration wires the agent to Open Memory: it registers the MCP server, adds a hook that
ingests each ended session, and schedules the nightly run. Every change it makes to the
user's files is recorded in a manifest in the data folder so that uninstalling removes
exactly what was added, and nothing else.
"""
