"""fleetfix.joblogs on real job logs (tests/fixtures/job-logs/MANIFEST.md): the rank map from
NCCL's init lines, NCCL warnings with their peers, the watchdog's timeouts and progress,
torchrun's ChildFailedError report, and the suspects they point at."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetfix.joblogs import (
    MAX_LINE,
    EventKind,
    JobLogFacts,
    LogEvent,
    RankInfo,
    SuspectKind,
    Topic,
    read_job_logs,
    suspects,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = FIXTURES / "job-logs"
INIT_32 = FIXTURES / "samples" / "nccl-debug" / "issue-ncclt-29-4node-32rank-init-complete.txt"
KOLYOZ_INIT = "issue-ncclt-252-kolyoz-init-start-busid-2node-8rank.txt"
KOLYOZ_WARN = "issue-ncclt-252-kolyoz2-net-ib-completion-error-peer.txt"


def _read(*names: str) -> JobLogFacts:
    return read_job_logs({name: (LOGS / name).read_text(encoding="utf-8") for name in names})


# --- NCCL init lines: the rank map ------------------------------------------------------------


def test_init_complete_lines_place_ranks_on_hosts_and_devices() -> None:
    facts = read_job_logs({"slurm-1.out": INIT_32.read_text(encoding="utf-8")})
    assert facts.nranks == 32
    assert sorted(facts.ranks) == [4, 5, 6, 8, 9, 15, 17, 20, 22, 24, 25, 29]
    assert facts.ranks[15] == RankInfo(
        rank=15, host="server2", pid=23920, cuda_dev=7, where="slurm-1.out:1"
    )
    assert (facts.ranks[24].host, facts.ranks[24].cuda_dev) == ("server4", 0)
    assert (facts.warnings, facts.timeouts, facts.child_failures) == ((), (), ())


def test_init_start_lines_give_the_bus_id() -> None:
    facts = _read(KOLYOZ_INIT)
    assert (facts.nranks, sorted(facts.ranks)) == (8, [0, 1, 4, 5, 6, 7])
    rank6 = facts.ranks[6]
    assert (rank6.host, rank6.pid, rank6.cuda_dev, rank6.bus_id) == ("kolyoz2", 25169, 2, "d4000")
    assert facts.ranks[0].where == f"{KOLYOZ_INIT}:6"


def test_older_init_lines_without_nvmldev_and_one_process_per_host() -> None:
    facts = _read("issue-nccl-629-init-complete-busid-no-nvmldev-2node-16rank.txt")
    assert (facts.nranks, sorted(facts.ranks)) == (16, [2, 4, 5, 8, 9, 12, 14, 15])
    assert (facts.ranks[15].host, facts.ranks[15].cuda_dev, facts.ranks[15].bus_id) == (
        "A03-R28-I49-3-9000018",
        7,
        "e7000",
    )
    assert {facts.ranks[rank].pid for rank in (8, 9, 12, 14, 15)} == {193027}


# --- NCCL warnings -------------------------------------------------------------------------------


def test_net_ib_warning_names_its_host_rank_and_peer() -> None:
    facts = _read(KOLYOZ_INIT, KOLYOZ_WARN)
    (warning,) = facts.warnings
    assert (warning.file, warning.line, warning.where) == (
        KOLYOZ_WARN,
        4,
        f"{KOLYOZ_WARN}:4",
    )
    assert (warning.host, warning.pid, warning.cuda_dev) == ("kolyoz2", 25146, 0)
    assert warning.rank == 4  # kolyoz2:25146 is rank 4 in the init lines
    assert (warning.kind, warning.topic, warning.peer) == (
        EventKind.WARN,
        Topic.NET_IB,
        "10.0.35.1",
    )
    assert warning.text.startswith("NET/IB : Got completion from peer 10.0.35.1<49189>")


def test_the_same_peer_from_one_host_is_one_reporter() -> None:
    facts = _read("issue-nccl-1405-one-host-net-ib-error-12-same-peer.txt")
    assert [(w.line, w.host, w.peer) for w in facts.warnings] == [
        (1, "kp-ddp-worker-0", "10.216.210.236"),
        (6, "kp-ddp-worker-0", "10.216.210.236"),
        (11, "kp-ddp-worker-0", "10.216.210.236"),
    ]
    (top,) = suspects(facts)
    assert (top.kind, top.host, top.score) == (SuspectKind.LINK, "10.216.210.236", 60)
    assert "by 1 host(s): kp-ddp-worker-0" in top.reason
    assert len(top.evidence) == 3


def test_each_host_naming_a_different_ipv6_peer() -> None:
    facts = _read("issue-nccl-928-three-hosts-net-ib-error-4-ipv6-peers.txt")
    assert [(w.host, w.peer) for w in facts.warnings] == [
        ("H100-2", "fe80::966d:ae03:8b:df78%ib0"),
        ("H100-1", "fe80::966d:ae03:8b:df50%ib0"),
        ("H100-5", "fe80::966d:ae03:9c:f5f8%ib0"),
    ]
    found = suspects(facts)
    assert {(s.kind, s.host, s.score) for s in found} == {
        (SuspectKind.LINK, "fe80::966d:ae03:8b:df78%ib0", 60),
        (SuspectKind.LINK, "fe80::966d:ae03:8b:df50%ib0", 60),
        (SuspectKind.LINK, "fe80::966d:ae03:9c:f5f8%ib0", 60),
    }


def test_socket_warnings_and_a_host_that_names_itself() -> None:
    facts = _read("issue-nccl-795-socket-recv-broken-pipe-connection-closed-remote-peer.txt")
    assert [(w.line, w.topic, w.peer) for w in facts.warnings] == [
        (1, Topic.NET_SOCKET, "10.200.84.247"),
        (7, Topic.PROXY, None),
        (8, Topic.NET_SOCKET, "a100-st-p4d24xlarge-22"),  # its own FQDN, shortened
    ]
    assert facts.warnings[1].peer_rank == 9  # `Connect from rank 9`; no init line placed it
    (top,) = suspects(facts)  # the host itself is no peer of another host
    assert (top.kind, top.host) == (SuspectKind.NODE, "10.200.84.247")
    assert "(connection lost)" in top.reason


def test_a_remote_rank_placed_by_init_lines_names_its_host() -> None:
    """Unrelated captures together: `Connect from rank 9` and an init line placing rank 9."""
    name = "issue-nccl-795-socket-recv-broken-pipe-connection-closed-remote-peer.txt"
    facts = read_job_logs(
        {
            "init.log": INIT_32.read_text(encoding="utf-8"),
            name: (LOGS / name).read_text(encoding="utf-8"),
        }
    )
    proxy = facts.warnings[1]
    assert (proxy.line, proxy.peer_rank, proxy.peer) == (7, 9, "server2")


def test_warnings_without_a_peer_of_another_host_make_no_peer_suspect() -> None:
    facts = _read("issue-ncclt-166-socketprogress-connection-closed-remote-peer.txt")
    assert [(w.line, w.host, w.cuda_dev, w.peer) for w in facts.warnings] == [
        (1, "gpu004", 3, "gpu004"),
        (4, "gpu004", 3, None),
        (18, "gpu004", 2, None),
    ]
    assert suspects(facts) == []


def test_info_lines_are_not_warnings() -> None:
    facts = _read(KOLYOZ_WARN)
    assert len(facts.warnings) == 1  # `-> 6` traces and `Connection closed by localRank` are INFO


# --- the watchdog ------------------------------------------------------------------------------


def test_watchdog_timeouts_and_last_enqueued_work() -> None:
    name = "issue-basicsr-737-watchdog-allreduce-808-last-enqueued.txt"
    facts = _read(name)
    assert [(t.rank, t.seq, t.op, t.timeout_ms, t.ran_ms, t.line) for t in facts.timeouts] == [
        (1, 808, "ALLREDUCE", 600000, 600020, 1),
        (0, 808, "ALLREDUCE", 600000, 600030, 3),
        (2, 808, "ALLREDUCE", 600000, 600061, 5),
    ]
    assert [
        (p.rank, p.failed_at, p.enqueued, p.completed, p.process_group) for p in facts.progress
    ] == [
        (1, 808, 811, 807, "0"),
        (0, 808, 811, 807, "0"),
    ]
    assert facts.ranks[0].last_entered == (811, None)
    assert facts.ranks[0].last_completed == 807
    assert facts.ranks[2].last_entered == (808, "ALLREDUCE")
    assert suspects(facts) == []  # every rank timed out on the same work: no one is behind


def test_process_group_1_reduce_scatter() -> None:
    facts = _read("issue-llamafactory-6269-watchdog-reduce-scatter-pg1.txt")
    assert {(t.rank, t.seq, t.op) for t in facts.timeouts} == {
        (0, 7753, "_REDUCE_SCATTER_BASE"),
        (4, 7753, "_REDUCE_SCATTER_BASE"),
        (3, 7753, "_REDUCE_SCATTER_BASE"),
    }
    assert {(p.rank, p.enqueued, p.completed, p.process_group) for p in facts.progress} == {
        (0, 7755, 7752, "1"),
        (4, 7755, 7752, "1"),
    }
    assert suspects(facts) == []


def test_a_rank_far_behind_is_the_suspect_in_the_old_format() -> None:
    name = "issue-pytorch-118369-watchdog-old-format-rank7-behind-progress-bar.txt"
    facts = _read(name)
    assert [(t.rank, t.seq) for t in facts.timeouts] == [
        (0, 96120),
        (0, 96117),
        (0, 96125),
        (0, 96125),
        (7, 64088),
    ]
    assert facts.timeouts[0].line == 2  # glued to a progress bar
    assert facts.timeouts[0].timeout_ms == 1800000
    (top,) = suspects(facts)
    assert (top.kind, top.rank, top.score) == (SuspectKind.GPU, 7, 90)
    assert "SeqNum 64088; other ranks reached 96125" in top.reason
    assert top.evidence == (f"{name}:6",)


def test_ranks_out_of_step_on_the_same_seqnum_are_not_behind() -> None:
    facts = _read("issue-nccl-1409-watchdog-rank7-broadcast-vs-rank3-allreduce-indented.txt")
    assert {(t.rank, t.seq, t.op) for t in facts.timeouts} == {
        (7, 80078, "BROADCAST"),
        (3, 80078, "ALLREDUCE"),
    }
    assert facts.ranks[7].last_completed == 80077
    assert suspects(facts) == []


# --- torchrun's ChildFailedError ----------------------------------------------------------------


def test_child_failed_error_failures_and_root_cause() -> None:
    name = "issue-minigpt4-237-childfailederror-root-cause-rank0.txt"
    facts = _read(name)
    failure, root = facts.child_failures
    assert (failure.rank, failure.local_rank, failure.exit_code, failure.pid) == (1, 1, 1, 78971)
    assert (failure.root_cause, failure.host, failure.time) == (
        False,
        "n136-117-136.byted.org",
        "2023-05-19_16:39:58",
    )
    assert failure.error_file is None
    assert failure.traceback == (
        "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    )
    assert facts.root_cause == root
    assert (root.rank, root.exit_code, root.pid, root.root_cause, root.line) == (
        0,
        1,
        78970,
        True,
        15,
    )
    (top,) = suspects(facts)
    assert (top.kind, top.host, top.rank, top.score) == (
        SuspectKind.NODE,
        "n136-117-136.byted.org",
        0,
        100,
    )
    assert top.reason == "torchrun's root cause: rank 0 exited 1 first"
    assert top.evidence == (f"{name}:15",)


def test_negative_exit_codes_are_signals() -> None:
    facts = _read("issue-mmseg-3106-childfailederror-sigabrt-three-ranks.txt")
    assert [(f.rank, f.exit_code, f.signal, f.root_cause) for f in facts.child_failures] == [
        (1, -6, "SIGABRT", False),
        (2, -6, "SIGABRT", False),
        (0, -6, "SIGABRT", True),
    ]
    assert facts.child_failures[0].traceback == "Signal 6 (SIGABRT) received by PID 2385923"
    assert facts.root_cause is not None and facts.root_cause.traceback is None  # cut there
    assert "killed by SIGABRT" in suspects(facts)[0].reason


def test_a_report_cut_inside_its_first_entry() -> None:
    facts = _read("issue-solo-222-childfailederror-tail-sigabrt-and-root-exit1.txt")
    assert [(f.rank, f.exit_code, f.root_cause, f.line) for f in facts.child_failures] == [
        (1, -6, False, 1),
        (0, 1, True, 9),
    ]
    assert facts.root_cause is not None and facts.root_cause.signal is None


def test_no_other_failures_and_a_root_cause_on_rank_1() -> None:
    facts = _read("issue-bridge-llm-1-childfailederror-no-other-failures-root-rank1-sigabrt.txt")
    (root,) = facts.child_failures
    assert (root.root_cause, root.host, root.rank, root.exit_code, root.signal) == (
        True,
        "user-Rack-Server",
        1,
        -6,
        "SIGABRT",
    )
    assert facts.ranks[1].host == "user-Rack-Server"


def test_sigkill_root_cause() -> None:
    name = "issue-cppo-6-childfailederror-root-sigkill-no-other-failures.txt"
    facts = _read(name)
    (root,) = facts.child_failures
    assert (root.root_cause, root.rank, root.exit_code, root.signal, root.line) == (
        True,
        0,
        -9,
        "SIGKILL",
        9,
    )
    assert root.host == "mlxlab115rp2n7682d40d9-20250521025625-6dyyd3-8nir8b-worker"
    assert suspects(facts)[0].reason == "torchrun's root cause: rank 0 killed by SIGKILL first"


def test_report_lines_behind_srun_task_prefixes() -> None:
    """The same capture as `srun -l` prints it: each line after its task number and `: `
    (made here from the capture; no such paste was found)."""
    name = "issue-mmseg-3106-childfailederror-sigabrt-three-ranks.txt"
    text = (LOGS / name).read_text(encoding="utf-8")
    prefixed = "".join(f"0: {line}" for line in text.splitlines(keepends=True))
    plain, srun = _read(name), read_job_logs({name: prefixed})
    assert srun.child_failures == plain.child_failures
    assert len(srun.child_failures) == 3


def test_pytorch_nccl_error_and_the_last_error_line_after_it() -> None:
    name = "issue-nccl-2076-distbackenderror-remote-error-last-error-recv.txt"
    facts = _read(name)
    assert [(w.line, w.kind, w.host, w.topic, w.peer) for w in facts.warnings] == [
        (2, EventKind.ERROR, None, Topic.OTHER, None),
        (4, EventKind.ERROR, None, Topic.NET_SOCKET, "172...."),
    ]
    assert facts.warnings[0].text.startswith("ncclRemoteError: A call failed")
    (top,) = suspects(facts)
    assert (top.kind, top.host, top.evidence) == (SuspectKind.NODE, "172....", (f"{name}:4",))


def test_last_error_naming_a_closed_connection() -> None:
    facts = _read("issue-nccl-1514-distbackenderror-internal-error-last-error-closed.txt")
    assert [(w.line, w.peer, w.text) for w in facts.warnings] == [
        (2, None, "ncclInternalError: Internal check failed."),
        (4, "user", "Net : Connection closed by remote peer user<50260>"),
    ]


# --- addresses and hostless lines -------------------------------------------------------------


def test_bootstrap_lines_map_addresses_to_hosts() -> None:
    sample = (
        FIXTURES / "samples" / "nccl-debug" / "issue-ncclt-293-2node-a100-pcie-info-2.21.5-head.txt"
    )
    facts = read_job_logs({"head.log": sample.read_text(encoding="utf-8")})
    assert dict(facts.host_addresses) == {"192.168.160.111": "test1", "192.168.160.112": "test2"}


def test_warnings_behind_a_timestamp_prefix() -> None:
    sample = (
        FIXTURES
        / "samples"
        / "nccl-debug"
        / "issue-pytorch-ciinfra-490-dev-shm-extend-enospc-timestamped.txt"
    )
    facts = read_job_logs({"ci.log": sample.read_text(encoding="utf-8")})
    host = "mt-l-x86iavx512-45-172-t4-4-csmpw-runner-g4sfw-workflow"
    assert [(w.line, w.host, w.pid, w.cuda_dev, w.topic) for w in facts.warnings] == [
        (1, host, 202016, 0, Topic.SHM),
        (3, host, 202016, 0, Topic.SHM),
        (12, host, 202016, 2, Topic.NET_SOCKET),
    ]


def test_warnings_without_a_host_prefix() -> None:
    sample = (
        FIXTURES / "samples" / "nccl-debug" / "issue-nccl-525-shm-posix-fallocate-enospc-2.9.6.txt"
    )
    facts = read_job_logs({"shm.log": sample.read_text(encoding="utf-8")})
    assert [(w.line, w.host, w.cuda_dev, w.topic) for w in facts.warnings] == [
        (1, None, 3, Topic.SHM),
        (3, None, 3, Topic.SHM),
    ]
    assert facts.warnings[0].text == "Call to posix_fallocate failed : No space left on device"


# --- several files, garbage, size ------------------------------------------------------------


def test_several_files_keep_their_own_names_and_lines() -> None:
    """Unrelated captures read together: each fact keeps the file and line it came from."""
    facts = _read(
        KOLYOZ_INIT,
        KOLYOZ_WARN,
        "issue-basicsr-737-watchdog-allreduce-808-last-enqueued.txt",
        "issue-minigpt4-237-childfailederror-root-cause-rank0.txt",
    )
    assert {w.file for w in facts.warnings} == {KOLYOZ_WARN}
    assert {t.file for t in facts.timeouts} == {
        "issue-basicsr-737-watchdog-allreduce-808-last-enqueued.txt"
    }
    assert facts.root_cause is not None
    assert facts.root_cause.where == "issue-minigpt4-237-childfailederror-root-cause-rank0.txt:15"
    assert facts.lines_read == 10 + 17 + 5 + 22
    found = suspects(facts)
    assert [s.score for s in found] == sorted((s.score for s in found), reverse=True)
    assert found[0].reason.startswith("torchrun's root cause")
    # ranks 4-7 said nothing, but they outnumber the 3 that timed out: no one is odd
    assert not [s for s in found if "reported no watchdog timeout" in s.reason]


def test_placed_ranks_silent_while_most_timed_out_are_suspects() -> None:
    """Unrelated captures again: ranks 0-4 time out (two files), the init lines place ranks
    0, 1 and 4-7; 5, 6 and 7 say nothing and are fewer than those that timed out."""
    facts = _read(
        KOLYOZ_INIT,
        "issue-basicsr-737-watchdog-allreduce-808-last-enqueued.txt",
        "issue-llamafactory-6269-watchdog-reduce-scatter-pg1.txt",
    )
    silent = [s for s in suspects(facts) if "reported no watchdog timeout" in s.reason]
    assert [(s.rank, s.host, s.gpu, s.score) for s in silent] == [
        (5, "kolyoz2", "cuda 1 (busId 55000)", 80),
        (6, "kolyoz2", "cuda 2 (busId d4000)", 80),
        (7, "kolyoz2", "cuda 3 (busId e6000)", 80),
    ]
    assert silent[0].evidence[0] == f"{KOLYOZ_INIT}:7"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "epoch 1 loss 0.3\nepoch 2 loss 0.2\n",
        "host      : somewhere\nrank: 3\nNCCL version 2.18.1+cuda12.1\n",
        "\x00\x01\x02\udcff\udcfe binary \x7f\n" * 50,
        "NCCL WARN half a line\n[Rank x] Watchdog caught collective operation timeout: nonsense\n",
    ],
)
def test_logs_that_say_none_of_it_give_empty_facts(text: str) -> None:
    facts = read_job_logs({"job.log": text})
    assert (facts.ranks, facts.warnings, facts.timeouts, facts.child_failures) == ({}, (), (), ())
    assert facts.root_cause is None and suspects(facts) == []


def test_a_huge_line_is_read_up_to_max_line() -> None:
    line = "x" * (MAX_LINE * 3) + " [Rank 1] Watchdog caught collective operation timeout"
    warn = (LOGS / KOLYOZ_WARN).read_text(encoding="utf-8")
    facts = read_job_logs({"a.log": line + "\n" + warn})
    assert (facts.long_lines, len(facts.warnings), facts.timeouts) == (1, 1, ())
    assert facts.warnings[0].line == 5


def test_reading_stays_linear_on_a_large_log() -> None:
    """About 10 MB of NCCL INFO chatter plus the capture: read in well under the time a
    quadratic or regex-per-line reader would take."""
    chatter = "gpu001:1234:1300 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
    text = chatter * (10_000_000 // len(chatter)) + (LOGS / KOLYOZ_WARN).read_text("utf-8")
    started = time.perf_counter()
    facts = read_job_logs({"big.log": text})
    elapsed = time.perf_counter() - started
    assert len(facts.warnings) == 1 and facts.warnings[0].peer == "10.0.35.1"
    assert elapsed < 30, elapsed


# --- suspects on values: many hosts naming one --------------------------------------------------


def _warning(host: str, peer: str, line: int) -> LogEvent:
    return LogEvent(
        file="job.log",
        line=line,
        host=host,
        rank=None,
        kind=EventKind.WARN,
        text=f"NET/IB : Got completion from peer {peer}<1234> with status=12",
        peer=peer,
        topic=Topic.NET_IB,
    )


def test_one_host_named_by_many_is_the_suspect_not_the_many() -> None:
    reporters = ("gpu003", "gpu007", "gpu009", "gpu003")
    named = [_warning(reporter, "gpu012", line) for line, reporter in enumerate(reporters, 1)]
    warnings = (*named, _warning("gpu012", "gpu003", 5))
    found = suspects(JobLogFacts(warnings=warnings))
    assert [(s.host, s.score) for s in found] == [("gpu012", 80), ("gpu003", 60)]
    assert "by 3 host(s): gpu003, gpu007, gpu009" in found[0].reason
    assert found[0].evidence == ("job.log:1", "job.log:2", "job.log:3", "job.log:4")
