"""A `rule:` grader the evaluation tests share: the share of the answer's characters found in the
gold answer. Its scores vary from row to row on a tiny model's answers, so a mean over them says
something; `overlap_score` computes the same score directly, for comparison."""
from __future__ import annotations

import pathlib

RULE = '''
def compute_score(data_source, solution_str, ground_truth, extra_info):
    if not solution_str:
        return 0.0
    return sum(c in ground_truth for c in solution_str) / len(solution_str)
'''


def overlap_score(solution: str, gold: str) -> float:
    return sum(c in gold for c in solution) / len(solution) if solution else 0.0


def write_rule(folder: pathlib.Path) -> pathlib.Path:
    """The rule as a file (a `rule:` grader names an absolute path)."""
    path = folder / "overlap.py"
    path.write_text(RULE)
    return path
