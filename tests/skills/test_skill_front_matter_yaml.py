"""SKILL.md front matter reads back, under a real YAML parser, as the strings refold wrote: a
name or description YAML takes for a number, boolean, null or date is quoted."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.skills import parse_skill
from refold.skills.format import Skill, make_skill

ODD = ["123", "1.5", "-1", "+1", ".5", "1e3", "1_000", "0x1f", "0o17", "0b101", "012", "1:20",
       "2024-01-01", "2001-12-14t21:59:43.10-05:00", "2001-12-14 21:59:43.10 -5", "true",
       "True", "FALSE", "yes", "No", "on", "OFF", "y", "n", "null", "Null", "NULL", "~", ".inf",
       "-.inf", ".nan", "nul", "nan", "inf", "=", "<<", "-", "?", "? x", "- x", "a: b", "a #b",
       "#x", "@x", "%x", "`x`", "'x'", '"x"', "x:", " x", "x ", "[x]", "{x}", "*x", "&x", "!x",
       "|", "> x", "a,b", "\ufeffx", "a\u2028b", "a\u2029b", "a\x85b", "a\tb", "a\rb", "\x7f",
       "a\x9fb", "a\u00a0", "1 step", "k8s"]


def front_matter(text: str) -> dict[str, Any]:
    lines = text.split("\n")  # the block between the first two lines that are "---"
    end = next(i for i in range(1, len(lines)) if lines[i] == "---")
    loaded = yaml.safe_load("\n".join(lines[1:end]))
    assert isinstance(loaded, dict)
    return loaded


@pytest.mark.parametrize("name", ["123", "2024-01-01", "1e3", "0x1f", "y", "yes", "no", "on",
                                  "off", "true", "null", "nul", "1-5", "ship-it"])
def test_a_name_reads_back_as_the_same_string(name: str) -> None:
    skill = make_skill(name, "When releasing.", "1. go\n")
    assert front_matter(skill.render())["name"] == name
    assert parse_skill(skill.render(), expected_name=name) == skill


@pytest.mark.parametrize("value", ODD)
def test_an_odd_value_reads_back_as_the_same_string(value: str) -> None:
    skill = Skill("ship-it", "When releasing.", "1. go\n", {"note": value})
    assert front_matter(skill.render())["note"] == value
    assert parse_skill(skill.render()).extra == {"note": value}


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(ODD) | st.text(min_size=1)
       | st.from_regex(r"[0-9a-zA-Z.:_+~ -]{1,10}", fullmatch=True))
def test_any_value_reads_back_as_the_same_string(value: str) -> None:
    skill = Skill("ship-it", "When releasing.", "1. go\n", {"note": value})
    assert front_matter(skill.render())["note"] == value
    assert parse_skill(skill.render()).extra == {"note": value}


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1).filter(str.strip))
def test_any_description_reads_back_as_the_same_string(value: str) -> None:
    skill = make_skill("ship-it", value, "1. go\n")
    assert front_matter(skill.render())["description"] == skill.description
    assert parse_skill(skill.render()) == skill


def test_plain_values_stay_plain() -> None:
    skill = Skill("ship-it", "How to ship a release of this project safely.", "1. go\n",
                  {"license": "MIT"})
    assert skill.render().startswith("---\nname: ship-it\ndescription: How to ship a release "
                                     "of this project safely.\nlicense: MIT\n---\n")
