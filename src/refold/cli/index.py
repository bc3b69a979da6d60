"""``refold index``: embed stored messages for vector and hybrid search (``refold[embed]``).

Appends never embed; this command (or the background indexer of ``refold serve`` / ``refold
chat``) does, oldest missing first (``refold.search.indexer``), so it is resumable: stop it at
any point (Ctrl-C included) and the next run carries on with what is still missing, with no
message embedded twice.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from refold.cli.app import AppContext, emit, pass_app


@click.command("index")
@click.option("--batch", type=click.IntRange(1, 1024), default=32, show_default=True,
              help="Messages embedded per step.")
@click.option("--limit", type=click.IntRange(1), default=None,
              help="Stop after this many messages (default: all missing).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_app
def index_cmd(app: AppContext, batch: int, limit: int | None, as_json: bool) -> None:
    """Seal the word index, then embed messages with no vector yet (resumable).

    The word index (SQLite) ranks sentence queries on large archives; searches seal it one
    block of 4,096 messages at a time otherwise. The full-text indexes' segments are merged
    too (fewer pages for a question to read). The embeddings serve --mode vector/hybrid.

    Shows a progress bar. Stop it any time (Ctrl-C) and run it again to go on: nothing is
    embedded twice. Once messages are indexed, `refold search` and recall default to
    --mode hybrid, and serve/chat keep new messages embedded in the background
    (embed_background = auto).
    """
    from refold.search.indexer import backfill, missing_count
    from refold.search.vectors import load_embedder

    store = app.store
    seal = getattr(store, "seal_word_index", None)  # SQLite: the word impact index first
    sealed = 0
    if seal is not None:
        if as_json:
            sealed = seal()
        else:
            with click.progressbar(length=1, label="word index", show_pos=True) as words:
                def step_words(done: int, total: int) -> None:
                    words.length = total
                    words.update(done - words.pos)
                sealed = seal(step_words)
                if not sealed:  # nothing to seal: no step came, and the bar stood at 0/1
                    words.length = 0
                    words.finish()
                    words.render_progress()
    embedder = load_embedder()
    missing = missing_count(store, embedder.model)
    done = 0
    interrupted = False

    def step(count: int) -> None:
        nonlocal done
        done += count
        if bar is not None:
            bar.update(count)

    bar: Any = None
    try:
        if as_json or not missing:
            backfill(store, embedder, batch=batch, limit=limit, progress=step)
        else:
            with click.progressbar(length=min(missing, limit or missing), label="embedding",
                                   show_pos=True, show_eta=True) as bar:
                backfill(store, embedder, batch=batch, limit=limit, progress=step)
    except KeyboardInterrupt:  # every finished batch is stored; the rest waits for a rerun
        interrupted = True
    left = max(missing - done, 0)
    emit({"embedded": done, "remaining": left, "interrupted": interrupted,
          "model": embedder.model, "word_blocks_sealed": sealed}, as_json, _render)
    if interrupted:  # what was done is said above; the status is an interrupt's, as elsewhere
        sys.exit(130)  # (SystemExit: cli.main runs click outside standalone mode)


def _render(result: dict[str, Any]) -> None:
    line = f"embedded {result['embedded']} messages ({result['model']})"
    if result.get("word_blocks_sealed"):
        line = f"sealed {result['word_blocks_sealed']} word-index blocks; " + line
    if result["interrupted"]:
        line = "interrupted: " + line
    if result["remaining"]:
        line += f"; {result['remaining']} still missing: run `refold index` again to go on"
    click.echo(line)
