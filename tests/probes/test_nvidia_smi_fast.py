"""The nvidia_smi fast path (one clean `-q -x` document, lxml) against the slow path.

The slow path (clean the paste, defusedxml, the generic report tree) is the oracle: on every
XML sample both must give the same facts. Entity attacks must fail loudly without expanding.
"""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetfix.errors import ProbeParseError
from fleetfix.probes import nvidia_smi, nvidia_smi_fast, nvidia_smi_scan
from fleetfix.probes.base import to_data
from fleetfix.probes.gpu_facts import summarize
from fleetfix.probes.nvidia_smi_fast import read_clean_xml
from fleetfix.probes.nvidia_smi_text import Paste, clean_paste
from tests.probes.cases import SAMPLES, load_cases


def _xml_samples() -> list[Path]:
    """Every sample holding nvidia-smi XML, whichever directory it sits in."""
    found = {
        path
        for path in SAMPLES.rglob("*")
        if path.is_file() and "<nvidia_smi_log" in path.read_text(errors="replace")
    }
    found.update(case.sample for case in load_cases("nvidia_smi") if case.sample.suffix == ".xml")
    return sorted(found)


XML_SAMPLES = _xml_samples()
LAB = SAMPLES / "nvidia-smi-xml" / "lab-healthy-1000-8xh100-550.90.07.xml"


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _same_facts_both_ways(text: str) -> None:
    assert read_clean_xml(text) is not None, "the fast path did not apply"
    assert to_data(nvidia_smi.parse(text)) == to_data(nvidia_smi._parse_pasted(text))


def test_the_samples_include_every_xml_family() -> None:
    assert LAB in XML_SAMPLES
    assert len(XML_SAMPLES) >= 9


@pytest.mark.parametrize("sample", XML_SAMPLES, ids=[p.stem for p in XML_SAMPLES])
def test_fast_and_slow_paths_give_the_same_facts(sample: Path) -> None:
    _same_facts_both_ways(_text(sample))


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(lambda t: "### fleetfix nvidia_smi expected_gpus=8\n" + t, id="marker"),
        pytest.param(lambda t: t.replace("\n", "\r\n"), id="crlf"),
        pytest.param(lambda t: "  \n\t" + t, id="leading-blank"),
        pytest.param(lambda t: t.split("\n", 2)[2], id="no-prolog"),
    ],
)
def test_fast_path_shapes_give_the_slow_paths_facts(shape: Callable[[str], str]) -> None:
    text = shape(_text(LAB))
    fast = read_clean_xml(text)
    assert fast is not None
    facts = nvidia_smi.parse(text)
    pasted = "$ nvidia-smi -q -x\n" + text.lstrip()  # a prompt: only the slow path takes it
    assert read_clean_xml(pasted) is None
    assert to_data(facts) == to_data(nvidia_smi.parse(pasted))
    assert facts.gpu_count == 8


def test_marker_sets_the_expected_count_on_the_fast_path() -> None:
    text = "### fleetfix nvidia_smi expected_gpus=7\n" + _text(LAB)
    fast = read_clean_xml(text)
    assert fast is not None
    assert [marker.get("expected_gpus") for marker in fast.markers] == ["7"]
    facts = nvidia_smi.parse(text)
    assert (facts.expected_gpus, facts.count_ok) == (7, False)


def _counting_clean_paste(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def counting(text: str) -> Paste:
        calls.append(text)
        return clean_paste(text)

    monkeypatch.setattr(nvidia_smi, "clean_paste", counting)
    return calls


def test_clean_xml_is_never_cleaned(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting_clean_paste(monkeypatch)
    assert nvidia_smi.parse(_text(LAB)).gpu_count == 8
    assert calls == []


@pytest.mark.parametrize(
    "pasted",
    [
        "$ nvidia-smi -q -x\n{xml}",
        "{xml}Unable to determine the device handle for GPU 0000:1B:00.0: Unknown Error\n",
        "{xml}garbage after the root\n",
    ],
    ids=["prompt", "tool-message-after", "garbage-after"],
)
def test_pasted_xml_is_cleaned_once(monkeypatch: pytest.MonkeyPatch, pasted: str) -> None:
    calls = _counting_clean_paste(monkeypatch)
    with contextlib.suppress(ProbeParseError):
        nvidia_smi.parse(pasted.format(xml=_text(LAB)))
    assert len(calls) == 1


# --- garbage stays loud --------------------------------------------------------------------


def test_garbage_after_the_root_is_refused_at_its_line() -> None:
    text = _text(LAB)
    lines = text.count("\n")
    with pytest.raises(ProbeParseError, match="malformed or truncated XML") as info:
        nvidia_smi.parse(text + "garbage after the root\n")
    assert info.value.line == lines + 1


def test_a_second_document_is_refused() -> None:
    with pytest.raises(ProbeParseError, match="malformed or truncated XML"):
        nvidia_smi.parse(_text(LAB) * 2)


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.99])
def test_truncated_lab_xml_is_refused_with_a_line(fraction: float) -> None:
    text = _text(LAB)
    cut = text[: int(len(text) * fraction)]
    with pytest.raises(ProbeParseError, match="malformed or truncated XML") as info:
        nvidia_smi.parse(cut)
    assert info.value.line is not None


@pytest.mark.parametrize(
    ("xml", "root"),
    [
        (
            '<?xml version="1.0"?>\n<nvidia_smi_logger><gpu/></nvidia_smi_logger>\n',
            "nvidia_smi_logger",
        ),
        (
            '<nvidia_smi_log xmlns="urn:x"><attached_gpus>1</attached_gpus></nvidia_smi_log>',
            "{urn:x}",
        ),
        ('<?xml version="1.0"?>\n<dcgm><gpu/></dcgm>\n', "dcgm"),
    ],
)
def test_another_root_is_refused(xml: str, root: str) -> None:
    with pytest.raises(ProbeParseError, match=re.escape(f"XML root is <{root}")):
        nvidia_smi.parse(xml)


def test_a_bad_value_on_the_fast_path_names_its_line() -> None:
    text = _text(LAB).replace("<gpu_temp>", "<gpu_temp>hot ", 1)
    with pytest.raises(ProbeParseError, match="expected a number, got 'hot") as info:
        nvidia_smi.parse(text)
    line = next(n for n, ln in enumerate(text.splitlines(), 1) if "<gpu_temp>hot" in ln)
    assert info.value.line == line


def test_an_undeclared_entity_is_left_to_the_slow_path_which_refuses_it() -> None:
    text = _text(LAB).replace("<product_brand>NVIDIA", "<product_brand>&brand;", 1)
    assert read_clean_xml(text) is None
    with pytest.raises(ProbeParseError, match="undefined entity"):
        nvidia_smi.parse(text)


def test_predefined_entities_stay_on_the_fast_path() -> None:
    text = _text(LAB).replace("NVIDIA H100 80GB HBM3", "NVIDIA H100 &amp; &#72;&#x31;", 1)
    _same_facts_both_ways(text)
    assert nvidia_smi.parse(text).gpus[0].name == "NVIDIA H100 & H1"


def test_comments_are_dropped_like_elementtree_does() -> None:
    text = _text(LAB).replace("NVIDIA H100 80GB HBM3", "NVIDIA H100<!-- a note --> 80GB", 1)
    _same_facts_both_ways(text)
    assert nvidia_smi.parse(text).gpus[0].name == "NVIDIA H100 80GB"


# --- entity attacks: refused loudly, never expanded -----------------------------------------

BILLION_LAUGHS = (
    '<?xml version="1.0"?>\n'
    "<!DOCTYPE nvidia_smi_log [\n"
    ' <!ENTITY lol "lol">\n'
    + "".join(
        f' <!ENTITY lol{n} "{f"&lol{n - 1};" * 10 if n > 1 else "&lol;" * 10}">\n'
        for n in range(1, 10)
    )
    + "]>\n"
    "<nvidia_smi_log><driver_version>&lol9;</driver_version></nvidia_smi_log>\n"
)
EXTERNAL_ENTITY = (
    '<?xml version="1.0"?>\n'
    '<!DOCTYPE nvidia_smi_log [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n'
    "<nvidia_smi_log><driver_version>&xxe;</driver_version></nvidia_smi_log>\n"
)
PARAMETER_ENTITY = (
    '<?xml version="1.0"?>\n'
    '<!DOCTYPE nvidia_smi_log [<!ENTITY % dtd SYSTEM "file:///etc/passwd"> %dtd;]>\n'
    "<nvidia_smi_log/>\n"
)
QUADRATIC_BLOWUP = (
    '<?xml version="1.0"?>\n'
    f'<!DOCTYPE nvidia_smi_log [<!ENTITY big "{"x" * 50_000}">]>\n'
    f"<nvidia_smi_log><driver_version>{'&big;' * 50_000}</driver_version></nvidia_smi_log>\n"
)
ATTACKS = {
    "billion-laughs": BILLION_LAUGHS,
    "external-entity": EXTERNAL_ENTITY,
    "parameter-entity": PARAMETER_ENTITY,
    "quadratic-blowup": QUADRATIC_BLOWUP,
}


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_entity_attacks_are_refused_before_parsing(attack: str) -> None:
    with pytest.raises(ProbeParseError, match="forbidden constructs") as info:
        read_clean_xml(attack)
    assert info.value.line == 2  # the DOCTYPE's line
    message = str(info.value)
    assert "lollol" not in message
    assert "root:" not in message
    assert len(message) < 1_000  # nothing expanded into the evidence


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_entity_attacks_are_refused_by_the_probe(attack: str) -> None:
    with pytest.raises(ProbeParseError, match="forbidden"):
        nvidia_smi.parse(attack)


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_the_parser_itself_never_returns_a_declaring_document(attack: str) -> None:
    """Past the prolog check (as a quoted `>` in the DOCTYPE could get), libxml2 expands
    nothing: it refuses the amplification itself (None: the slow path, defusedxml, then
    refuses too), or the declarations are refused from the parsed DTD."""
    try:
        root = nvidia_smi_fast._parse(attack.encode(), attack, 0)
    except ProbeParseError as exc:
        assert "declarations in the DOCTYPE" in exc.reason
        assert "lollol" not in str(exc)
        assert "root:" not in str(exc)
    else:
        assert root is None


def test_a_quoted_bracket_does_not_hide_an_internal_subset() -> None:
    sneaky = (
        '<?xml version="1.0"?>\n'
        '<!DOCTYPE nvidia_smi_log SYSTEM "a>b" [<!ELEMENT nvidia_smi_log ANY>]>\n'
        "<nvidia_smi_log/>\n"
    )
    with pytest.raises(ProbeParseError, match="forbidden"):
        nvidia_smi.parse(sneaky)


def test_nvidia_smis_own_doctype_is_accepted_and_not_fetched() -> None:
    text = _text(LAB).replace(
        '"nvsmi_device_v12.dtd"', '"http://127.0.0.1:9/nvsmi.dtd"', 1
    )  # port 9 (discard): a fetch would fail the parse
    assert "http://127.0.0.1:9/" in text
    _same_facts_both_ways(text)


def test_xml_nested_thousands_deep_is_a_parse_error_not_a_crash() -> None:
    deep = "<a>" * 5000 + "x" + "</a>" * 5000
    text = f'<?xml version="1.0" ?>\n<nvidia_smi_log>{deep}</nvidia_smi_log>\n'

    with pytest.raises(ProbeParseError, match="nested too deeply"):
        nvidia_smi.parse(text)


# --- the scan (nvidia-smi's layout read from the text) against the tree -----------------------


def _start(text: str) -> int:
    head = nvidia_smi_fast._head(text)
    assert head is not None
    return head[1]


def _tree(text: str) -> object:
    """What the tree reader makes of `text` (a reading, None, or the error it raises)."""
    try:
        reading = nvidia_smi_fast._read_tree(text, _start(text))
    except ProbeParseError as exc:
        return ("error", exc.reason, exc.line)
    return None if reading is None else to_data(summarize(reading))


def _scan(text: str) -> object:
    reading = nvidia_smi_scan.scan_report(text, _start(text))
    return None if reading is None else to_data(summarize(reading))


_GPU_ELEMENT = re.compile(r'\n([ \t]*)<gpu id="([^"]*)">.*?\n\1</gpu>', re.DOTALL)


def _with_gpus(text: str, count: int) -> str:
    """`text` with its first GPU printed `count` times, each copy with its own id, uuid and
    temperature (as the GPUs of one host differ), and attached_gpus to match."""
    match = _GPU_ELEMENT.search(text)
    assert match is not None
    copies = []
    for n in range(count):
        gpu = match[0].replace(f'id="{match[2]}"', f'id="{match[2][:-3]}{n:02X}.0"', 1)
        gpu = re.sub(r"(<uuid>[^<]*)(</uuid>)", rf"\g<1>{n}\2", gpu, count=1)
        gpu = re.sub(r"<gpu_temp>\d+ C<", f"<gpu_temp>{30 + n} C<", gpu, count=1)
        copies.append(gpu)
    body = text[: match.start()] + "".join(copies) + text[match.end() :]
    return re.sub(r"<attached_gpus>\d+<", f"<attached_gpus>{count}<", body, count=1)


@pytest.mark.parametrize("sample", XML_SAMPLES, ids=[p.stem for p in XML_SAMPLES])
@pytest.mark.parametrize("gpus", [None, 3], ids=["as-is", "3-gpus"])
def test_the_scan_reads_every_sample_as_the_tree_does(sample: Path, gpus: int | None) -> None:
    text = _text(sample) if gpus is None else _with_gpus(_text(sample), gpus)
    scanned = _scan(text)
    assert scanned is not None, "the scan was not sure of nvidia-smi's own output"
    assert scanned == _tree(text)


def test_the_probe_scans_output_with_several_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = to_data(nvidia_smi.parse(_text(LAB)))

    def no_tree(text: str, start: int) -> None:
        raise AssertionError("the tree read the lab's output")

    monkeypatch.setattr(nvidia_smi_fast, "_read_tree", no_tree)
    assert to_data(nvidia_smi.parse(_text(LAB))) == expected


def test_one_gpu_is_read_by_the_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan saves work where GPUs repeat; for one GPU the tree is as fast."""
    one = next(p for p in XML_SAMPLES if p.name.startswith("netdata"))
    trees: list[str] = []
    read_tree = nvidia_smi_fast._read_tree

    def counting(text: str, start: int) -> object:
        trees.append(text)
        return read_tree(text, start)

    monkeypatch.setattr(nvidia_smi_fast, "_read_tree", counting)
    nvidia_smi.parse(_text(one))
    assert len(trees) == 1


def _lab_line(text: str, needle: str, gpu: int) -> int:
    """The index of the line holding `needle` within the `gpu`-th GPU (0-based)."""
    lines = text.split("\n")
    starts = [n for n, line in enumerate(lines) if line.startswith('\t<gpu id="')]
    return next(n for n in range(starts[gpu], len(lines)) if needle in lines[n])


def _edit_line(text: str, needle: str, gpu: int, edit: Callable[[str], str]) -> str:
    lines = text.split("\n")
    at = _lab_line(text, needle, gpu)
    lines[at] = edit(lines[at])
    return "\n".join(lines)


def _set_value(text: str, tag: str, gpu: int, value: str) -> str:
    return _edit_line(text, f"<{tag}>", gpu, lambda s: re.sub(r">[^<]*<", f">{value}<", s, count=1))


SCAN_DECLINES: dict[str, Callable[[str], str]] = {
    "error-value": lambda t: _set_value(t, "gpu_temp", 5, "Unknown Error"),
    "bad-value": lambda t: _set_value(t, "power_draw", 4, "hot"),
    "attribute": lambda t: _edit_line(t, "<fabric>", 2, lambda s: s.replace(">", ' a="1">')),
    "same-line": lambda t: _edit_line(t, "<uuid>", 3, lambda s: s + "<extra>1</extra>"),
    "comment": lambda t: _edit_line(t, "<serial>", 6, lambda s: s + "<!-- x -->"),
    "cdata": lambda t: _edit_line(t, "<vbios_version>", 1, lambda s: s + "<![CDATA[x]]>"),
    "pi": lambda t: _edit_line(t, "<minor_number>", 7, lambda s: s + "<?pi x?>"),
    "carriage-return": lambda t: t.replace("\n", "\r\n"),
    "reference": lambda t: _edit_line(t, "<product_brand>", 4, lambda s: s.replace("N", "&#78;")),
    "mis-indented": lambda t: _edit_line(t, "<clocks>", 3, lambda s: s + "\n\t\t<clocks>"),
}


@pytest.mark.parametrize("edit", SCAN_DECLINES.values(), ids=SCAN_DECLINES.keys())
def test_what_the_scan_is_not_sure_of_is_read_as_before(edit: Callable[[str], str]) -> None:
    """The tree reads it (or the slow path, where the tree refuses), as before the scan."""
    text = edit(_text(LAB))
    assert _scan(text) is None
    tree = _tree(text)
    if tree is None:  # libxml2 refused it: the slow path reads the paste
        tree = _outcome(nvidia_smi._parse_pasted, text)
    assert _outcome(nvidia_smi.parse, text) == tree


def _outcome(parse: Callable[[str], object], text: str) -> object:
    try:
        return to_data(parse(text))
    except ProbeParseError as exc:
        return ("error", exc.reason, exc.line)


def test_a_bad_value_in_a_later_gpu_names_its_line() -> None:
    text = SCAN_DECLINES["bad-value"](_text(LAB))
    with pytest.raises(ProbeParseError, match="power: expected a number, got 'hot'") as info:
        nvidia_smi.parse(text)
    assert info.value.line == _lab_line(text, "<power_draw>hot<", 4) + 1


@pytest.mark.parametrize("gpu", [0, 3, 7])
def test_malformed_xml_where_gpus_repeat_is_refused_as_before(gpu: int) -> None:
    """A GPU child that repeats the GPU before is left out of what libxml2 reads; one
    broken anywhere differs from its neighbour's, so libxml2 still reads it and refuses."""
    text = _edit_line(_text(LAB), "<supported_graphics_clock>1005", gpu, lambda s: s[:-9])
    assert _scan(text) is None
    with pytest.raises(ProbeParseError, match="malformed or truncated XML"):
        nvidia_smi.parse(text)


def test_the_same_break_in_every_gpu_is_refused_too() -> None:
    text = _text(LAB).replace("<value>2619 MHz</value>", "<value>2619 MHz</valu>")
    assert text != _text(LAB)
    assert _scan(text) is None
    with pytest.raises(ProbeParseError, match="malformed or truncated XML"):
        nvidia_smi.parse(text)


def _mutants(text: str, count: int, seed: int) -> list[str]:
    """`count` texts, each `text` with one line deleted, repeated, moved, re-indented,
    cut, joined with the next, or its value replaced (seeded: the same every run)."""
    rng = random.Random(seed)
    lines = text.split("\n")
    values = ["N/A", "0", "ERR!", "Yes", "42 C", "7.5 W", "", "x<y", "[N/A]", "1e3"]
    found = []
    for _ in range(count):
        copy = list(lines)
        at = rng.randrange(len(copy) - 1)
        match rng.randrange(7):
            case 0:
                del copy[at]
            case 1:
                copy.insert(at, copy[at])
            case 2:
                copy.insert(rng.randrange(len(copy)), copy.pop(at))
            case 3:
                copy[at] = rng.choice(["\t", "", "  "]) + copy[at].lstrip("\t")
            case 4:
                copy[at] = copy[at][: rng.randrange(len(copy[at]) + 1)]
            case 5:
                copy[at : at + 2] = [copy[at] + copy[at + 1].lstrip()]
            case _:
                copy[at] = re.sub(r">[^<]*<", f">{rng.choice(values)}<", copy[at], count=1)
        found.append("\n".join(copy))
    return found


MUTATED = [
    *_mutants(_text(LAB), 160, seed=21),
    *_mutants(_with_gpus(_text(XML_SAMPLES[2]), 3), 60, seed=22),
    *_mutants(_with_gpus(_text(XML_SAMPLES[-1]), 2), 60, seed=23),
]


def test_what_the_scan_reads_from_damaged_output_the_tree_reads_too() -> None:
    """Wherever the scan gives a reading, the tree gives the same one; the mutants are
    chosen so that the scan still reads most of them (else the test would prove little)."""
    scanned = 0
    for text in MUTATED:
        if nvidia_smi_fast._head(text) is None:
            continue
        reading = _scan(text)
        if reading is not None:
            scanned += 1
            assert reading == _tree(text), text
    assert scanned > len(MUTATED) // 3
