"""The token figures reconcile: every figure the report quotes is named by what it counts (trained tokens or
contribution tokens: trainer.metrics), and the figures of one run add up across the summary, the ledger, the goodput
check and the report (issue 60: "tokens merged 2,434,048" beside "5,407,744 uploaded tokens" could not be put side
by side)."""

from __future__ import annotations

from typing import Any, cast

from chaos.report import token_rows
from chaos.scenario import scenario_with
from chaos.sim import SimOptions, simulate
from trainer.metrics import summarize_events


def test_the_token_figures_of_a_run_add_up_across_the_summary_the_checks_and_the_report() -> None:
    scenario = scenario_with("kill-and-rejoin")  # a learner restarted; the syncer never (no merge undone)
    r = simulate(scenario, SimOptions(baseline=False))
    m = summarize_events(r.history.events)
    verdicts = {v.name: v for v in r.verdicts}
    fragments = scenario.cluster.algorithm.num_fragments
    # trained tokens: the syncer counted no more than the learners trained; merges took no more than they trained
    assert 0 < m.tokens_total <= m.trained_tokens and 0 < m.trained_tokens_merged <= m.trained_tokens
    # contribution tokens: a trained token is one per fragment, so merged contribution tokens cover at least P × the
    # trained tokens merged (nested spans re-sent count again here, once there)
    assert m.contribution_tokens_merged <= m.contribution_tokens_uploaded
    assert fragments * m.trained_tokens_merged <= m.contribution_tokens_merged
    # the checks quote the same figures under the same names
    goodput = cast(dict[str, Any], verdicts["goodput"].evidence)
    assert sum(goodput["trained_tokens"].values()) == m.trained_tokens
    assert sum(goodput["merged_tokens"].values()) == m.trained_tokens_merged
    ledger = cast(dict[str, Any], verdicts["ledger"].evidence)
    assert ledger["learners"]["sent"] == m.contribution_tokens_uploaded
    assert ledger["syncer"]["merged"] == m.contribution_tokens_merged
    assert ledger["budget"]["finished_tokens"] <= m.tokens_total  # the result, then the settle phase's reports
    assert "contribution tokens uploaded" in verdicts["ledger"].summary
    assert "trained tokens merged ÷ trained tokens" in verdicts["goodput"].summary
    # and the report's rows name each kind
    rows = dict(token_rows(m))
    assert set(rows) == {
        "trained tokens (the learners' own count)",
        "trained tokens the syncer counted (the budget's count)",
        "trained tokens merged (compute goodput)",
        "contribution tokens merged of uploaded",
    }
    assert (
        f"{m.trained_tokens_merged / m.trained_tokens:.1%} of trained"
        in rows["trained tokens merged (compute goodput)"]
    )
