"""Text, without a store: volatile tokens out (normalize), hashed embeddings (embed), the one
Markdown escaping of what an agent reads (markdown), and redaction of what identifies a machine
(redact).
"""
