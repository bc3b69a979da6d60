"""What ``refold import`` reads of a session in refold's JSON export to keep a fork's link
(``refold.cli.transcripts._stand_in``): where its copies end (``fork_seq``), when it was made
(``started_at``) and each active message's seq there; anything else in those fields is None."""

from __future__ import annotations

import json

from refold.messages.load import load_export


def _message(seq: object, active: bool = True) -> dict[str, object]:
    return {"seq": seq, "active": active, "created_at": 1.7e9 + 1,
            "message": {"role": "user", "content": f"m{seq}"}}


def test_the_fork_fields_of_an_exported_session() -> None:
    doc = {"format": "refold.export/1", "sessions": [
        {"id": "f" * 32, "parent_session_id": "p" * 32, "link_kind": "fork", "fork_seq": 37,
         "started_at": 1.7e9 + 5,
         "messages": [_message(1), _message(2, active=False), _message(3)]},
        {"id": "o" * 32, "fork_seq": True, "started_at": "yesterday",
         "messages": [_message("x"), _message(None)]}]}
    fork, odd = load_export(json.dumps(doc)) or []
    assert (fork.fork_seq, fork.started_at, fork.seqs) == (37, 1.7e9 + 5, [1, 3])
    assert fork.rewound == 1 and len(fork.messages) == 2
    # not whole numbers or times: None, and a message's seq its place in the list
    assert (odd.fork_seq, odd.started_at, odd.seqs) == (None, None, [1, 2])
