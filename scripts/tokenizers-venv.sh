#!/usr/bin/env bash
# A virtual environment with Hugging Face's `tokenizers` from PyPI, for the tokenizer.json parity
# test (tests/data/test_hf_tokenizer.cpp) and scripts/bench-hf-tokenizer.sh.
#   scripts/tokenizers-venv.sh VENV_DIR
# Creates VENV_DIR (Debian's /usr/bin/python3) and installs tokenizers unless it already imports.
# Exit 77, with the reason on stderr, when that is not possible (no venv module, no network).
set -uo pipefail
venv=${1:?usage: tokenizers-venv.sh VENV_DIR}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import tokenizers" 2>/dev/null; then exit 0; fi
echo "tokenizers-venv: installing tokenizers into $venv" >&2
if ! /usr/bin/python3 -m venv "$venv" >"$venv.log" 2>&1; then
  echo "cannot create a virtual environment in $venv (python3 -m venv failed: $(tail -1 "$venv.log"))" >&2
  exit 77
fi
if ! "$venv/bin/pip" install -q tokenizers >>"$venv.log" 2>&1; then
  echo "cannot install tokenizers from PyPI into $venv (pip: $(tail -1 "$venv.log"))" >&2
  exit 77
fi
"$venv/bin/python" -c "import tokenizers" 2>>"$venv.log" || { echo "tokenizers does not import in $venv" >&2; exit 77; }
