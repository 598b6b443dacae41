# Sourced by scripts/test and scripts/nightly: the one home of the marker expression that splits the tiers.
# The markers of tests that run real processes, Toxiproxy or containers (tests/unit/test_tiers.py holds the test
# folders to them). Per change they run in their own phase; the nightly does not repeat the ones per change ran.
# shellcheck disable=SC2034
REAL="chaos or chaos_docker or integration"
