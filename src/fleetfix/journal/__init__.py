"""The SQLite journal: runs, host steps, commands and actions, for history, resume, cooldowns."""

from fleetfix.journal.store import Journal, RunSummary, default_journal_path

__all__ = ["Journal", "RunSummary", "default_journal_path"]
