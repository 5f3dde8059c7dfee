"""The nvidia_smi fast path (one clean `-q -x` document, lxml) against the slow path.

The slow path (clean the paste, defusedxml, the generic report tree) is the oracle: on every
XML sample both must give the same facts. Entity attacks must fail loudly without expanding.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetfix.errors import ProbeParseError
from fleetfix.probes import nvidia_smi, nvidia_smi_fast
from fleetfix.probes.base import to_data
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
