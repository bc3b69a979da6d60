"""SWE-agent's in-context demonstration (another task's worked example, sent as a user message
before the real issue) is no goal and no constraint of this session, and a URL's last part
(``sect_C.7.6.24.html``) is no file the session touched."""

from __future__ import annotations

from typing import Any

from refold.compaction import compact

DEMO = ("Here is a demonstration of how to correctly accomplish this task.\nIt is included to "
        "show you how to correctly use the interface.\n--- DEMONSTRATION ---\nWe're currently "
        "solving the following issue: TimeDelta serialization precision in marshmallow.\n"
        "```\nopen src/marshmallow/fields.py 1474\n```\n"
        "[File: /marshmallow-code__marshmallow/src/marshmallow/fields.py (1997 lines total)]\n"
        "```python\nfrom marshmallow.fields import TimeDelta\n```\n"
        "SyntaxError: unmatched ')'\n" + "The demonstration goes on with more steps.\n" * 60 +
        "Now that we have fixed the issue, we should submit our changes to the code base.\n"
        "--- END OF DEMONSTRATION ---")
ISSUE = ("We're currently solving the following issue within our repository: the pixel data "
         "handler ignores Pixel Representation, see "
         "http://dicom.nema.org/medical/dicom/current/output/chtml/part03/sect_C.7.6.24.html")


def session() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."},
                                      {"role": "user", "content": DEMO},
                                      {"role": "user", "content": ISSUE}]
    for i in range(30):
        messages += [{"role": "assistant", "content": f"Looking at part {i}.\n```\nls -F\n```"},
                     {"role": "user", "content": "numpy_handler.py\nsetup.py\n" * 30}]
    return messages


def test_the_demonstration_is_no_goal_and_a_url_is_no_file() -> None:
    result = compact(session(), context_length=4000)
    summary = result.report.summary
    assert result.report.summarized > 0 and summary
    goal = summary.split("## ")[1]
    assert "pixel data handler" in goal and "demonstration" not in goal.lower()
    assert "Now that we have fixed the issue" not in summary
    assert "24.html" not in summary.replace("sect_C.7.6.24.html", "")
    assert "marshmallow" not in summary  # nor its identifiers in the anchor index
