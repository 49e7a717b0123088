"""The seed-004 experiments' report: selection protocol, figure, CSVs and the paper's claims."""

from experiments.report.report import (
    claims_obesity,
    claims_table,
    complete_trials,
    evaluation_metric,
    figure,
    select,
    split_by_setting,
    summarise,
)

__all__ = ["claims_obesity", "claims_table", "complete_trials", "evaluation_metric", "figure", "select",
           "split_by_setting", "summarise"]
