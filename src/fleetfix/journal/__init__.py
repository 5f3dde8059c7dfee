"""The SQLite journal: runs, host steps, commands and actions, for history, resume, cooldowns."""

from fleetfix.journal.store import (
    LEASE_RENEW,
    Journal,
    ResumeRefused,
    RunSummary,
    default_journal_path,
)

__all__ = ["LEASE_RENEW", "Journal", "ResumeRefused", "RunSummary", "default_journal_path"]
