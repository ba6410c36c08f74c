#!/usr/bin/env bash
# run-tests.sh: runs every spec under spec/ inside dplhost (busted hosted by the
# binary, so specs reach ffi.C), including the ones that launch processes, and
# ends with the line "N passed, N failed, N skipped". Exit status: 0 when all pass.
set -uo pipefail
cd "$(dirname "$0")/.."
export DPL_ROOT="$PWD"
export DPL_BIN="$PWD/dplhost"
if [ -z "${DPL_PYTHON:-}" ] && [ -x build/pyref/bin/python ]; then export DPL_PYTHON="$PWD/build/pyref/bin/python"; fi
export DPL_TEST_TMP="$(mktemp -d /tmp/dpl-test.XXXXXX)"
trap 'rm -rf "$DPL_TEST_TMP"' EXIT
# the dataset cache of this run stays in its temp dir (nothing written to ~/.cache)
export DPL_DATA_CACHE="${DPL_DATA_CACHE:-$DPL_TEST_TMP/cache}"
# Only used by a `make SAN=1` build: leaks are reported (and fail the run); an allocation
# too big for ASan returns NULL, as malloc does in the release build (an out-of-memory error
# the specs expect, not an ASan abort).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
./dplhost --busted -o spec/support/summary_handler.lua "$@" spec
