# Sourced by scripts/test, scripts/nightly and scripts/main: `timed <part> CMD...` runs CMD and prints its wall time
# as "tier: <part> <seconds> s" (benchmarks.costs.tier_times records those lines: docs/ci-tiers.md), keeping CMD's
# exit status.
timed() { local part=$1 t0=$SECONDS rc=0; shift; "$@" || rc=$?; echo "tier: $part $((SECONDS - t0)) s"; return "$rc"; }
