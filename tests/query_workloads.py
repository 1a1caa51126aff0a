"""Small, quickly built workloads for the query tests: the paper's SQL model and the blog's
PacMan-like CNN, each as checkpoints whose 'training' moves one unit toward a known detector.

Checkpoint ``alpha`` blends random weights with hand-set ones, so a test knows which unit
should score high at which epoch without training anything.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import dni_lab as dl

SQL_VOCAB = "SELECTFROMWHEANDGUPBYabcdefghijklmnopqrstuvwxyz0123456789 ,=*<>()"
KEYWORDS = ("SELECT", "FROM", "WHERE", "AND", "GROUP BY", "ORDER BY")

# DeepBase §4.1, character for character (the paper sets it one clause per line).
PAPER_QUERY = """SELECT M.epoch, S.uid
INSPECT U.uid AND H.h USING corr OVER D.seq AS S
FROM models M, units U, hypotheses H, inputs D
WHERE M.mid = U.mid AND M.mid = 'sqlparser' AND
U.layer = 0 AND H.name = 'keywords'
GROUP BY M.epoch
HAVING S.unit_score > 0.8"""


def sql_records(n: int, seed: int = 0) -> list[str]:
    """Random SQL-like strings: upper-case keywords, lower-case names, digits."""
    rng = np.random.default_rng(seed)

    def name() -> str:
        return "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), rng.integers(1, 4)))

    def query() -> str:
        cols = ", ".join(name() for _ in range(rng.integers(1, 3)))
        clauses = [f"SELECT {cols} FROM {name()}"]
        if rng.random() < 0.6:
            clauses.append(f"WHERE {name()} = {rng.integers(0, 99)}")
            if rng.random() < 0.5:
                clauses.append(f"AND {name()} > {rng.integers(0, 9)}")
        return " ".join(clauses)

    return [query() for _ in range(n)]


def encode_sql(records: list[str]) -> torch.Tensor:
    """One-hot characters, zero-padded: (R, T, V)."""
    T = max(len(r) for r in records)
    x = torch.zeros(len(records), T, len(SQL_VOCAB))
    for i, r in enumerate(records):
        idx = torch.tensor([SQL_VOCAB.index(c) for c in r])
        x[i, torch.arange(len(r)), idx] = 1.0
    return x


class SQLNet(nn.Module):
    """Layer 0 is the LSTM (the paper inspects layer 0 of its SQL auto-completion model)."""

    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.lstm = nn.LSTM(len(SQL_VOCAB), hidden, batch_first=True)
        self.head = nn.Linear(hidden, len(SQL_VOCAB))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(x)[0])


def sql_checkpoint(alpha: float, seed: int = 0) -> SQLNet:
    """Unit 0 of the LSTM becomes an upper-case (keyword) detector as ``alpha`` goes to 1."""
    torch.manual_seed(seed)
    net = SQLNet()
    H = net.lstm.hidden_size
    upper = torch.tensor([4.0 if c.isupper() else -4.0 for c in SQL_VOCAB])
    with torch.no_grad():
        w, b = net.lstm.weight_ih_l0, net.lstm.bias_ih_l0
        target = {0: (0.0, 6.0), H: (0.0, -6.0), 3 * H: (0.0, 6.0)}  # gates i, f, o
        for row, (wv, bv) in target.items():
            w[row] = (1 - alpha) * w[row] + alpha * wv
            b[row] = (1 - alpha) * b[row] + alpha * bv
        w[2 * H] = (1 - alpha) * w[2 * H] + alpha * upper  # the cell input g
        net.lstm.weight_hh_l0[[0, H, 2 * H, 3 * H]] *= 1 - alpha
        net.lstm.bias_hh_l0[[0, H, 2 * H, 3 * H]] *= 1 - alpha
    return net


def sql_checkpoints(epochs=(1, 2, 3)) -> list[dl.Model]:
    """The 'sqlparser' model at several epochs (shared name, distinct ``epoch`` metadata)."""
    alphas = np.linspace(0.0, 1.0, len(epochs))
    return [
        dl.Model(sql_checkpoint(a), encode=encode_sql, name="sqlparser", meta={"epoch": e})
        for e, a in zip(epochs, alphas, strict=True)
    ]


@dl.hypothesis(name="keywords")
def keywords(record: str) -> list[bool]:
    """1 on the characters of SQL keywords (upper case in these records)."""
    return [c.isupper() for c in record]


# -- the blog's PacMan-like agent --------------------------------------------------------
ROAD, WALL, DOT, PACMAN, GHOST = range(5)


def grids(n: int, seed: int = 0, h: int = 7, w: int = 9) -> list[np.ndarray]:
    """Random maps with one PacMan and one ghost."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        g = rng.choice([ROAD, WALL, DOT], size=(h, w), p=[0.4, 0.3, 0.3])
        cells = rng.choice(h * w, 2, replace=False)
        g.flat[cells[0]], g.flat[cells[1]] = PACMAN, GHOST
        out.append(g.astype(np.int64))
    return out


def encode_grids(records: list[np.ndarray]) -> torch.Tensor:
    x = torch.as_tensor(np.stack(records))
    return nn.functional.one_hot(x, 5).permute(0, 3, 1, 2).float()


class Agent(nn.Module):
    """conv1 (layer 0), conv2 (layer 1, 16 units), conv3 (layer 2), a move head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(5, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.conv3 = nn.Conv2d(16, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.relu(self.conv3(torch.relu(self.conv2(torch.relu(self.conv1(x))))))
        return self.head(z.mean((2, 3)))


def agent_checkpoint(alpha: float, seed: int = 0) -> Agent:
    """Unit 14 of layer 1 (conv2) becomes a ghost detector as ``alpha`` goes to 1."""
    torch.manual_seed(seed)
    net = Agent()
    with torch.no_grad():
        net.conv1.weight[0] *= 1 - alpha
        net.conv1.weight[0, GHOST, 1, 1] += alpha
        net.conv1.bias[0] *= 1 - alpha
        net.conv2.weight[14] *= 1 - alpha
        net.conv2.weight[14, 0, 1, 1] += alpha
        net.conv2.bias[14] *= 1 - alpha
    return net


def agent_checkpoints(epochs=(0, 25, 50, 100)) -> list[dl.Model]:
    alphas = [min(1.0, e / 50) for e in epochs]
    return [
        dl.Model(agent_checkpoint(a), encode=encode_grids, name="pacman", meta={"epoch": e})
        for e, a in zip(epochs, alphas, strict=True)
    ]


@dl.hypothesis(name="ghost")
def f_ghost(grid: np.ndarray) -> np.ndarray:
    """The blog's f_ghost: 1 on the ghost's pixel."""
    return (grid == GHOST).reshape(-1)


def _ghost_after(grid: np.ndarray, n: int) -> np.ndarray:
    """Where the ghost is after ``n`` steps if it keeps walking right (wrapping around)."""
    r, c = np.argwhere(grid == GHOST)[0]
    out = np.zeros_like(grid, dtype=bool)
    out[r, (c + n) % grid.shape[1]] = True
    return out.reshape(-1)


@dl.hypothesis_family(signals=["ghost_1", "ghost_2", "ghost_4", "ghost_8"], name="ghost_ahead")
def ghost_ahead(grid: np.ndarray) -> dict[str, np.ndarray]:
    """The blog's f_ghost_N: the ghost's simulated position N ∈ {1, 2, 4, 8} steps ahead."""
    return {f"ghost_{n}": _ghost_after(grid, n) for n in (1, 2, 4, 8)}


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: the test machine's two cores are shared, and spinning threads of a
    tiny LSTM cost ten times more than they save."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def toy_catalog(epochs: tuple[int, ...] = (1, 2)) -> dl.Catalog:
    """A catalog of tiny char LSTMs (one per epoch), 20 random records and a paren hypothesis."""
    from conftest import CharLM, encode_chars, random_records

    cat = dl.Catalog()
    for epoch in epochs:
        torch.manual_seed(epoch)
        cat.add_model(dl.Model(CharLM(hidden=4), encode_chars, name="toy"), epoch=epoch)
    cat.add_inputs(random_records(20), "chars")

    @dl.hypothesis
    def paren(r):
        return [c in "()" for c in r]

    cat.add_hypothesis(paren)
    return cat
