"""A PacMan-like grid world: mazes, a ghost, a scripted agent and ghost hypotheses.

Maps are 15 x 19 arrays of cell codes (:data:`EMPTY`, :data:`WALL`, :data:`DOT`,
:data:`PILL`, :data:`PACMAN`, :data:`GHOST`). Each step PacMan moves
(``0..3`` = ←↑→↓, :data:`MOVES`), eats the dot or power pill it lands on, then
the ghost moves: with probability ``ghost_noise`` to a random open neighbour,
otherwise one step along a shortest path towards PacMan (away from him while
the pill's power lasts). Meeting the ghost ends the episode, unless PacMan is
powered: then the ghost is eaten and restarts at its home cell. Every random
draw comes from one generator seeded per episode, so :func:`generate` is
deterministic under its seed.

The scripted agent (:func:`agent_move`) reads only the map: it walks the
shortest path to the nearest dot or pill that avoids cells within
``avoid`` steps of the ghost, and flees when there is none. That makes the
next move a function of the map, learnable by imitation
(:mod:`hypotheses.workloads.gridworld_cnn`). Its move depends on the ghost only
when the ghost stands next to its path; the fleeing agent (:func:`flee_move`,
``play_episode(agent=...)``) runs from the ghost whenever it is within
``radius`` steps, so its move depends on the ghost in most maps
(:mod:`hypotheses.workloads.gridworld_flee`).

Records are :class:`Frame` arrays: plain ``(15, 19)`` maps that also remember
their episode and step, as source windows remember their source. That is what
:class:`GhostInNSteps` needs to read the ghost's *future* from the recorded
episode (DeepBase's "does PacMan anticipate?" study).
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from .images import CellEquals, MaskHypothesis, as_array, dilate

H, W = 15, 19
EMPTY, WALL, DOT, PILL, PACMAN, GHOST = range(6)
CODES = ("empty", "wall", "dot", "pill", "pacman", "ghost")
MOVES = ((0, -1), (-1, 0), (0, 1), (1, 0))  # ← ↑ → ↓: the index is the action label
MOVE_NAMES = ("left", "up", "right", "down")
_FAR = 10**6  # path length between cells that do not connect


@dataclass
class Maze:
    """Open cells of a wall layout, their neighbours and all-pairs path lengths."""

    walls: np.ndarray
    cells: list[tuple[int, int]]
    index: np.ndarray  # (H, W) cell index, -1 on walls
    nbrs: list[list[tuple[int, int]]]  # per cell: (move, neighbour index), in MOVES order
    dist: np.ndarray  # (n, n) shortest path lengths; a large number if unreachable


def build_maze(walls: np.ndarray) -> Maze:
    """Index the open cells of ``walls`` and compute their shortest path lengths."""
    walls = np.asarray(walls, dtype=bool)
    cells = [(int(r), int(c)) for r, c in zip(*np.nonzero(~walls), strict=True)]
    index = np.full(walls.shape, -1, dtype=np.int64)
    for i, (r, c) in enumerate(cells):
        index[r, c] = i
    nbrs = []
    for r, c in cells:
        out = []
        for m, (dr, dc) in enumerate(MOVES):
            rr, cc = r + dr, c + dc
            if 0 <= rr < walls.shape[0] and 0 <= cc < walls.shape[1] and index[rr, cc] >= 0:
                out.append((m, int(index[rr, cc])))
        nbrs.append(out)
    n = len(cells)
    rows = [u for u in range(n) for _ in nbrs[u]]
    adj = csr_matrix((np.ones(len(rows)), (rows, [v for u in nbrs for _, v in u])), shape=(n, n))
    d = shortest_path(adj, unweighted=True) if n else np.zeros((0, 0))
    dist = np.where(np.isfinite(d), d, _FAR).astype(np.int64)  # walls never move: once per maze
    return Maze(walls, cells, index, nbrs, dist)


def make_walls(rng: np.random.Generator, loops: float = 0.3) -> np.ndarray:
    """A random 15 x 19 maze: a spanning tree of the odd cells, plus extra openings.

    ``loops`` is the share of remaining inner walls between two corridors that
    are knocked down, so the maze has cycles and PacMan can circle the ghost.
    """
    walls = np.ones((H, W), dtype=bool)
    rows, cols = range(1, H, 2), range(1, W, 2)
    start = (int(rng.choice(list(rows))), int(rng.choice(list(cols))))
    walls[start] = False
    stack = [start]
    while stack:  # randomized depth-first search carving corridors
        r, c = stack[-1]
        options = [
            (r + 2 * dr, c + 2 * dc)
            for dr, dc in MOVES
            if 0 < r + 2 * dr < H and 0 < c + 2 * dc < W and walls[r + 2 * dr, c + 2 * dc]
        ]
        if not options:
            stack.pop()
            continue
        nr, nc = options[int(rng.integers(len(options)))]
        walls[(r + nr) // 2, (c + nc) // 2] = walls[nr, nc] = False
        stack.append((nr, nc))
    inner = [
        (r, c)
        for r in range(1, H - 1)
        for c in range(1, W - 1)
        if walls[r, c]
        and (r % 2) != (c % 2)
        and (
            (not walls[r - 1, c] and not walls[r + 1, c])
            or (not walls[r, c - 1] and not walls[r, c + 1])
        )
    ]
    for k in np.nonzero(rng.random(len(inner)) < loops)[0]:
        walls[inner[k]] = False
    return walls


def _find(grid: np.ndarray, code: int) -> tuple[int, int] | None:
    hits = np.flatnonzero(grid == code)
    return divmod(int(hits[0]), grid.shape[1]) if len(hits) else None


def agent_move(grid: np.ndarray, maze: Maze | None = None, avoid: int = 2) -> int:
    """The scripted agent's next move (``0..3``) for a map ``grid``.

    Breadth-first search from PacMan to the nearest dot or pill through cells
    farther than ``avoid`` steps from the ghost; ties go to the earlier move of
    :data:`MOVES`. With no safe path it steps to the neighbour farthest from
    the ghost.
    """
    grid = np.asarray(grid)
    maze = maze if maze is not None else build_maze(grid == WALL)
    pac = _find(grid, PACMAN)
    if pac is None:
        raise ValueError("agent_move: the map has no PacMan.")
    p = int(maze.index[pac])
    ghost = _find(grid, GHOST)
    gdist = maze.dist[maze.index[ghost]] if ghost is not None else None
    food = ((grid == DOT) | (grid == PILL)).reshape(-1)
    first = {p: -1}
    queue = deque([p])
    while queue:
        u = queue.popleft()
        for m, v in maze.nbrs[u]:
            if v in first or (gdist is not None and gdist[v] <= avoid):
                continue
            first[v] = m if u == p else first[u]
            r, c = maze.cells[v]
            if food[r * grid.shape[1] + c]:
                return first[v]
            queue.append(v)
    options = maze.nbrs[p]
    if gdist is None:
        return options[0][0]
    return max(options, key=lambda mv: (gdist[mv[1]], -mv[0]))[0]


def flee_move(grid: np.ndarray, maze: Maze | None = None, radius: int = 6, avoid: int = 2) -> int:
    """The fleeing agent's next move (``0..3``) for a map ``grid``.

    With the ghost within ``radius`` maze steps of PacMan, step to the
    neighbour farthest from the ghost (in a grid maze every neighbour is one
    step nearer or one step farther); ties go to the neighbour nearer to a dot
    or pill, then to the earlier move of :data:`MOVES`. With the ghost farther
    away, or absent, move as :func:`agent_move` does.
    """
    grid = np.asarray(grid)
    maze = maze if maze is not None else build_maze(grid == WALL)
    pac, ghost = _find(grid, PACMAN), _find(grid, GHOST)
    if pac is None:
        raise ValueError("flee_move: the map has no PacMan.")
    p = int(maze.index[pac])
    if ghost is None or maze.dist[p, maze.index[ghost]] > radius:
        return agent_move(grid, maze, avoid)
    gdist = maze.dist[maze.index[ghost]]
    food = maze.index[(grid == DOT) | (grid == PILL)]
    fdist = maze.dist[:, food].min(1) if len(food) else np.zeros(len(maze.cells), np.int64)
    return max(maze.nbrs[p], key=lambda mv: (gdist[mv[1]], -fdist[mv[1]], -mv[0]))[0]


def ghost_step(maze: Maze, ghost: int, pacman: int, flee: bool, noise: float, rng: Any) -> int:
    """The ghost's next cell index: random with probability ``noise``, else chase (or flee)."""
    options = maze.nbrs[ghost]
    u, k = rng.random(), int(rng.integers(len(options)))  # always draw: streams stay aligned
    if u < noise:
        return options[k][1]
    d = maze.dist[:, pacman]
    if flee:  # ties go to the earlier move either way
        return max(options, key=lambda mv: (d[mv[1]], -mv[0]))[1]
    return min(options, key=lambda mv: (d[mv[1]], mv[0]))[1]


class Frame(np.ndarray):
    """A ``(15, 19)`` map that knows its :class:`Episode` and step ``t``."""

    episode: Episode | None
    t: int

    def __new__(cls, grid: np.ndarray, episode: Episode | None = None, t: int = -1) -> Frame:
        obj = np.asarray(grid).view(cls)
        obj.episode, obj.t = episode, t
        return obj

    def __array_finalize__(self, obj: Any) -> None:
        self.episode = getattr(obj, "episode", None)
        self.t = getattr(obj, "t", -1)

    def __reduce__(self) -> tuple:
        return (Frame, (np.asarray(self), self.episode, self.t))


@dataclass(eq=False, repr=False)
class Episode:
    """One recorded game: maps, agent moves and the ghost's and PacMan's positions.

    ``ghost[t]`` and ``pacman[t]`` are positions in map ``t``; the last entry
    (index ``len(moves)``) is the state after the final move.
    """

    walls: np.ndarray
    frames: list[Frame] = field(default_factory=list)
    moves: list[int] = field(default_factory=list)
    ghost: list[tuple[int, int]] = field(default_factory=list)
    pacman: list[tuple[int, int]] = field(default_factory=list)
    outcome: str = "timeout"  # "cleared", "caught" or "timeout"

    def __repr__(self) -> str:
        # Compact and content-based: frames carry their episode, and the hypothesis
        # cache keys a block by the frames' repr; the default dataclass repr printed
        # every map of the episode (seconds per block of a few hundred frames).
        h = hashlib.sha256(np.ascontiguousarray(self.walls).tobytes())
        h.update(repr((self.moves, self.ghost, self.pacman, self.outcome)).encode())
        sha = h.hexdigest()[:16]
        return f"Episode(steps={len(self.moves)}, outcome={self.outcome!r}, sha={sha})"

    def ghost_at(self, t: int) -> tuple[int, int]:
        """Ghost position at step ``t``, clamped to the episode's last state."""
        return self.ghost[min(max(t, 0), len(self.ghost) - 1)]


def render(walls: np.ndarray, dots: np.ndarray, pill: Any, pacman: Any, ghost: Any) -> np.ndarray:
    """The map of a state: walls, dots, the pill, then the ghost, then PacMan on top."""
    grid = np.where(walls, WALL, np.where(dots, DOT, EMPTY)).astype(np.int8)
    if pill is not None:
        grid[pill] = PILL
    grid[ghost] = GHOST
    grid[pacman] = PACMAN
    return grid


def play_episode(
    rng: np.random.Generator,
    max_steps: int = 120,
    ghost_noise: float = 0.2,
    power_steps: int = 10,
    avoid: int = 2,
    loops: float = 0.3,
    agent: Callable[[np.ndarray, Maze], int] | None = None,
) -> Episode:
    """Play one game of a scripted agent against the ghost; see the module docstring.

    ``agent(grid, maze) -> move`` chooses PacMan's moves; the default is
    :func:`agent_move` with ``avoid``.
    """
    walls = make_walls(rng, loops)
    maze = build_maze(walls)
    n = len(maze.cells)
    pac = int(rng.integers(n))
    far = np.nonzero(maze.dist[pac] >= 8)[0]  # start the ghost out of sight
    home = int(far[rng.integers(len(far))]) if len(far) else (pac + 1) % n
    ghost = home
    pill_idx = int(rng.choice([i for i in range(n) if i not in (pac, ghost)]))
    pill: tuple[int, int] | None = maze.cells[pill_idx]
    dots = ~walls
    dots[maze.cells[pac]] = dots[pill] = False
    ep, power = Episode(walls), 0
    for t in range(max_steps):
        grid = render(walls, dots, pill, maze.cells[pac], maze.cells[ghost])
        move = agent(grid, maze) if agent is not None else agent_move(grid, maze, avoid)
        ep.frames.append(Frame(grid, ep, t))
        ep.moves.append(move)
        ep.ghost.append(maze.cells[ghost])
        ep.pacman.append(maze.cells[pac])
        pac = next(v for m, v in maze.nbrs[pac] if m == move)
        cell = maze.cells[pac]
        dots[cell] = False
        if cell == pill:
            pill, power = None, power_steps
        if pac != ghost:
            ghost = ghost_step(maze, ghost, pac, power > 0, ghost_noise, rng)
        if pac == ghost:
            if power == 0:
                ep.outcome = "caught"
                break
            # eaten: back home, or to the cell farthest from PacMan if he stands there
            ghost = home if home != pac else int(np.argmax(maze.dist[pac] * (maze.dist[pac] < n)))
        power = max(power - 1, 0)
        if not dots.any() and pill is None:
            ep.outcome = "cleared"
            break
    ep.ghost.append(maze.cells[ghost])
    ep.pacman.append(maze.cells[pac])
    return ep


@dataclass
class GridData:
    """Frames (records), the agent's moves (labels) and the episodes they come from."""

    frames: list[Frame]
    moves: np.ndarray
    episodes: list[Episode]


def generate(n_episodes: int, seed: int = 0, **kwargs: Any) -> GridData:
    """Play ``n_episodes`` games, deterministically under ``seed``.

    Episode ``i`` draws from its own generator (``SeedSequence(seed).spawn``),
    so the first ``k`` episodes do not depend on ``n_episodes``. Keyword
    arguments go to :func:`play_episode`.
    """
    children = np.random.SeedSequence(seed).spawn(n_episodes)
    episodes = [play_episode(np.random.default_rng(c), **kwargs) for c in children]
    frames = [f for ep in episodes for f in ep.frames]
    moves = np.array([m for ep in episodes for m in ep.moves], dtype=np.int64)
    return GridData(frames, moves, episodes)


def one_hot(maps: Any) -> np.ndarray:
    """``(B, 6, H, W)`` float32 one-hot channels (one per cell code) of a list of maps."""
    codes = np.stack([np.asarray(m, dtype=np.int64) for m in maps])
    return np.moveaxis(np.eye(len(CODES), dtype=np.float32)[codes], -1, 1)


def simulate_ghost(grid: np.ndarray, n: int) -> tuple[int, int] | None:
    """The ghost's cell after ``n`` noiseless chasing steps towards a PacMan standing still."""
    grid = as_array(grid)
    maze = build_maze(grid == WALL)
    g, p = _find(grid, GHOST), _find(grid, PACMAN)
    if g is None:
        return None
    gi = int(maze.index[g])
    for _ in range(n):
        if p is None or gi == maze.index[p]:
            break
        gi = ghost_step(maze, gi, int(maze.index[p]), False, 0.0, _NO_NOISE)
    return maze.cells[gi]


class _NoNoise:
    """A stand-in generator for noiseless simulation (the draws are ignored)."""

    def random(self) -> float:
        return 1.0

    def integers(self, n: int) -> int:
        return 0


_NO_NOISE = _NoNoise()


def ghost(radius: int = 0, metric: str = "chebyshev") -> CellEquals:
    """The ghost's cell in the map, dilated by ``radius`` (DeepBase's ``f_ghost``)."""
    return CellEquals(GHOST, radius=radius, metric=metric, name=_name("ghost", radius))


def pacman(radius: int = 0, metric: str = "chebyshev") -> CellEquals:
    """PacMan's cell, dilated by ``radius``."""
    return CellEquals(PACMAN, radius=radius, metric=metric, name=_name("pacman", radius))


class GhostInNSteps(MaskHypothesis):
    """Where the ghost will be ``n`` steps after this map (DeepBase's ``f_ghost_N``).

    Parameters
    ----------
    n : int
        Steps ahead (0: the ghost's current cell).
    radius, metric
        Dilation of the cell, as for :func:`ghost`.
    mode : {"auto", "recorded", "simulated"}
        "recorded" reads the future from the :class:`Frame`'s episode (positions
        past the episode's end stay at its last state); "simulated" runs the
        ghost's noiseless chase towards a PacMan standing still, from the map
        alone; "auto" records when the record is a Frame of an episode.
    name : str, optional
        Defaults to ``ghost_in_{n}_steps`` (plus ``_r{radius}``).
    """

    def __init__(
        self,
        n: int,
        radius: int = 0,
        metric: str = "chebyshev",
        mode: str = "auto",
        name: str | None = None,
    ) -> None:
        self.n, self.radius, self.metric, self.mode = n, radius, metric, mode
        self.name = name or _name(f"ghost_in_{n}_steps", radius)

    def mask(self, record: Any) -> np.ndarray:
        grid = as_array(record)
        episode = getattr(record, "episode", None)
        if self.mode == "recorded" and episode is None:
            raise ValueError(
                f"{self.name}: mode='recorded' needs Frame records from gridworld.generate "
                "(they carry their episode); use mode='simulated' for plain maps."
            )
        if self.mode not in ("auto", "recorded", "simulated"):
            raise ValueError(f"{self.name}: unknown mode {self.mode!r}.")
        if episode is not None and self.mode != "simulated":
            pos = episode.ghost_at(record.t + self.n)
        else:
            pos = simulate_ghost(grid, self.n)
        out = np.zeros(grid.shape[-2:], dtype=bool)
        if pos is not None:
            out[pos] = True
        return dilate(out, self.radius, self.metric)


def ghost_in_n_steps(n: int, radius: int = 0, metric: str = "chebyshev", mode: str = "auto"):
    """Shorthand for :class:`GhostInNSteps`."""
    return GhostInNSteps(n, radius=radius, metric=metric, mode=mode)


def _name(base: str, radius: int) -> str:
    return base + (f"_r{radius}" if radius else "")
