"""Which received lessons a project's memory folder shows: the trust boundary's rule
(:mod:`openmemory_local.storage.trust_boundary`, as SQL) applied, then the lessons that fit the project
(its programs, languages and paths: :class:`Profile`), one per claim group, best first.
:class:`Chooser` is what the renderer asks; ``openmemory commons`` and the page show the same.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from openmemory_local.commons.receive import EXTENSIONS, received_rows
from openmemory_local.storage.episodes import session_profiles
from openmemory_local.storage.trust_boundary import eligible_sql
from openmemory_local.core.jsonio import loads
from openmemory_local.sleep.lessons import project_families
from openmemory_local.text.embed import embed
from openmemory_local.text.normalize import family


@dataclass
class Profile:
    """What a project family's sessions do."""

    heads: set[str] = field(default_factory=set)
    programs: set[str] = field(default_factory=set)
    tools: set[str] = field(default_factory=set)
    languages: set[str] = field(default_factory=set)
    sessions: int = 0


def _extension_language(path: str) -> str | None:
    name = path.rsplit("/", 1)[-1]
    stem, dot, ext = name.rpartition(".")
    return EXTENSIONS.get(ext.lower()) if dot and stem else None


def project_profiles(store) -> dict[str, Profile]:
    """Project family -> its :class:`Profile`, from every session episode in the store."""
    out: dict[str, Profile] = defaultdict(Profile)
    for cwd, branch, commands, tools, edited, read in session_profiles(store):
        profile = out[family(cwd, branch)]
        profile.sessions += 1
        for head in loads(commands, {}) or {}:
            profile.heads.add(head)
            profile.programs.add(head.split()[0])
        profile.tools.update(loads(tools, {}) or {})
        for path in (loads(edited, []) or []) + (loads(read, []) or []):
            language = _extension_language(str(path))
            if language:
                profile.languages.add(language)
    return dict(out)


def relevance(terms: dict, profile: Profile | None) -> tuple[float, list[str]]:
    """How much of what a lesson names a family's sessions do: (score, reasons)."""
    if profile is None:
        return 0.0, []
    score, why = 0.0, []
    for head in terms.get("heads") or []:
        program = head.split()[0]
        if head in profile.heads:
            score += 1.0
            why.append(f"`{head}` runs in this project")
        elif program in profile.programs:
            score += 0.5
            why.append(f"`{program}` runs in this project")
    for tool in terms.get("tools") or []:
        if tool in profile.tools:
            score += 0.5
            why.append(f"`{tool}` is used in this project")
    for language in terms.get("languages") or []:
        if language in profile.languages:
            score += 0.25
            why.append(f"its files are {language}")
    return score, list(dict.fromkeys(why))


def _merged(profiles: dict[str, Profile], families: set[str]) -> Profile | None:
    found = [profiles[f] for f in families if f in profiles]
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    out = Profile()
    for p in found:
        out.heads |= p.heads
        out.programs |= p.programs
        out.tools |= p.tools
        out.languages |= p.languages
        out.sessions += p.sessions
    return out


def _eligible(config, table: str = "") -> tuple[str, list]:
    """The SQL condition of a received lesson that may be rendered (``table``: a prefix): the
    trust boundary (:mod:`openmemory_local.storage.trust_boundary`)."""
    return eligible_sql(config.commons_candidates, table, config.commons_team_candidates)


def _one_per_group(rows: list[dict]) -> list[dict]:
    """The same observation from several authors is one lesson: its earliest member shown."""
    best: dict[str, dict] = {}
    for row in rows:
        key = row["group_head"] or row["record_id"]
        held = best.get(key)
        if held is None or (row["created"], row["record_id"]) < (held["created"], held["record_id"]):
            best[key] = row
    return list(best.values())


class Chooser:
    """Chooses the received lessons of each project (see the module docstring); what it reads
    from the store (the families' profiles, the lessons that may be rendered) is read once."""

    def __init__(self, store):
        self.store = store
        self._profiles: dict[str, Profile] | None = None
        self._pool: list[dict] | None = None

    @property
    def profiles(self) -> dict[str, Profile]:
        if self._profiles is None:
            self._profiles = project_profiles(self.store)
        return self._profiles

    @property
    def pool(self) -> list[dict]:
        if self._pool is None:
            where, params = _eligible(self.store.config)
            self._pool = _one_per_group(received_rows(self.store, where, params))
        return self._pool

    def for_families(self, families: set[str], limit: int | None = None) -> list[dict]:
        """The lessons that reach a project of these families, best first, each with
        ``relevance`` and ``why``."""
        config = self.store.config
        limit = config.commons_max_lessons if limit is None else limit
        if limit <= 0 or not config.commons_receive or not self.pool:
            return []  # with [commons] receive = false the layer is off: what it rendered leaves too
        profile = _merged(self.profiles, families)
        if profile is None:
            return []
        chosen = []
        for row in self.pool:
            score, why = relevance(row["terms"], profile)
            if score >= config.commons_min_relevance:
                chosen.append(dict(row, relevance=round(score, 3), why=why))
        chosen.sort(key=lambda r: (r["status"] != "common", -r["relevance"], -r["confirmers"], -r["created"],
                                   r["record_id"]))
        return chosen[:limit]


def select_for(store, families: set[str], limit: int | None = None) -> list[dict]:
    """The received lessons that reach a project of these families (:class:`Chooser`)."""
    return Chooser(store).for_families(families, limit)


def for_project(store, path: str) -> list[dict]:
    """The received lessons rendered for the project at ``path`` (a working directory)."""
    path = str(path).rstrip("/") or "/"
    families = project_families(store).get(path) or {family(path)}
    return select_for(store, families)


def recall_commons(store, query: str, k: int = 3, threshold: float = 0.35) -> list[dict]:
    """Received lessons (common, or candidates when rendered) whose text resembles
    ``query``, best first: each with ``similarity``."""
    import numpy as np

    where, params = _eligible(store.config)
    rows = _one_per_group(received_rows(store, where, params))
    if not rows or k <= 0:
        return []
    q = embed(query)
    scored = []
    for row in rows:
        sim = float(np.dot(q, embed(row["text"])))
        if sim >= threshold:
            row["similarity"] = round(sim, 4)
            scored.append(row)
    scored.sort(key=lambda r: (r["status"] != "common", -r["similarity"], r["record_id"]))
    return scored[:k]
