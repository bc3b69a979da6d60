"""``refold index``: embed stored messages for vector and hybrid search (``refold[embed]``).

Appends never embed; this command (or a background indexer) does, oldest missing first, so it
is resumable: stop it at any point and the next run carries on with what is still missing.
"""

from __future__ import annotations

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
    """Embed messages that have no vector yet (resumable), for --mode vector/hybrid."""
    from refold.search.vectors import VectorIndex, load_embedder

    store = app.store
    index = VectorIndex(store, load_embedder())
    if as_json:
        done = index.backfill(batch=batch, limit=limit)
    else:
        total = int(store.info().get("messages", 0) or 0)  # an upper bound: some may be done
        bar: Any
        with click.progressbar(length=limit or max(total, 1), label="embedding",
                               show_pos=True) as bar:
            done = index.backfill(batch=batch, limit=limit,
                                  progress=lambda n: bar.update(n))
    emit({"embedded": done, "model": index.embedder.model}, as_json,
         lambda r: click.echo(f"embedded {r['embedded']} messages ({r['model']})"))
