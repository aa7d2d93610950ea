"""The lesson texts the local model rephrases (:func:`openmemory_local.sleep.lesson_text.phrase`):
which lessons still carry the rule's text, and the model's text (or the note that it was tried)
written back. Kept apart from the lesson lifecycle's own storage: a text is not a state.

Writers run inside the caller's ``store.write()``.
"""

from __future__ import annotations

from openmemory_local.core.jsonio import dumps


def lessons_with_rule_text(store) -> list[tuple]:
    """(id, rule_text, details JSON) of the active, unvetoed lessons whose text is the rule's,
    strongest first."""
    return store.conn.execute(
        "SELECT id, rule_text, details FROM lessons WHERE state = 'active' AND vetoed_at IS NULL "
        "AND text_source = 'rule' ORDER BY strength DESC, id").fetchall()


def text_basis(store, lesson_id: int) -> tuple | None:
    """(rule_text, text_source) of a lesson now, or None."""
    return store.conn.execute("SELECT rule_text, text_source FROM lessons WHERE id = ?", (lesson_id,)).fetchone()


def set_details(store, lesson_id: int, details: dict) -> None:
    store.conn.execute("UPDATE lessons SET details = ? WHERE id = ?", (dumps(details), lesson_id))


def set_model_text(store, lesson_id: int, text: str, details: dict, at: str) -> None:
    """The model's rephrasing becomes the lesson's text (``text_source`` ``model``)."""
    store.conn.execute("UPDATE lessons SET text = ?, text_source = 'model', details = ?, updated = ? WHERE id = ?",
                       (text, dumps(details), at, lesson_id))
