"""Write the derived lists of the commons form's allow-list (openmemory_local/data/commons-allow).

The hand-written lists there (programs.txt, hosts.txt, files.txt, paths.txt, words.txt,
errors.txt, packages.txt) are edited by hand; this script writes the two derived ones, from
local sources only (no registry is asked):

- ``errors-python.txt``: the exception and warning names of Python's ``builtins``, the errno
  names (``errno.errorcode``), the signal names (``signal.Signals``) and the words of the HTTP
  status phrases (``http.HTTPStatus``), from the Python that runs this script (3.11).
- ``packages-registries.txt``: package names from the registry lists of this workplace
  (``/work/.library/env/packages``: ``pypi.tsv``'s 5,000 most downloaded, ``npm.tsv``'s 5,000
  most downloaded a month, and every name of the ``installed-*.txt`` lists of machine images).
  Names are lower-cased; only names of ``[a-z0-9._-]`` (and npm scopes) of 2 to 40 characters.

Run ``python spec/generate_commons_allow.py [PACKAGES_DIR]``; the output is committed, so the
package installs and tests read files, never these sources.
"""

from __future__ import annotations

import builtins
import csv
import errno
import http
import re
import signal
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "openmemory_local" / "data" / "commons-allow"
PACKAGES = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/work/.library/env/packages")
TOP = 5000
_NAME = re.compile(r"^(?:@[a-z0-9._-]+/)?[a-z0-9][a-z0-9._-]{1,39}$")


def python_errors() -> list[str]:
    names = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
    names |= set(errno.errorcode.values())
    names |= {s.name for s in signal.Signals}
    for status in http.HTTPStatus:
        names.update(re.findall(r"[A-Za-z][A-Za-z-]*", status.phrase))
    return sorted(names)


def registry_packages() -> list[str]:
    names: set[str] = set()
    csv.field_size_limit(1 << 24)
    pypi = PACKAGES / "pypi.tsv"
    if pypi.exists():
        with pypi.open(encoding="utf-8", errors="replace") as f:
            rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            next(rows)
            ranked = [(int(r[3]), r[0]) for r in rows if len(r) > 3 and r[3].isdigit()]
        names.update(n.lower() for _, n in sorted(ranked)[:TOP])
    npm = PACKAGES / "npm.tsv"
    if npm.exists():
        with npm.open(encoding="utf-8", errors="replace") as f:
            rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            next(rows)
            counted = [(-int(r[2]), r[0]) for r in rows if len(r) > 2 and r[2].isdigit()]
        names.update(n.lower() for _, n in sorted(counted)[:TOP])
    for listing in sorted(PACKAGES.glob("installed-*.txt")):
        for line in listing.read_text(encoding="utf-8", errors="replace").splitlines():
            fields = line.split("\t")
            if len(fields) >= 2 and not line.startswith("#"):
                names.add(fields[1].strip().lower())
    return sorted(n for n in names if _NAME.match(n))


def main() -> None:
    errors = python_errors()
    (OUT / "errors-python.txt").write_text(
        "# Python's error vocabulary: exception and warning names of builtins, errno names, signal\n"
        "# names and the words of HTTP status phrases. Derived from the Python 3.11 standard library\n"
        "# by spec/generate_commons_allow.py; do not edit.\n"
        f"# {len(errors)} words.\n" + "\n".join(errors) + "\n", encoding="utf-8")
    packages = registry_packages()
    (OUT / "packages-registries.txt").write_text(
        "# Well-known packages: PyPI's 5,000 most downloaded (rank column of pypi.tsv), npm's 5,000\n"
        "# most downloaded a month (npm.tsv), and the package names of this workplace's machine\n"
        "# images (installed-*.txt); all from the local lists in /work/.library/env/packages, made\n"
        "# on 2026-12-01, no registry asked. Derived by spec/generate_commons_allow.py; do not edit.\n"
        f"# {len(packages)} names.\n" + "\n".join(packages) + "\n", encoding="utf-8")
    print(f"errors-python.txt: {len(errors)}; packages-registries.txt: {len(packages)}")


if __name__ == "__main__":
    main()
