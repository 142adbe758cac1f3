#!/usr/bin/env bash
# Runs one libFuzzer target as a meson test (suite 'fuzz'): writes fresh seeds, then fuzzes for a
# bounded time from the seeds plus the corpus that earlier runs in this build directory kept.
#   run_fuzzer.sh FUZZER WORKDIR SECONDS [more libFuzzer flags, which win over these]
# Exits 0 when nothing was found, 77 (meson's "skipped") when the target's codec is not
# implemented yet, anything else on a finding; the input that failed is then saved as
# WORKDIR/artifacts/crash-<sha1> (docs/testing.md says how to reproduce it).
set -euo pipefail
fuzzer=$1 work=$2 seconds=$3
shift 3
mkdir -p "$work/corpus" "$work/artifacts"
rm -rf "$work/seeds"
mkdir "$work/seeds"
# UB is a finding, not a warning (the build also has -fno-sanitize-recover=all).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$fuzzer" --make-corpus="$work/seeds"
echo "run_fuzzer: $(ls "$work/seeds" | wc -l) seeds, $(ls "$work/corpus" | wc -l) inputs kept" \
     "from earlier runs, fuzzing for ${seconds}s"
# libFuzzer's default exit code for a finding is 77, which meson reads as "skipped": use 1.
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
     -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
     -artifact_prefix="$work/artifacts/" "$@" "$work/corpus" "$work/seeds"
