#!/usr/bin/env bash
# Build the sdist and the wheel of the current checkout and check them; `--upload` then publishes to PyPI.
#   bash scripts/release.sh [--out DIR] [--upload]
# Checks: the version is the same in pyproject.toml, sat_ext/__init__.py and the CHANGELOG's top entry;
# `twine check` passes on both files; the wheel ships the example configs, the data script and the patches.
# sat-ext is not on PyPI yet: `--upload` (twine, with your PyPI token) is what would publish it.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=dist UPLOAD=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT=$2; shift 2 ;;
        --upload) UPLOAD=1; shift ;;
        *) echo "usage: bash scripts/release.sh [--out DIR] [--upload]" >&2; exit 2 ;;
    esac
done
PY=${PYTHON:-python}
VERSION=$("$PY" -c "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))['project']['version'])")
PKG_VERSION=$("$PY" -c "import re; print(re.search(r'__version__ = \"(.+)\"', open('sat_ext/__init__.py').read())[1])")
LOG_VERSION=$(grep -m1 -oE '^## \[[^]]+\]( \(([0-9.]+)\))?' CHANGELOG.md | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1)
if [ "$VERSION" != "$PKG_VERSION" ] || [ "$VERSION" != "$LOG_VERSION" ]; then
    echo "version mismatch: pyproject $VERSION, sat_ext/__init__.py $PKG_VERSION, CHANGELOG $LOG_VERSION" >&2
    exit 1
fi
rm -rf "$OUT" && mkdir -p "$OUT"
"$PY" -m build --no-isolation --sdist --wheel --outdir "$OUT" . > "$OUT/build.log" 2>&1 || { cat "$OUT/build.log" >&2; exit 1; }
"$PY" -m twine check --strict "$OUT"/*.whl "$OUT"/*.tar.gz
"$PY" - "$OUT" <<'PYEOF'
import glob, sys, zipfile
names = zipfile.ZipFile(glob.glob(f"{sys.argv[1]}/*.whl")[0]).namelist()
need = ["sat_ext/examples/verl_aime_qwen3_30b/config/sat_gspo_r3_lag8.yaml", "sat_ext/examples/verl_aime_qwen3_30b/run.sh",
        "sat_ext/examples/data/prepare_aime_dapo.py", "sat_ext/patches/openrlhf-0.11.2-policy-loss-registry.diff"]
missing = [n for n in need if n not in names]
sys.exit(f"the wheel lacks {missing}" if missing else None)
PYEOF
echo "release $VERSION: $(ls "$OUT" | grep -v build.log | tr '\n' ' ')checked"
if [ "$UPLOAD" = 1 ]; then
    "$PY" -m twine upload "$OUT"/*.whl "$OUT"/*.tar.gz
fi
