"""The job's logs as the triage's accusations (triage/logs.py over joblogs): the lab's hung-job
log, and a real capture (tests/fixtures/job-logs/MANIFEST.md)."""

from __future__ import annotations

from pathlib import Path

from fleetfix.lab.joblogs import Hang, job_logs
from fleetfix.triage.logs import log_suspects
from fleetfix.triage.suspects import Kind, rank

JOB_LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "job-logs"
HGX = tuple(f"00000000:{b}:00.0" for b in ("1B", "43", "52", "61", "9D", "C3", "D1", "DF"))


def test_the_rank_that_never_entered_the_collective_is_the_labs_hung_gpu() -> None:
    nodes = [f"gpu{n:03d}" for n in range(1, 5)]
    texts = job_logs(48213, nodes, HGX, Hang(9001, "ALLREDUCE", "gpu003", 3), "1207 03:10:00")
    (accused,) = log_suspects(texts)
    assert (accused.host, accused.kind, accused.gpu) == ("gpu003", Kind.GPU, "cuda 3 (busId 61000)")
    assert "rank 19" in accused.reason and "9001" in accused.reason
    assert accused.where.startswith("log slurm-48213.out:")
    (suspect,) = rank({}, [accused])
    assert suspect.target == "gpu003 GPU cuda 3 (busId 61000)"


def test_a_job_that_did_not_hang_accuses_no_one() -> None:
    assert log_suspects(job_logs(7, ["gpu001", "gpu002"], HGX, None, "1207 03:10:00")) == []
    assert log_suspects({}) == []


def test_one_host_that_other_hosts_name_as_their_failing_infiniband_peer() -> None:
    name = "issue-nccl-928-three-hosts-net-ib-error-4-ipv6-peers.txt"
    accused = log_suspects({name: (JOB_LOGS / name).read_text(encoding="utf-8")})
    assert accused, "the capture's NET/IB errors accuse someone"
    assert all(a.where.startswith(f"log {name}:") for a in accused)
