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
    validate_as_autograde()


def validate_as_autograde() -> None:
    """`nbgrader validate` skips the cells autograde skips (tagged ``demo`` or ``gpu-check``).

    The Validator's preprocessor list is not configurable: its default is given ValidateExecute
    in place of nbgrader's Execute (where the course's nbgrader_config.py is loaded).
    """
    from nbgrader.preprocessors import Execute
    from nbgrader.validator import Validator

    from coursetools.grading.execute import ValidateExecute

    trait = Validator.class_traits()["preprocessors"]
    preprocessors = [ValidateExecute if pp is Execute else pp for pp in trait.default()]
    trait.default_args = (preprocessors,)
