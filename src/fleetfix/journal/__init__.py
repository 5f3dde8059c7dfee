"""The journal (SQLite, or a team's PostgreSQL): runs, host steps, commands and actions, for
history, resume, cooldowns, and the leases and repair budget controllers share."""

from fleetfix.journal.leases import LEASE_RENEW
from fleetfix.journal.store import (
    Journal,
    JournalError,
    ResumeRefused,
    RunSummary,
    default_journal_path,
    journal_target,
)

__all__ = [
    "LEASE_RENEW",
    "Journal",
    "JournalError",
    "ResumeRefused",
    "RunSummary",
    "default_journal_path",
    "journal_target",
]
