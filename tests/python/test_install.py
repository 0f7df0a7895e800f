"""The install step: `cmake --install` of the tests' build into a fresh
prefix gives a package that imports and works with neither CKSTORE_BUILD nor
CKSTORE_LIB, from outside the checkout, on the library installed with it."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cks_servers import build_dir

CHECK = r"""
import json, sys
import ckstore
args = json.loads(sys.argv[1])
print(json.dumps({"module": ckstore.__file__, "lib": ckstore.lib_path}))
with ckstore.Client(**args["client"], timeout_ms=20000) as c:
    c.begin(args["job"], 1)
    c.put(args["job"], 1, "k", b"installed package")
    c.seal(args["job"], 1)
    with c.open(args["job"]) as r:
        print(json.dumps({"got": r.get("k").decode()}))
"""


def _cache(build: Path) -> dict:
    out = {}
    for line in (build / "CMakeCache.txt").read_text(errors="replace").splitlines():
        if line and not line.startswith(("#", "//")) and "=" in line and ":" in line:
            name, value = line.split("=", 1)
            out[name.split(":", 1)[0]] = value
    return out


def test_installed_package_imports_and_works_without_the_checkout(tmp_path, standalone):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not installed (scripts/deps installs it): install step not tested")
    build = build_dir()
    if not (build / "CMakeCache.txt").exists():
        pytest.skip(f"{build} is not a CMake build directory: install step not tested")
    cache = _cache(build)
    if cache.get("CKS_INSTALL_PYTHON", "OFF").upper() in ("OFF", "0", "FALSE", "NO", ""):
        pytest.skip(f"{build} is configured with CKS_INSTALL_PYTHON=OFF (no Python 3 "
                    "interpreter found, or turned off): the package is not installed")
    prefix = tmp_path / "prefix"
    p = subprocess.run([cmake, "--install", str(build), "--prefix", str(prefix)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode == 0, p.stdout
    site = Path(cache["CKS_PYTHON_SITEDIR"])
    if not site.is_absolute():
        site = prefix / site
    assert (site / "ckstore" / "__init__.py").exists(), p.stdout
    env = {k: v for k, v in os.environ.items()
           if k not in ("CKSTORE_BUILD", "CKSTORE_LIB", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    py = cache.get("_Python3_EXECUTABLE") or sys.executable
    job = f"install-{os.getpid()}"
    arg = json.dumps({"client": standalone.client_kwargs(), "job": job})
    q = subprocess.run([py, "-c", CHECK, arg], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    assert q.returncode == 0, q.stdout
    lines = [json.loads(x) for x in q.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == 2, q.stdout
    # the installed copy, not the checkout's python/, on the installed library
    assert Path(lines[0]["module"]).resolve() == (site / "ckstore" / "__init__.py").resolve()
    lib = Path(lines[0]["lib"])
    assert lib.is_absolute() and lib.resolve().is_relative_to(prefix.resolve()), lines[0]
    assert lines[1]["got"] == "installed package"
