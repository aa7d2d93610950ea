"""Build the optional C accelerators (every ``*.c`` beside the Python modules of the packages).

Each is optional: without a C compiler the install goes on and the pure-Python code, which is
the reference, runs instead (slower). Installing the ``node`` extra needs gcc anyway (py-libp2p's
fastecdsa builds from source), so wherever a node runs, they are built. Each module carries the
SHA-256 of its source (``SOURCE_SHA256``): ``openmemory_protocol.native`` refuses a stale build.
"""

import glob
import hashlib

from setuptools import Extension, setup


def _extensions() -> list[Extension]:
    extensions = []
    for source in sorted(glob.glob("openmemory_*/**/*.c", recursive=True)):
        with open(source, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        extensions.append(Extension(
            source[:-2].replace("/", "."), [source], optional=True,
            define_macros=[("SOURCE_SHA256", f'"{digest}"')], extra_compile_args=["-O2"]))
    return extensions


setup(ext_modules=_extensions())
