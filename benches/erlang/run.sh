#!/usr/bin/env bash
# Erlang's term_to_binary/binary_to_term on the `serialise` workloads (needs
# erlang-nox; see ../../README.md). Prints one JSON line per figure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
erlc -o "$out" "$here/serialise.erl"
timeout 600 erl -noshell +S 2 -pa "$out" -eval 'serialise:main(), halt().'
