"""``configure(c)``: the grading settings the course's nbgrader_config.py applies."""

from __future__ import annotations


def configure(c) -> None:
    """Autograde with GradingExecute and RestoreCells, feedback without hidden tests, Validate
    judging by raising."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        GetGrades,
        IgnorePattern,
        LimitOutput,
        OverwriteCells,
    )

    from coursetools.grading.cells import (
        HideHiddenTests,
        RestoreCells,
        SaveAutoGrades,
        judge_by_raising,
    )
    from coursetools.grading.execute import GradingExecute

    c.Autograde.autograde_preprocessors = [
        GradingExecute,
        IgnorePattern,
        ClearMetadataPreprocessor,
        LimitOutput,
        SaveAutoGrades,
        AssignLatePenalties,
        CheckCellMetadata,
    ]
    c.OverwriteCells.add_missing_cells = (
        True  # a deleted test cell comes back from the source, hidden tests too
    )
    sanitize = Autograde.class_traits()[
        "sanitize_preprocessors"
    ].default()  # nbgrader's, with RestoreCells
    c.Autograde.sanitize_preprocessors = [
        RestoreCells if pp is OverwriteCells else pp for pp in sanitize
    ]
    c.GenerateFeedback.preprocessors = [GetGrades, CSSHTMLHeaderPreprocessor, HideHiddenTests]
    judge_by_raising()
