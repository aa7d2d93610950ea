"""Domains: the ecosystems a lesson is about, derived from its claim (pure).

A claim's situation names the programs that ran (its heads: ``git push``, ``cd && npm test``).
Each program belongs to at most one ecosystem (:data:`ECOSYSTEMS`: the program, the language,
its package manager); a claim's domains are the ecosystems of its heads, or ``general`` when
none is known (a tool claim, ``Read``; a program of no listed ecosystem). Shell built-ins and
wrappers (``cd``, ``env``, ``sudo``, ``time``...) say nothing and are skipped.

The same table gives the domains of a project, from the programs its sessions run
(:func:`domains_of_programs`): a node follows the domains its agent's projects touch, plus
``general``. The gossip topic of a record in a domain is :func:`domain_topic`.

On the node (``openmemory_node/follow.py``): a lesson is gossiped on the topic of each of its
domains (:func:`lesson_domains`), an attestation on its lesson's; revocations and vouches stay
on their type's one topic, which every node joins; sync reconciles lessons and attestations
per followed domain. The engine tells its node the domains of its own projects
(``PUT /v1/domains``, from the commands its sessions ran: :func:`domains_of_programs`).
"""

from __future__ import annotations

import re
from typing import Iterable

from .claims import Claim

GENERAL = "general"

_TABLE = {
    "git": "git gh git-lfs",
    "node": "node npm npx yarn pnpm bun deno tsc jest vitest eslint prettier vite webpack next",
    "python": "python python3 pip pip3 uv uvx pytest poetry pipenv conda ruff mypy tox black flake8 django-admin",
    "rust": "cargo rustc rustup clippy-driver",
    "go": "go gofmt golangci-lint",
    "containers": "docker docker-compose podman kubectl helm",
    "c": "make cmake gcc g++ clang clang++ ninja meson",
    "jvm": "mvn gradle java javac kotlinc sbt",
    "ruby": "ruby gem bundle rake rails rspec",
    "dotnet": "dotnet msbuild nuget",
    "terraform": "terraform tofu",
}

#: program -> ecosystem
ECOSYSTEMS: dict[str, str] = {p: eco for eco, progs in _TABLE.items() for p in progs.split()}

#: programs that only wrap or position another: skipped when finding a head's program
NEUTRAL = frozenset("cd env sudo time nice timeout exec xargs nohup command builtin".split())

DOMAINS = tuple(sorted(_TABLE)) + (GENERAL,)

_VERSIONED = re.compile(r"^(python|pip|node|ruby|java|go|gcc|g\+\+|clang)-?\d+(\.\d+)*$")


def program_of(word: str) -> str:
    """``/usr/bin/python3.11`` -> ``python3``-like name: the basename, a version suffix off."""
    name = word.rsplit("/", 1)[-1].lower()
    match = _VERSIONED.match(name)
    return match.group(1) if match else name


def ecosystem_of(head: str) -> str | None:
    """The ecosystem of one situation head (``npm test``, ``python -m pytest``), or None."""
    words = [w for w in head.split(" ") if w]
    for word in words:
        if "=" in word and not word.startswith("="):  # VAR=value before the program
            continue
        program = program_of(word)
        if program in NEUTRAL:
            continue
        return ECOSYSTEMS.get(program)
    return None


def domains_of(claim: Claim) -> tuple[str, ...]:
    """The claim's domains, sorted; ``("general",)`` when none is known."""
    found = {eco for head in claim.heads if (eco := ecosystem_of(head)) is not None}
    return tuple(sorted(found)) or (GENERAL,)


def lesson_domains(claim: Claim | None) -> tuple[str, ...]:
    """A lesson record's domains: its claim's (:func:`domains_of`); ``("general",)`` for a
    version 1 lesson (free text, no claim)."""
    return domains_of(claim) if claim is not None else (GENERAL,)


def check_domains(names: Iterable[str]) -> set[str]:
    """The names as a set of known domains; ValueError naming the unknown ones."""
    names = set(names)
    unknown = sorted(n for n in names if n not in DOMAINS)
    if unknown:
        raise ValueError(f"unknown domain(s) {', '.join(repr(n)[:40] for n in unknown[:5])} "
                         f"(known: {', '.join(DOMAINS)})")
    return names


def domains_of_programs(programs: Iterable[str]) -> set[str]:
    """The domains of a project from the commands (or programs) its sessions ran; always
    ``general`` too (what belongs to no ecosystem concerns everyone)."""
    out = {GENERAL}
    for command in programs:
        for head in command.split("&&"):
            eco = ecosystem_of(head.strip())
            if eco is not None:
                out.add(eco)
    return out


def domain_topic(record_type: str, domain: str) -> str:
    """``/openmemory/1/<type>/<domain>``: the gossip topic of a lesson or an attestation of
    that domain; ``general``'s is the type's own topic, ``/openmemory/1/<type>`` (the topic of
    every record of that type before domains: a peer that knows nothing of domains meets
    every node there). Revocations and vouches have only their type's topic."""
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r} (known: {', '.join(DOMAINS)})")
    if domain == GENERAL:
        return f"/openmemory/1/{record_type}"
    return f"/openmemory/1/{record_type}/{domain}"
