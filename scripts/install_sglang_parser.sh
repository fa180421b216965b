#!/usr/bin/env bash
# Install sglang 0.5.23 and exactly the modules its import chain needs, with --no-deps, into an
# isolated directory that only the tests' SGLang subprocess (tests/_sglang_cpu.py) puts on its
# path: SGLang's own config parsers, rotary embedding and server-argument resolution then run on
# a CPU machine without SGLang's GPU stack (its pinned torch, its CUDA kernels). The test suite
# calls this on first use with ~/.cache/splitserve/sglang-cpu-0.5.23 (tests/conftest.py); a
# checkout's .sglang-cpu/ (the default here) is used first when present. Versions are the ones
# this was verified with. triton (~1 GB) is left out: SGLang's modules only decorate kernels with
# it at import time, and tests/_sglang_cpu.py stands in for it (about 300 MB in all).
set -euo pipefail
DEST=${1:-.sglang-cpu}
PY=${PYTHON:-.venv/bin/python}
"$PY" -m pip install --quiet --no-deps --target "$DEST" \
  sglang==0.5.23 orjson==3.13.0 pybase64==1.5.1 starlette==1.10.0 msgspec==0.23.0 \
  pyzmq==27.3.0 ipython==9.18.1 traitlets==5.16.1 aiohttp==3.14.5 multidict==7.2.1 attrs==26.1.0 \
  yarl==1.25.1 propcache==0.5.4 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 frozenlist==1.8.0 \
  apache-tvm-ffi==0.1.15.post2 sentencepiece==0.2.3 compressed-tensors==0.20.1 loguru==0.7.3 \
  openai==3.57.0 partial-json-parser==0.2.1.1.post7
echo "$DEST"
