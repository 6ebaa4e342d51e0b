"""Spec 001's error types: every problem a run reports says what kind it is and whether retrying can fix it.

- PARSE_ERROR: a malformed line, skipped with a warning (recoverable: the rest of the file is indexed);
- VALIDATION_ERROR: a file that cannot yield a session, quarantined (recoverable: fixing the file re-indexes it);
- EMBEDDING_FAILED: a chunk the provider could not embed after its retries (recoverable: retried next run);
- STORAGE_ERROR: the warehouse could not be written; the transaction is rolled back and indexing pauses until
  `sessionmem health` finds the warehouse writable again (not recoverable by retrying alone).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class InvalidInputError(ValueError):
    """A caller's input that no search can answer (an empty query, a limit below 1): a usage error, exit 2."""


class ErrorType(StrEnum):
    PARSE_ERROR = "PARSE_ERROR"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EMBEDDING_FAILED = "EMBEDDING_FAILED"
    STORAGE_ERROR = "STORAGE_ERROR"


RECOVERABLE = {
    ErrorType.PARSE_ERROR: True,
    ErrorType.VALIDATION_ERROR: True,
    ErrorType.EMBEDDING_FAILED: True,
    ErrorType.STORAGE_ERROR: False,
}


@dataclass
class SessionMemoryError(Exception):
    """An error with its type, details and whether a later run can recover from it by itself."""

    type: ErrorType
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(f"{self.type}: {self.message}")

    @property
    def recoverable(self) -> bool:
        return RECOVERABLE[self.type]

    def as_dict(self) -> dict[str, Any]:
        return {"type": str(self.type), "message": self.message, "recoverable": self.recoverable, **self.details}
