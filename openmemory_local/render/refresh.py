"""What the owner changes, then the memory folders rendered again at once: a veto or unveto of a
lesson (own or received), a key added to or removed from the team or blocked list, a pull from
the node. One code path for the command line, the MCP tools and the local page.

This module sits above both the commons layer (which never renders) and the renderer (which
never changes a lesson's state): each function changes what it changes, then renders.
"""

from __future__ import annotations

import os
from datetime import datetime

from openmemory_local.commons.node_link import NodeError, NodeUnavailable, open_link
from openmemory_local.commons.publish import published_records
from openmemory_local.commons.verify import memory_folders
from openmemory_local.commons.receive import (KEY_LISTS, file_name_for, pull, stale_rendered, unveto_commons,
                                              veto_commons)
from openmemory_local.render.memory_folder import RenderError, render
from openmemory_local.sleep.lessons import unveto, veto
from openmemory_local.sleep.passes import SleepBusy
from openmemory_local.storage import rendered

__all__ = ["set_veto", "set_commons_veto", "change_key_list", "refresh_folders"]


def set_veto(store, lesson_id: int, now: datetime, *, vetoed: bool = True) -> dict:
    """Veto (or unveto) a lesson, then render at once, so that its files leave (or come back
    to) the memory folders now rather than at the next nightly run. What ``openmemory veto``
    and ``unveto`` and the buttons of ``openmemory ui`` do: one code path.

    Returns ``{"lesson": id, "vetoed" | "unvetoed": changed}``; when it changed, also
    ``render`` (the render's result, or None) and ``pending`` (why nothing was rendered: a
    sleep or render running, no Claude Code folder; the next render does it), and always
    ``message`` (one sentence for a person). Raises :class:`LessonNotFound`.
    """

    word = "vetoed" if vetoed else "unvetoed"
    changed = (veto if vetoed else unveto)(store, lesson_id, now)
    out: dict = {"lesson": lesson_id, word: changed}
    if not changed:
        out["message"] = f"Lesson {lesson_id} was already {'vetoed' if vetoed else 'not vetoed'}."
        return out
    if vetoed:
        out.update(_on_commons(store, lesson_id))
    result, pending = None, None
    try:
        result = render(store, now).to_dict()
    except (SleepBusy, RenderError) as exc:
        pending = str(exc)
    out.update(render=result, pending=pending)
    if result is None:
        out["message"] = (f"Lesson {lesson_id} {word}; the next render "
                          + ("removes its files (those not edited)" if vetoed else "writes it again")
                          + f" ({pending})." + out.get("commons_hint", ""))
        return out
    name = rendered.lesson_file_name(store, lesson_id)

    def ours(paths: list) -> int:
        return sum(1 for path in paths if name and os.path.basename(str(path)) == name)

    if vetoed:
        removed = sum(ours(t["removed"]) for t in result["targets"])
        kept = rendered.kept_edited_count(store, lesson_id)
        out["message"] = (f"Lesson {lesson_id} vetoed: never rendered again; its file was removed from "
                          f"{removed} memory folder{'s' if removed != 1 else ''}"
                          + (f", and left alone in {kept} where you edited it" if kept else "") + "."
                          + out.get("commons_hint", ""))
    else:
        written = sum(ours(t["written"]) for t in result["targets"])
        out["message"] = (f"Lesson {lesson_id} unvetoed: written again into {written} memory "
                          f"folder{'s' if written != 1 else ''}.")
    return out


def _on_commons(store, lesson_id: int) -> dict:
    """What a veto leaves on the commons: the lesson's unrevoked records, and how to withdraw them."""

    records = [r["record_id"] for r in published_records(store, {lesson_id}).get(lesson_id, [])
               if r["revoked_at"] is None]
    if not records:
        return {}
    return {"published_records": records,
            "commons_hint": (f" It was published to the commons ({len(records)} record(s)): a veto stops publishing "
                             f"it but leaves it there. To withdraw it: openmemory revoke {lesson_id} --reason \"...\"")}


def set_commons_veto(store, ident: str, now: datetime, *, vetoed: bool = True) -> dict:
    """Veto (or unveto) a received lesson, then render at once, so that its file leaves (or
    comes back to) the memory folders now: what ``openmemory veto RECORD_ID`` and the page's
    button do, one code path (as :func:`openmemory_local.render.refresh.set_veto` for an own lesson).

    Returns ``{"commons", "short", "changed", "render", "pending", "message"}``. Raises
    :class:`CommonsNotFound`."""

    word = "vetoed" if vetoed else "unvetoed"
    lesson, changed = (veto_commons if vetoed else unveto_commons)(store, ident, now)
    out: dict = {"commons": lesson["record_id"], "short": lesson["short"], "changed": changed, "render": None,
                 "pending": None}
    if not changed:
        out["message"] = f"Received lesson {lesson['short']} was already {word if vetoed else 'not vetoed'}."
        return out
    try:
        result = render(store, now).to_dict()
    except (SleepBusy, RenderError) as exc:
        out["pending"] = str(exc)
        out["message"] = (f"Received lesson {lesson['short']} {word}; the next render "
                          + ("removes its file" if vetoed else "may write it again") + f" ({exc}).")
        return out
    out["render"] = result
    name = lesson["file_name"] or file_name_for(lesson["record_id"])
    paths = [p for t in result["targets"] for p in t["removed" if vetoed else "written"]
             if str(p).rsplit("/", 1)[-1] == name]
    folders = f"{len(paths)} memory folder{'s' if len(paths) != 1 else ''}"
    out["message"] = (f"Received lesson {lesson['short']} vetoed: never rendered again; its file was removed from "
                      f"{folders}." if vetoed else
                      f"Received lesson {lesson['short']} unvetoed: written again into {folders} (those it is "
                      "chosen for).")
    return out


def change_key_list(store, name: str, action: str, key: str | None, now: datetime, *, note: str = "",
                    link=None) -> dict:
    """``openmemory team add|remove KEY`` and ``openmemory commons block|unblock KEY`` (the
    page's buttons too, one code path): the node's list changes (it holds them: a blocked
    key's records are dropped at receipt there, its lessons revoked, its votes not counted),
    then this engine pulls and renders at once, so that a blocked author's lessons (and their
    near-copies) leave every memory folder now, and a team member's arrive. Raises
    :class:`openmemory_local.commons.node_link.NodeUnavailable` when no node runs (the lists live in
    the node) and NodeError for a key the node refuses."""

    if name not in KEY_LISTS:
        raise ValueError(f"no key list {name!r}")
    link = link or open_link(store.config)
    if action == "add":
        data = link.add_key(name, str(key), note)
    elif action == "remove":
        data = link.remove_key(name, str(key))
    else:
        data = link.keys(name)
    out: dict = {"list": name, "action": action, "keys": data.get(name, []), "changed": data.get("changed", 0),
                 "added": data.get("added"), "key": data.get("key")}
    if action in ("add", "remove"):
        out["pull"] = pull(store, link, now)
        try:
            out["render"] = render(store, now).to_dict()
        except (SleepBusy, RenderError) as exc:
            out["render"] = None
            out["pending"] = str(exc)
    return out


def refresh_folders(store, now: datetime, *, pull_first: bool = True, link=None, max_pages: int = 20) -> dict:
    """What the SessionStart hook does beyond its fast path: pull, then re-render the
    projects whose memory folders hold a commons file that may no longer be there (which
    removes it, and its line in MEMORY.md). A render already running is left to do it."""

    import time

    started = time.monotonic()
    out: dict = {"pull": None, "rendered": [], "removed": [], "busy": None}
    if pull_first:
        try:
            pulled = pull(store, link or open_link(store.config), now, max_pages=max_pages)
            out["pull"] = f"{pulled['received']} new, {pulled['status_changed']} changed, {pulled['revoked']} revoked"
        except (NodeUnavailable, NodeError) as exc:
            out["pull"] = f"the node did not answer ({exc})"
    out["pull_seconds"] = round(time.monotonic() - started, 3)
    folders = memory_folders(store)
    for folder in stale_rendered(store):
        cwd = folders.get(folder)
        if cwd is None:  # a folder given with --memory-dir: its next render
            continue
        try:
            result = render(store, now, project=cwd)
        except SleepBusy as exc:
            out["busy"] = str(exc)
            break
        out["rendered"].append(cwd)
        out["removed"] += [path for target in result.targets for path in target["removed"]]
    out["seconds"] = round(time.monotonic() - started, 3)
    return out
