#!/usr/bin/env python3
"""tiktoken's own public tests, run against `lmkit.tiktoken_compat`.

Nothing of tiktoken is vendored: the tiktoken 0.14.0 sdist is fetched from
PyPI (pinned by version and sha256, cached in assets/), its `tests/` are
extracted to a temporary folder, and pytest runs them with `import tiktoken`
resolving to a shim package that re-exports lmkit's compat module (the shim
folder comes first on sys.path, before any installed tiktoken).

Usage: PYTHON -m ... scripts/check_tiktoken_suite.py [pytest args]
with the lmkit wheel, pytest, hypothesis, numpy and regex installed in
PYTHON. TIKTOKEN_MAX_EXAMPLES (hypothesis examples per test, as in
tiktoken's CI) defaults to 100.
"""

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "0.14.0"
SHA256 = "231dec90efcdccf1b565a1416107736f1e09b1a08fe736ef9d6363e626d03874"
CACHE = Path(__file__).resolve().parent.parent / "assets" / "tiktoken-sdist" / f"tiktoken-{VERSION}.tar.gz"

# `tiktoken` and the submodules its users and tests import, each over the compat module.
SHIM = {
    "tiktoken/__init__.py": (
        "from lmkit.tiktoken_compat import *  # noqa: F401,F403\n"
        "from lmkit.tiktoken_compat import Encoding, encoding_for_model, "
        "encoding_name_for_model, get_encoding, list_encoding_names  # noqa: F401\n"
        f'__version__ = "{VERSION}"\n'
    ),
    "tiktoken/core.py": "from lmkit.tiktoken_compat import Encoding  # noqa: F401\n",
    "tiktoken/registry.py": (
        "from lmkit.tiktoken_compat import _ENCODINGS as ENCODINGS, get_encoding, "
        "list_encoding_names  # noqa: F401\n"
    ),
    "tiktoken/model.py": (
        "from lmkit.tiktoken_compat import MODEL_PREFIX_TO_ENCODING, MODEL_TO_ENCODING, "
        "encoding_for_model, encoding_name_for_model  # noqa: F401\n"
    ),
}


def sdist() -> bytes:
    """The sdist's bytes, from the cache or PyPI, checked against SHA256."""
    data = CACHE.read_bytes() if CACHE.exists() else None
    if data is None or hashlib.sha256(data).hexdigest() != SHA256:
        with tempfile.TemporaryDirectory() as d:
            pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
            subprocess.run(pip + ["-d", d, f"tiktoken=={VERSION}"], check=True)
            data = (Path(d) / CACHE.name).read_bytes()
        got = hashlib.sha256(data).hexdigest()
        if got != SHA256:
            sys.exit(f"check_tiktoken_suite: PyPI's {CACHE.name} has sha256 {got}, expected {SHA256}")
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        tmp = CACHE.with_suffix(".part")
        tmp.write_bytes(data)
        tmp.replace(CACHE)
    return data


def main() -> int:
    data = sdist()
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        archive = work / "sdist.tar.gz"
        archive.write_bytes(data)
        prefix = f"tiktoken-{VERSION}/tests/"
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
            if not any(m.name.endswith(".py") and "/test_" in m.name for m in members):
                sys.exit("check_tiktoken_suite: the sdist has no tests/test_*.py")
            for m in members:
                dest = work / "tests" / m.name[len(prefix) :]
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(tar.extractfile(m).read())
        for rel, text in SHIM.items():
            (work / "shim" / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / "shim" / rel).write_text(text)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(work / "shim"), env.get("PYTHONPATH", "")])
        env.setdefault("TIKTOKEN_MAX_EXAMPLES", "100")
        # The tests must see the shim, not an installed tiktoken.
        probe = "import tiktoken; assert tiktoken.Encoding.__module__ == 'lmkit.tiktoken_compat', tiktoken.__file__"
        subprocess.run([sys.executable, "-c", probe], env=env, check=True)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(work / "tests")]
        return subprocess.run(cmd + sys.argv[1:], env=env, cwd=work).returncode


if __name__ == "__main__":
    sys.exit(main())
