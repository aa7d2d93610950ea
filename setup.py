"""Build the native modules that the policy keeps (every ``*.c`` beside the Python modules).

Native code is kept only where a benchmark shows it matters on a path a person waits for
(docs/performance.md, "Native code"); today that is one module, recall's column pass
(``openmemory_local/recall/_columns_c.c``). Each is optional: without a C compiler the install goes on
and the Python code, THE implementation, runs instead. Each module records the SHA-256 of its
source and of the Python files it mirrors (named in the ``.c`` file: ``openmemory: mirrors``);
``openmemory_protocol.native`` refuses a build whose source or mirrored Python differ from the
installed ones.
"""

import glob
import hashlib
import importlib.util
import os

from setuptools import Extension, setup


def _native_rules():
    """openmemory_protocol/native.py, loaded by path (the package is not installed yet): the one
    implementation of the digest the loader compares."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "openmemory_protocol", "native.py")
    spec = importlib.util.spec_from_file_location("_openmemory_native_rules", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _extensions() -> list[Extension]:
    rules = _native_rules()
    extensions = []
    for source in sorted(glob.glob("openmemory_*/**/*.c", recursive=True)):
        with open(source, "rb") as f:
            data = f.read()
        names = rules.mirrored_names(data)
        if not names:
            raise SystemExit(f"{source} names no Python it mirrors (a comment 'openmemory: mirrors NAME.py')")
        mirrors = rules.mirrors_digest(rules.Path(os.path.dirname(source)), names)
        extensions.append(Extension(
            source[:-2].replace("/", "."), [source], optional=True,
            define_macros=[("SOURCE_SHA256", f'"{hashlib.sha256(data).hexdigest()}"'),
                           ("MIRRORS", f'"{",".join(names)}"'), ("MIRRORS_SHA256", f'"{mirrors}"')],
            extra_compile_args=["-O2"]))
    return extensions


setup(ext_modules=_extensions())
