"""``configure(c, root)``: the grading settings the course's nbgrader_config.py applies."""

from __future__ import annotations

from pathlib import Path

# How long a gradebook write waits for another to finish (seconds). Several `nbgrader autograde`
# processes share one SQLite gradebook; sqlite3's default of 5 s ends in "database is locked".
GRADEBOOK_WAIT_S = 60


def gradebook_url(root: Path) -> str:
    """The gradebook in ``root``, with a write that waits for another (SQLAlchemy passes ``timeout``
    to ``sqlite3.connect``)."""
    return f"sqlite:///{Path(root).resolve() / 'gradebook.db'}?timeout={GRADEBOOK_WAIT_S}"


def configure(c, root: Path | None = None) -> None:
    """Autograde with GradingExecute and RestoreCells, feedback without hidden tests, Validate
    judging by raising; the gradebook in ``root`` (the config file's folder), its writes waiting
    for each other."""
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

    if root is not None:
        c.CourseDirectory.db_url = gradebook_url(root)
    c.Autograde.autograde_preprocessors = [
        GradingExecute,
        IgnorePattern,
        ClearMetadataPreprocessor,
        LimitOutput,
        SaveAutoGrades,
        AssignLatePenalties,
        CheckCellMetadata,
    ]
    # a deleted test cell comes back from the source, hidden tests too
    c.OverwriteCells.add_missing_cells = True
    # nbgrader's own sanitizers, with RestoreCells
    sanitize = Autograde.class_traits()["sanitize_preprocessors"].default()
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
