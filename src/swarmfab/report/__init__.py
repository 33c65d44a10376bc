"""What the user sees: terminal tables now; HTML report and export to come."""

from swarmfab.report.console import bench_table, policy_table, run_table, verdict_table

__all__ = ["bench_table", "policy_table", "run_table", "verdict_table"]
