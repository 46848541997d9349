#!/usr/bin/env bash
# LiteLLM's proxy, the real gateway of the `infra` test tests/gateway/test_gateway_litellm.py, into
# a venv of its own under the cache ($PROBER_CACHE_DIR/litellm-venv, or $PROBER_LITELLM_VENV):
# its dependencies (FastAPI, boto3, tokenizers, ...) must not mix with the versions prober is
# tested with. Every package comes from requirements/litellm-lock.txt, pinned with hashes and
# installed without resolving, so CI resolves nothing fresh. Skipped when the venv was built from
# the same lock. A first install takes minutes and about 750 MB (docs/operations.md).
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=requirements/litellm-lock.txt
VENV="${PROBER_LITELLM_VENV:-${PROBER_CACHE_DIR:-$HOME/.cache/prober}/litellm-venv}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.lock-sha256"

want="$(sha256sum "$LOCK" | cut -d' ' -f1)"
if [ -x "$VENV/bin/litellm" ] && [ "$(cat "$STAMP" 2> /dev/null)" = "$want" ]; then
    exit 0
fi
echo "installing LiteLLM's proxy into $VENV" >&2
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --require-hashes --no-deps -r "$LOCK"
"$VENV/bin/python" -m pip check
echo "$want" > "$STAMP"
