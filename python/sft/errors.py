"""The one error type sft raises for bad input: a message that names what and where."""

from __future__ import annotations


class SftError(Exception):
    """A user-facing error. `where` is `file:line:col` when the input has a location."""

    def __init__(self, message: str, where: str | None = None):
        self.message = message
        self.where = where
        super().__init__(f"{where}: error: {message}" if where else f"error: {message}")


class IllegalPlan(SftError):
    """A plan that cannot be applied to this program; the search skips such a candidate."""
