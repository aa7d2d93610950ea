"""Domains: the ecosystems a lesson is about, derived from its claim (pure).

A claim's situation names the programs that ran (its heads: ``git push``, ``cd && npm test``).
Each program belongs to at most one ecosystem (:data:`ECOSYSTEMS`: the program, the language,
its package manager); a claim's domains are the ecosystems of its heads, or ``general`` when
none is known (a tool claim, ``Read``; a program of no listed ecosystem). Shell built-ins and
wrappers (``cd``, ``env``, ``sudo``, ``time``...) say nothing and are skipped.

The same table gives the domains of a project, from the programs its sessions run
(:func:`domains_of_programs`): a node follows the domains its agent's projects touch, plus
``general``. The gossip topic of a record in a domain is :func:`domain_topic`.

Status (issue 33, item 3): this module, its tests, the scale figures
(``simulations/domains_des.py``) and per-domain rendezvous namespaces on the node
(``[discovery] domains``) exist; the node does not yet subscribe by domain nor filter sync by
domain (every node still takes every topic), and the engine does not yet pass its domains.
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
    """``/openmemory/1/<type>/<domain>``: the topic of a record of that domain (planned; the
    node publishes on ``/openmemory/1/<type>`` today)."""
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r} (known: {', '.join(DOMAINS)})")
    return f"/openmemory/1/{record_type}/{domain}"
