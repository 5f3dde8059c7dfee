"""The job's logs as accusations for the triage: joblogs reads them and ranks its own suspects
(root cause, a rank behind in the collectives, a peer many hosts name); each becomes a
LogSuspect with its score as the evidence's weight and its lines as the evidence's source."""

from __future__ import annotations

from collections.abc import Mapping

from fleetfix.joblogs import SuspectKind, read_job_logs, suspects
from fleetfix.triage.suspects import Kind, LogSuspect

_KINDS = {SuspectKind.NODE: Kind.NODE, SuspectKind.GPU: Kind.GPU, SuspectKind.LINK: Kind.LINK}
SHOWN_LINES = 3
"""file:line references an accusation shows (the rest are counted)."""


def log_suspects(texts: Mapping[str, str]) -> list[LogSuspect]:
    """What `texts` (file name -> its text) accuse, host by host; a suspect the logs cannot
    place on a host (a rank no init line placed) accuses nobody the triage can probe."""
    if not texts:
        return []
    found = []
    for suspect in suspects(read_job_logs(texts)):
        if suspect.host is None:
            continue
        lines = list(suspect.evidence[:SHOWN_LINES])
        more = len(suspect.evidence) - len(lines)
        where = "log " + ", ".join(lines) + (f" (+{more} more)" if more > 0 else "")
        found.append(
            LogSuspect(
                host=suspect.host,
                reason=suspect.reason,
                weight=suspect.score,
                where=where,
                gpu=suspect.gpu,
                kind=_KINDS[suspect.kind],
            )
        )
    return found
