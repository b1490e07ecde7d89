"""The extension type-checks (tsc --strict, no `any` escape hatches) against the types of both
Pi scopes: `@earendil-works/pi-coding-agent` 1.x and `@mariozechner/pi-coding-agent` 0.73.1.

The source imports Pi's types (type-only) from `@earendil-works/pi-coding-agent`; the
package's tsconfig.json maps that name to whichever scope is installed, as this test does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .harness import EXTENSION, PI1_PACKAGE, PI1_VERSION, PI_PACKAGE, PI_VERSION, pi_cache_dir
from .harness import install_pi as install
from .npm_install import install_into_cache, installed_or_fail

TYPESCRIPT_VERSION = "5.9.3"
PACKAGE_DIR = EXTENSION.parent

pytestmark = pytest.mark.slow


def typescript() -> Path:
    cache = Path.home() / ".cache" / "lookback-e2e" / f"typescript-{TYPESCRIPT_VERSION}"
    tsc = cache / "node_modules" / "typescript" / "bin" / "tsc"
    if not tsc.exists():
        npm = shutil.which("npm") or "npm"
        install_into_cache(npm, f"typescript@{TYPESCRIPT_VERSION}", cache,
                           lambda folder: (folder / "node_modules/typescript/bin/tsc").exists(),
                           600)
    return tsc


def types_of(package: Path) -> Path:
    """The declaration file a package names (`types`, else its exports' root `types`)."""
    manifest = json.loads((package / "package.json").read_text())
    exported = manifest.get("exports", {}).get(".", {})
    if isinstance(exported.get("import"), dict):
        exported = exported["import"]
    return package / (manifest.get("types") or exported["types"])


@pytest.mark.parametrize(("package", "version"),
                         [(PI1_PACKAGE, PI1_VERSION), (PI_PACKAGE, PI_VERSION)])
def test_the_extension_type_checks_against_pi(package: str, version: str, tmp_path: Path) -> None:
    installed_or_fail(lambda: install(package=package, version=version), f"{package}@{version}")
    modules = pi_cache_dir(package, version) / "node_modules"
    tsc = installed_or_fail(typescript, "TypeScript")
    base = json.loads((PACKAGE_DIR / "tsconfig.json").read_text())
    options = {**base["compilerOptions"], "typeRoots": [str(modules / "@types")],
               "paths": {"@earendil-works/pi-coding-agent": [str(types_of(modules / package))],
                         "typebox": [str(types_of(modules / "typebox"))]}}
    config = tmp_path / "tsconfig.json"
    config.write_text(json.dumps({"compilerOptions": options,
                                  "include": [str(PACKAGE_DIR / p) for p in base["include"]]}))
    done = subprocess.run(["node", str(tsc), "-p", str(config)], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    sources = [PACKAGE_DIR / "index.ts", *PACKAGE_DIR.glob("src/*.ts")]
    source = "\n".join(path.read_text() for path in sources)
    assert " as any" not in source and ": any" not in source
