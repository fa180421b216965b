#!/bin/bash
# Copy a carried part of an export ($1: .gpu/xK) into $2 (/tmp/p25x or /tmp/p26x); when its five
# shards and SHA256SUMS are there, check them (sha256sum -c) and let the chain go on (OK).
mkdir -p "$2"
cp "$1"/* "$2"/
cd "$2" && ls -la
if [ "$(ls model-0000*-of-00005.safetensors 2> /dev/null | wc -l)" = 5 ] && [ -f SHA256SUMS ]; then
  sha256sum -c SHA256SUMS && touch OK && echo "$2 checked: OK"
fi
