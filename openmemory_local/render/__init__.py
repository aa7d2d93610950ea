"""What an agent reads: the Claude Code memory folder (memory_folder), the commons part of it
(commons_part), AGENTS.md and GEMINI.md (agents), the morning report (report), and what re-renders
after the owner changes something (refresh).
"""
