"""The commons form by allow-list (openmemory_local.text.redact.commons_scrub), as a pure function.

The held-out project here is SYNTHETIC: the organisation "vantorq-robotics", its project
"skyhaul", the user "mkowalczyk" (Marta Kowalczyk), the mail host "vantorq.io", the database role
"billing_rw", the customers "Halvorsen Shipping" and "Orange Logistics", internal hosts and a
Kubernetes namespace are invented for this test. The lines are shaped as the tools print them
(git, psql, kubectl, docker, npm, pip, cargo, mix, python). None of these strings is in any
identity list that :func:`scrub` replaces by name: only the allow-list stands between them and
the commons. The same lines are also scrubbed with the identity publish would gather on that
machine (user, host, project folder), as the lead's code calls it.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from openmemory_local.text.redact import (COMMONS_PARTS, PLACEHOLDERS, Identity, commons_scrub, gate,
                                     project_names)
from openmemory_protocol.claims import Claim, check_claim
from openmemory_protocol.observation import is_observation

HOME = "/home/mkowalczyk"
ROOT = f"{HOME}/src/skyhaul"
#: The identity publish gathers on the synthetic machine.
MACHINE = Identity(users=("mkowalczyk",), hosts=("mk-thinkpad",), homes=(HOME,), projects=(ROOT,),
                   names=project_names([ROOT], None, ["mkowalczyk"]), branches=("mk/HAL-812-invoices",),
                   remotes=("git@github.com:vantorq-robotics/skyhaul.git",), emails=("marta@vantorq.io",))
#: Nothing known: the allow-list alone.
NOTHING = Identity()

#: Every string that must never leave (case-insensitive, also inside a word).
SENSITIVE = ["vantorq", "skyhaul", "mkowalczyk", "kowalczyk", "marta", "billing_rw", "halvorsen",
             "orange logistics", "pg-primary", "ci-runner-7", "hal-812", "mk-thinkpad", "thinkpad",
             "fleetbridge", "nordlys"]

#: (part, line as the tool prints it, words that must survive it): SYNTHETIC.
LINES = [
    ("failure", "fatal: The current branch mk/HAL-812-invoices has no upstream branch.",
     ["fatal:", "The", "current", "branch", "has", "no", "upstream"]),
    ("command", "git push --set-upstream origin mk/HAL-812-invoices", ["git", "push", "--set-upstream", "origin"]),
    ("failure", "remote: Permission to vantorq-robotics/skyhaul.git denied to mkowalczyk.",
     ["remote:", "Permission", "denied"]),
    ("failure", "fatal: unable to access 'https://github.com/vantorq-robotics/fleetbridge-api/': The requested "
                "URL returned error: 403", ["https://github.com/", "unable", "access", "URL", "returned", "error:"]),
    ("failure", "ERROR: Repository not found. git@github.com:vantorq-robotics/skyhaul-firmware.git",
     ["ERROR:", "Repository", "not", "found."]),
    ("failure", 'psql: error: connection to server at "pg-primary-03.vantorq.internal" (10.4.2.17), port 5432 '
                'failed: FATAL: password authentication failed for user "billing_rw"',
     ["psql:", "connection", "server", "FATAL:", "password", "authentication", "failed", "user"]),
    ("failure", 'FATAL: role "billing_rw" does not exist', ["FATAL:", "role", "does", "not", "exist"]),
    ("failure", 'ERROR: permission denied for table halvorsen_shipments', ["ERROR:", "permission", "denied", "table"]),
    ("failure", 'Error from server (Forbidden): pods is forbidden: User "marta.kowalczyk@vantorq.io" cannot list '
                'resource "pods" in API group "" in the namespace "skyhaul-prod"',
     ["Error", "(Forbidden):", "pods", "forbidden:", "User", "cannot", "list", "namespace"]),
    ("command", "kubectl -n skyhaul-prod rollout restart deployment/fleetbridge-worker",
     ["kubectl", "-n", "rollout", "restart", "deployment/"]),
    ("failure", "Error response from daemon: pull access denied for ghcr.io/vantorq-robotics/skyhaul-api, "
                "repository does not exist or may require 'docker login'",
     ["Error", "response", "daemon:", "pull", "access", "denied", "ghcr.io/", "docker", "login"]),
    ("failure", "npm ERR! 404 Not Found - GET https://registry.npmjs.org/@vantorq%2fnordlys-ui - Not found",
     ["npm", "ERR!", "Not", "Found", "GET", "https://registry.npmjs.org/"]),
    ("failure", "ModuleNotFoundError: No module named 'vantorq_billing'", ["ModuleNotFoundError:", "No", "module", "named"]),
    ("failure", "ERROR: Could not find a version that satisfies the requirement skyhaul-sdk==2.3.1",
     ["ERROR:", "Could", "not", "find", "version", "satisfies", "requirement"]),
    ("failure", "error[E0425]: cannot find value `halvorsen_rate` in this scope",
     ["error[E0425]:", "cannot", "find", "value", "scope"]),
    ("failure", "error: failed to select a version for the requirement `nordlys-telemetry = \"^0.4\"`",
     ["error:", "failed", "select", "version", "requirement"]),
    ("failure", "** (UndefinedFunctionError) function Skyhaul.Billing.Invoice.for_customer/2 is undefined or private",
     ["(UndefinedFunctionError)", "function", "undefined", "private"]),
    ("failure", "** (Postgrex.Error) FATAL 3D000 (invalid_catalog_name) database \"skyhaul_dev\" does not exist",
     ["(Postgrex.Error)", "FATAL", "(invalid_catalog_name)", "database", "does", "not", "exist"]),
    ("failure", "ssh: Could not resolve hostname ci-runner-7: Name or service not known",
     ["ssh:", "Could", "not", "resolve", "hostname", "Name", "service", "known"]),
    ("failure", "ssh: connect to host mk-thinkpad.local port 22: Connection refused",
     ["ssh:", "connect", "host", "port", "Connection", "refused"]),
    ("failure", "curl: (6) Could not resolve host: grafana.ops.vantorq.io", ["curl:", "Could", "not", "resolve", "host:"]),
    ("failure", "AssertionError: invoice total for Halvorsen Shipping was 1200, expected 1250; Orange Logistics "
                "unchanged", ["AssertionError:", "invoice", "total", "expected", "unchanged"]),
    ("failure", "An error occurred (NoSuchBucket) when calling the ListObjectsV2 operation: The specified bucket "
                "does not exist: vantorq-skyhaul-backups", ["error", "occurred", "(NoSuchBucket)", "bucket"]),
    ("failure", "java.lang.ClassNotFoundException: io.vantorq.skyhaul.FleetBridgeClient",
     ["java.lang.ClassNotFoundException:"]),
    ("failure", "Traceback (most recent call last): File \"skyhaul/billing/halvorsen.py\", line 12, in <module>",
     ["Traceback", "(most", "recent", "call", "last):", "File", "line", "<module>"]),
    ("command", "python -m pytest tests/test_halvorsen_invoices.py -k nordlys", ["python", "-m", "pytest", "tests/", ".py"]),
    ("command", "mix test test/skyhaul_web/controllers/invoice_controller_test.exs",
     ["mix", "test", "test/", "/controllers/", ".exs"]),
    ("command", "docker run --rm ghcr.io/vantorq-robotics/skyhaul-api:1.4.2", ["docker", "run", "--rm", "ghcr.io/"]),
    ("command", "psql -U billing_rw -h pg-primary-03.vantorq.internal skyhaul_production", ["psql", "-U", "-h"]),
    ("path", "lib/skyhaul_web/controllers/halvorsen_controller.ex", ["lib/", "/controllers/", ".ex"]),
    ("path", "apps/nordlys/src/components/FleetMap.tsx", ["apps/", "/src/components/", ".tsx"]),
    ("situation", "mix ecto.migrate", ["mix", "ecto.migrate"]),
    ("situation", "kubectl apply", ["kubectl", "apply"]),
]


def _leaks(text: str) -> list[str]:
    lowered = text.lower()
    return [s for s in SENSITIVE if s in lowered]


def test_the_synthetic_lines_carry_what_must_not_leave():
    """The test's own fixture: every sensitive string is in some line (a typo would hide a leak)."""
    joined = " ".join(line for _, line, _ in LINES).lower()
    assert [s for s in SENSITIVE if s not in joined] == []


@pytest.mark.parametrize("ident", [MACHINE, NOTHING], ids=["machine-identity", "no-identity"])
@pytest.mark.parametrize("part, line, kept", LINES)
def test_no_identifying_string_survives_and_the_useful_words_do(ident, part, line, kept):
    out, findings = commons_scrub(line, ident, part)
    assert _leaks(out) == [], out
    for word in kept:
        assert word in out, (word, out)
    # the findings say what was replaced, never the replaced text
    if _leaks(line):  # a volatile token (<id>, <num>) may have taken it already; it names nobody
        assert findings or re.search(r"<(?:id|num|hash|time)>", out), out
    assert _leaks(" ".join(str(f) for f in findings)) == [], findings
    assert {f.kind for f in findings} <= {"secret", "email", "ip", "host", "remote", "home", "path", "name", "user"}


@pytest.mark.parametrize("part, line, kept", LINES)
def test_every_part_of_every_line_leaks_nothing(part, line, kept):
    """Any line scrubbed as any part: the allow-list holds whatever the caller says it is."""
    for other in COMMONS_PARTS:
        out, _ = commons_scrub(line, NOTHING, other)
        assert _leaks(out) == [], (other, out)


@pytest.mark.parametrize("part, line, kept", LINES)
def test_the_gate_finds_nothing_left_after_commons_scrub(part, line, kept):
    out, _ = commons_scrub(line, MACHINE, part)
    assert gate(out, MACHINE) == [], out


@pytest.mark.parametrize("line, expected", [
    # public programs, tools, hosts and the error vocabulary stay whole
    ("fatal: The current branch main has no upstream branch.", "fatal: The current branch main has no upstream branch."),
    ("! [rejected] main -> main (non-fast-forward)", "! [rejected] main -> main (non-fast-forward)"),
    ("ModuleNotFoundError: No module named 'requests'", "ModuleNotFoundError: No module named 'requests'"),
    ("Could not resolve host: github.com", "Could not resolve host: github.com"),
    ("ENOENT: no such file or directory, open 'package.json'", "ENOENT: no such file or directory, open 'package.json'"),
    # a capitalised English word is a sentence's first word at a clause start, a name elsewhere
    ("Orange juice is out", "Orange juice is out"),
    ("invoice for Orange failed", "invoice for <name> failed"),
    ("error: Orange", "error: Orange"),
    ("invoice customer=Orange failed", "invoice customer=<name> failed"),
    ("<tool_use_error>Sibling tool call errored</tool_use_error>",
     "<tool_use_error>Sibling tool call errored</tool_use_error>"),
    # upper case: the error vocabulary and acronyms stay, a shouted English word is a name
    ("ERROR: JSON body rejected by ACME", "ERROR: JSON body rejected by <name>"),
    # identifiers with separators or camel case are names unless allowed whole
    ("table acme_billing missing", "table <name> missing"),
    ("AcmeBilling.Repo is not loaded", "<name>.Repo is not loaded"),
    ("acme-corp refused", "<name> refused"),
    ("node_modules is missing", "node_modules is missing"),
    # a host is a host: public ones stay, others are <host>
    ("GET https://pypi.org/simple/ failed", "GET https://pypi.org/simple/ failed"),
    ("GET https://api.brightwave.io/api/status failed", "GET https://<host>/api/status failed"),
    ("upload to files.brightwave.io failed", "upload to <host> failed"),
    # file names keep their extension, module paths their allowed parts
    ("cannot read halvorsen_rates.csv", "cannot read <name>.csv"),
    ("python3: can't open file 'manage.py'", "python3: can't open file 'manage.py'"),
    # what the shape says is a name, even when its words are English (SYNTHETIC names)
    ("remote: Permission to orange/warehouse.git denied", "remote: Permission to <name>/<name>.git denied"),
    ("fatal: unable to access https://github.com/orange/warehouse/: 403",
     "fatal: unable to access https://github.com/<name>/<name>/: <num>"),
    ("denied: ghcr.io/orange/warehouse:latest", "denied: ghcr.io/<name>/<name>:latest"),
    ("ssh: connect to deploy@buildbox failed", "ssh: connect to <name>@<host> failed"),
    ('psql: FATAL: role "reporting" does not exist', 'psql: FATAL: role "<name>" does not exist'),
    ('Error from server (NotFound): namespaces "payments" not found',
     'Error from server (NotFound): namespaces "<name>" not found'),
    ('psql: FATAL: password authentication failed for user "postgres"',
     'psql: FATAL: password authentication failed for user "postgres"'),
    # a word with digits stays when its letters are a listed tool's, not any English word's
    ("error: acme2 down, python3 and sha256 fine", "error: <name> down, python3 and sha256 fine"),
    # contractions, inflections, prefixes
    ("The user doesn't want to proceed: unterminated string", "The user doesn't want to proceed: unterminated string"),
    ("invoice for Halvorsen's ledger", "invoice for <name> ledger"),
])
def test_the_allow_list_rule(line, expected):
    assert commons_scrub(line, NOTHING, "failure")[0] == expected


@pytest.mark.parametrize("line, expected", [
    ("git push --set-upstream origin main", "git push --set-upstream origin main"),
    ("git push --force-with-lease", "git push --force-with-lease"),
    ("skyhaul-cli --vantorq-mode=fast deploy", "<name> --<name>=fast deploy"),
    ("npm install --save-dev jest", "npm install --save-dev jest"),
    ("cargo build --release", "cargo build --release"),
])
def test_commands_keep_programs_and_flags_whose_parts_are_allowed(line, expected):
    assert commons_scrub(line, NOTHING, "command")[0] == expected


def test_an_unknown_part_is_a_clear_error_and_empty_text_is_empty():
    with pytest.raises(ValueError, match="unknown part"):
        commons_scrub("fatal: x", NOTHING, "prose")
    assert commons_scrub("", NOTHING, "failure") == ("", [])
    with pytest.raises(TypeError, match="str"):
        commons_scrub(b"fatal: x", NOTHING, "failure")


def test_secrets_are_reported_without_their_value():
    token = "ghp_" + "R4nd0mT0k3nV4lu3F0rT3st1ngOnly012345"  # SYNTHETIC
    out, findings = commons_scrub(f"fatal: Authentication failed for token {token}", NOTHING, "failure")
    assert "<secret>" in out and token not in out
    assert [f.kind for f in findings] == ["secret"]
    assert token[4:10] not in str(findings[0])


def test_the_name_placeholder_passes_the_observation_rule_and_the_claim_checks():
    assert "<name>" in PLACEHOLDERS
    for placeholder in PLACEHOLDERS:
        assert is_observation(f'`psql` failed: "FATAL: role {placeholder} does not exist."'), placeholder
    situation, _ = commons_scrub("psql -U billing_rw", NOTHING, "situation")
    failure, _ = commons_scrub('FATAL: role "billing_rw" does not exist', NOTHING, "failure")
    fix, _ = commons_scrub("createuser billing_rw", NOTHING, "command")
    claim = check_claim(Claim(situation="psql", failure=failure.replace('"', "'"), fix=fix, fix_how="after"))
    assert "<name>" in claim.failure and "<name>" in claim.fix
    assert is_observation(claim.text)
    assert "billing" not in situation


def _corpus_module():
    path = Path(__file__).parent / "data" / "redaction" / "make_corpus.py"
    spec = importlib.util.spec_from_file_location("make_corpus", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_redaction_corpus_leaks_nothing_without_an_identity():
    """The older SYNTHETIC corpus (tests/loop/data/redaction): its secrets, hosts and names are
    replaced even when nothing says whose machine it is ("/home" aside: a path placeholder)."""
    corpus = _corpus_module()
    sensitive = [s for s in corpus.SENSITIVE if s != "/home"]
    for command, output, _ in corpus.FAILURES:
        for part, text in (("command", command), ("failure", output)):
            out, _ = commons_scrub(text, NOTHING, part)
            lowered = out.lower()
            assert [s for s in sensitive if s.lower() in lowered] == [], (part, out)
            assert not re.search(r"(?<![<\w])acme", lowered), out


# --- invented names in every shape (SYNTHETIC, generated) -----------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_CONSONANTS, _VOWELS = "bcdfgklmnprstvz", "aeiou"


def _invented(draw_syllables: list[tuple[str, str]]) -> str:
    return "".join(c + v for c, v in draw_syllables)


_SYLLABLES = st.lists(st.tuples(st.sampled_from(_CONSONANTS), st.sampled_from(_VOWELS)), min_size=3, max_size=5)
_NAMES = st.builds(_invented, _SYLLABLES).filter(lambda w: commons_scrub(w, NOTHING, "failure")[0] == "<name>")

#: Shapes a name takes in tool output; {a} and {b} are two invented names.
SHAPES = [
    "fatal: repository 'https://github.com/{a}/{b}/' not found",
    "ERROR: permission denied for table {a}_{b}",
    "Could not resolve host: {a}.{b}.io",
    "ssh: connect to host {a}-{b}.internal port 22: Connection refused",
    "** (UndefinedFunctionError) function {A}{B}.Repo.all/0 is undefined",
    "ModuleNotFoundError: No module named '{a}.{b}'",
    "npm ERR! 404 '@{a}/{b}' is not in this registry",
    "FATAL: role \"{a}\" does not exist; customer {A} {B} has no account",
    "Error: {A} failed for {B}",
    "kubectl -n {a}-prod get pods {b}-api-0",
    "mail to {a}@{b}.com bounced",
    "{A}Error: {b} refused",
    "error: cannot find value `{a}_{b}` in this scope",
    "{a}/{b}/lib/{a}.ex:12: undefined",
    "docker: Error response from daemon: pull access denied for {a}/{b}, repository does not exist",
    "warning: {A_UP}_{B_UP}_TOKEN is not set",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(a=_NAMES, b=_NAMES, shape=st.sampled_from(SHAPES), part=st.sampled_from(COMMONS_PARTS))
def test_an_invented_name_never_survives_in_any_shape(a, b, shape, part):
    line = shape.format(a=a, b=b, A=a.capitalize(), B=b.capitalize(), A_UP=a.upper(), B_UP=b.upper())
    out, findings = commons_scrub(line, NOTHING, part)
    lowered = out.lower()
    assert a not in lowered and b not in lowered, (line, out)
    assert findings


def test_a_situation_of_public_programs_is_a_claim_and_a_projects_own_program_is_not():
    """Program heads of public tools pass through whole and make a valid claim; a program of
    the project's own (``skyhaul-cli``, SYNTHETIC) becomes <name>, which the claim's shape (C2:
    a head is words of letters, digits and ._+:@=/-) refuses: such a lesson says nothing to a
    stranger, and it stays home."""
    for heads in ("git push", "pytest", "mix ecto.migrate", "cd && npm test", "kubectl apply",
                  "docker compose up", "cargo build"):
        situation, findings = commons_scrub(heads, NOTHING, "situation")
        assert (situation, findings) == (heads, [])
        check_claim(Claim(situation=situation, failure="error: something failed"))
    situation, _ = commons_scrub("skyhaul-cli deploy", NOTHING, "situation")
    assert situation == "<name> deploy"
    with pytest.raises(ValueError, match="program head"):
        check_claim(Claim(situation=situation, failure="error: something failed"))


def test_a_long_or_odd_text_is_scrubbed_whole():
    """Bad input is scrubbed, not a crash: a 200 KB line of names, separators and quotes; control
    and invisible characters, another script, runs of marks (SYNTHETIC)."""
    line = " ".join(f"Halvorsen_{i} orange-{i} 'Vantorq' fatal: git push --x-{i}" for i in range(4000))
    out, findings = commons_scrub(line, NOTHING, "failure")
    assert "halvorsen" not in out.lower() and "vantorq" not in out.lower()
    assert out.count("fatal: git push") == 4000 and len(findings) >= 8000
    odd = ("fatal:\x00 Vant\u200borq \u041c\u043e\u0441\u043a\u0432\u0430 -- --- ''' \"\" __ .. @ @@ <name> "
           "<<x>> \u2028 end")
    out, _ = commons_scrub(odd, NOTHING, "failure")
    assert "vantorq" not in out.lower() and "\u041c" not in out and "\u200b" not in out


def test_every_allow_list_names_its_source():
    folder = Path(__file__).resolve().parents[2] / "openmemory_local" / "data" / "commons-allow"
    lists = sorted(folder.glob("*.txt"))
    assert {p.stem for p in lists} >= {"programs", "packages", "packages-registries", "errors", "errors-python",
                                       "hosts", "files", "paths", "words"}
    for path in lists:
        header = "".join(line for line in path.read_text().splitlines() if line.startswith("#"))
        assert "Source:" in header or "Derived" in header, path.name
