"""TolerantStream on a real pipe whose reader went away (EPIPE)."""

from __future__ import annotations

import os
from pathlib import Path

from fleetfix.cli.streams import TolerantStream


def test_a_reader_gone_drops_the_output_and_never_raises() -> None:
    read_end, write_end = os.pipe()
    inner = os.fdopen(write_end, "w", buffering=1)
    stream = TolerantStream(inner)
    stream.write("seen\n")
    assert os.read(read_end, 100) == b"seen\n"
    os.close(read_end)  # `| head` exits
    assert stream.write("lost\n") == len("lost\n")
    assert isinstance(stream.lost, BrokenPipeError)
    stream.write("dropped too\n")
    stream.flush()
    inner.close()  # the descriptor now points at /dev/null: a last flush cannot fail


def test_a_working_stream_is_passed_through(tmp_path: Path) -> None:
    path = tmp_path / "out"
    with path.open("w") as inner:
        stream = TolerantStream(inner)
        stream.write("a\n")
        stream.flush()
        assert stream.lost is None
        assert stream.isatty() is False  # everything else is the inner stream's
    assert path.read_text() == "a\n"
