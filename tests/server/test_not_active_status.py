"""A rewind or fork whose row another writer rewound a moment ago is a 409 the client may
retry (after the runtime's own attempts), never a 400 its SDK would not retry; a wrong seq
from a user of the CLI is still invalid input (exit 2)."""

from __future__ import annotations

from refold.errors import InvalidInput, NotActive
from refold.server.wire import status_for


def test_a_row_rewound_meanwhile_is_a_conflict_to_retry() -> None:
    status, body = status_for(NotActive("session s has no active message 4"))
    assert status == 409 and body["error"]["type"] == "conflict_error"
    assert "send the request again" in body["error"]["message"]
    assert status_for(InvalidInput("bad"))[0] == 400
    assert NotActive("x").exit_code == 2
