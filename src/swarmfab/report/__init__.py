"""What the user sees: terminal tables, live progress, the HTML report, the dashboard
and the exported champion package."""

from swarmfab.report.console import (
    against_itself_table,
    bench_table,
    policy_table,
    run_table,
    verdict_table,
)

__all__ = ["against_itself_table", "bench_table", "policy_table", "run_table", "verdict_table"]
