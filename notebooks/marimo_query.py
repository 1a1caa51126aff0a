"""dni_lab in marimo: ``dl.query`` instead of the ``%%inspect`` magic, panels as anywidgets.

marimo has no IPython magics, but it runs anywidgets (``mo.ui.anywidget``) and
plain Python. Open it with ``marimo edit notebooks/marimo_query.py``; CI runs it
as a script (``python notebooks/marimo_query.py``), which executes every cell.
The model is a small untrained character LSTM, so the scores are modest: the
point is the workflow, not the finding (see notebooks 02 and 09 for trained ones).
"""

import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    import marimo as mo
    import torch
    from torch import nn

    import dni_lab as dl
    from dni_lab.widgets import ScoreTable
    from hypotheses.workloads import sql

    return ScoreTable, dl, mo, nn, sql, torch


@app.cell
def _(dl, nn, sql, torch):
    class CharLSTM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(128, 16)
            self.lstm = nn.LSTM(16, 32, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lstm(self.embed(x))[0]

    def encode(records: list[str]) -> torch.Tensor:
        width = max(len(r) for r in records)
        rows = [[min(ord(c), 127) for c in r] + [0] * (width - len(r)) for r in records]
        return torch.tensor(rows)

    torch.manual_seed(0)
    model = dl.Model(CharLSTM(), encode=encode, name="sql-lstm")
    texts = [str(w) for w in sql.records(40)]

    @dl.hypothesis(name="keyword", kind="binary")
    def keyword(record: str) -> list[bool]:
        """Inside an SQL keyword (upper case in the generated queries)."""
        return [c.isupper() for c in record]

    return keyword, model, texts


@app.cell
def _(dl, keyword, model, texts):
    # What a %%inspect cell holds, as a string: the namespace is this cell's variables.
    scores = dl.query(
        """
        SELECT S.uid, S.unit_score
        INSPECT model AND keyword OVER texts
        HAVING S.layer = 'lstm'
        ORDER BY ABS(S.unit_score) DESC
        LIMIT 5
        """,
        namespace={"model": model, "keyword": keyword, "texts": texts},
        eps=None,
    )
    print("dl.query in marimo:", scores.height, "rows;", scores.columns)
    return (scores,)


@app.cell
def _(ScoreTable, mo, scores):
    # The score table is an anywidget: marimo renders it and syncs its traits.
    table = mo.ui.anywidget(ScoreTable(scores))
    table  # noqa: B018  (a cell's last expression is what marimo shows)
    return (table,)


if __name__ == "__main__":
    app.run()
