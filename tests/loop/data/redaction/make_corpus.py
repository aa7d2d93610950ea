"""Write the redaction corpus: SYNTHETIC Claude Code transcripts whose failures carry secrets.

Everything here is invented for the tests (tests/loop/test_publish_redaction.py): the user
"dana", the host "dana-thinkpad", the company "acme", every token, key, password, address
and URL. No value is real; the key-shaped ones follow the public formats of each service
(the AWS one is AWS's own documented example) so that the redaction must recognise them.

Three sessions of one project (/home/dana/work/acme-billing), on three branches, each
meeting the same failures, so that each failure is a lesson strong enough to publish
(three sessions: strength 2.0). Run ``python tests/loop/data/redaction/make_corpus.py``
to rewrite the files; the test checks that the committed files are what this writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.local.transcripts import T  # noqa: E402

CWD = "/home/dana/work/acme-billing"
BRANCHES = ["dana/invoice-rounding", "dana/fix-ledger-2291", "feature/ACME-4412-tax"]
SESSIONS = ["da1a5e55-0000-4000-8000-00000000d001", "da2a5e55-0000-4000-8000-00000000d002",
            "da3a5e55-0000-4000-8000-00000000d003"]
DAYS = ["2026-02-16", "2026-02-17", "2026-02-18"]
GH_TOKEN = "ghp_R4nd0mT0k3nV4lu3F0rT3st1ngOnly012345"
NPM_TOKEN = "npm_SyntheticT0kenValue1234567890abcdEF"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJkYW5hIiwiaG9zdCI6ImRhbmEtdGhpbmtwYWQifQ"
       ".c2lnbmF0dXJlLXN5bnRoZXRpYy1vbmx5")
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
DB_PASSWORD = "S3cr3tPassw0rd"

#: Every string that must never reach a record (checked case-insensitively).
SENSITIVE = [
    "dana", "thinkpad", "acme", "acme-billing", "kowalski", "/home", "invoice-rounding", "fix-ledger-2291",
    "ACME-4412", GH_TOKEN, GH_TOKEN[:12], NPM_TOKEN, NPM_TOKEN[:12], JWT[:20], AWS_KEY, DB_PASSWORD, "hunter2",
    "9fKq2LmX7vR4sT8w", "10.20.30.40", "10.0.4.17", "acme-internal", "acme-corp", "db.acme", "b3BlbnNzaC1rZXkt",
    "BEGIN OPENSSH", "@acme",
]

#: (command, output first lines, exit code): the failures every session meets.
FAILURES = [
    ("curl -s https://deploy:hunter2@build.acme-internal.corp/api/v2/status?token=9fKq2LmX7vR4sT8w",
     "curl: (6) Could not resolve host: build.acme-internal.corp", 6),
    ("git push", f"fatal: Authentication failed for 'https://dana:{GH_TOKEN}@github.com/acme/billing.git/'", 128),
    ("npm publish", f"npm ERR! 403 Forbidden - token {NPM_TOKEN} is not valid for dana.kowalski@acme-corp.example",
     1),
    ("aws s3 ls s3://acme-billing-prod",
     f"An error occurred (InvalidAccessKeyId) when calling the ListObjectsV2 operation: The AWS Access Key Id "
     f"{AWS_KEY} you provided does not exist in our records.", 254),
    ("ssh deploy@10.20.30.40 uptime", "ssh: connect to host 10.20.30.40 port 22: Connection refused", 255),
    ("python3 scripts/deploy.py",
     "Traceback (most recent call last):\n  File \"scripts/deploy.py\", line 3, in <module>\n"
     "PermissionError: [Errno 13] Permission denied: '/home/dana/work/acme-billing/secrets/prod.env'", 1),
    ("http GET https://api.acme-internal.corp/v1/me",
     f"HTTP/1.1 401 Unauthorized: token {JWT} expired", 4),
    ("ssh-add /home/dana/.ssh/id_ed25519",
     "Error loading key \"/home/dana/.ssh/id_ed25519\": invalid format -----BEGIN OPENSSH PRIVATE KEY----- "
     "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQ", 1),
    (f"psql postgres://admin:{DB_PASSWORD}@db.acme.internal:5432/billing -c 'select 1'",
     f"psql: error: connection to server at \"db.acme.internal\" (10.0.4.17), port 5432 failed: FATAL: "
     f"password authentication failed for user \"admin\" postgres://admin:{DB_PASSWORD}@db.acme.internal:5432/billing",
     2),
    ("mix test test/billing/invoice_test.exs",
     "** (DBConnection.ConnectionError) tcp connect (dana-thinkpad.local:5432): connection refused", 1),
    # Left for the gate: the project's name glued into a word, a host name with a digit.
    ("mix compile", "** (CompileError) lib/acmebillingapi/client.ex:12: module Acmebillingapi.Client is not loaded",
     1),
    ("ssh dana-thinkpad2 uptime", "ssh: Could not resolve hostname dana-thinkpad2: Name or service not known", 255),
]
#: What the gate must hold back (commands whose lessons it cannot clean).
HELD = ["mix compile", "ssh dana-thinkpad2 uptime"]
CORRECTION = ("no, the staging database is postgres://admin:S3cr3tPassw0rd@db.acme.internal:5432/billing, "
              "dana.kowalski@acme-corp.example knows the password")


def session(i: int) -> T:
    t = T(SESSIONS[i], CWD, start=f"{DAYS[i]}T10:00:00")
    t.person("Get the billing service deployed to staging.")
    for k, (command, output, code) in enumerate(FAILURES):
        t.bash(command, f"toolu_{i}{k:02d}synthetic", output, code)
    t.says("I will connect to the staging database with the local settings.")
    t.person(CORRECTION)
    t.says("Understood.")
    for record in t.records:
        record["gitBranch"] = BRANCHES[i]
    return t


def write(folder: Path = HERE) -> list[Path]:
    out = []
    for i in range(len(SESSIONS)):
        out.append(session(i).write(folder / f"synthetic-session-{i + 1}.jsonl"))
    return out


if __name__ == "__main__":
    for path in write():
        print(path)
    print(json.dumps({"sensitive": len(SENSITIVE), "failures": len(FAILURES)}))
