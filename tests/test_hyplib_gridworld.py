"""The PacMan-like grid world: mazes, agent, ghost, and the ghost hypotheses."""

from __future__ import annotations

import functools
import pickle

import numpy as np
import pytest

from dni_lab.backend.hypothesis.hypotheses import evaluate_family
from hypotheses import gridworld as gw
from hypotheses.images import n_pixels

SYMBOLS = {"#": gw.WALL, ".": gw.DOT, " ": gw.EMPTY, "o": gw.PILL, "P": gw.PACMAN, "G": gw.GHOST}


def _map(*rows: str) -> np.ndarray:
    return np.array([[SYMBOLS[c] for c in r] for r in rows], dtype=np.int8)


@pytest.fixture(scope="module")
def data() -> gw.GridData:
    return gw.generate(4, seed=3)


def test_mazes_are_walled_and_connected() -> None:
    walls = gw.make_walls(np.random.default_rng(0))
    assert walls.shape == (gw.H, gw.W) == (15, 19)
    assert walls[0].all() and walls[-1].all() and walls[:, 0].all() and walls[:, -1].all()
    maze = gw.build_maze(walls)
    assert len(maze.cells) > 100
    assert (maze.dist < gw._FAR).all()  # every open cell reaches every other
    assert np.array_equal(walls, gw.make_walls(np.random.default_rng(0)))


def test_generation_is_deterministic_under_seed(data: gw.GridData) -> None:
    again = gw.generate(4, seed=3)
    assert len(again.frames) == len(data.frames)
    assert all(np.array_equal(a, b) for a, b in zip(again.frames, data.frames, strict=True))
    assert np.array_equal(again.moves, data.moves)
    # episode i does not depend on how many episodes are generated
    first = gw.generate(2, seed=3)
    assert [len(e.moves) for e in first.episodes] == [len(e.moves) for e in data.episodes[:2]]
    other = gw.generate(4, seed=4)
    assert not np.array_equal(other.frames[0], data.frames[0])


def test_frames_episodes_and_labels(data: gw.GridData) -> None:
    assert {e.outcome for e in data.episodes} <= {"caught", "cleared", "timeout"}
    for ep in data.episodes:
        maze = gw.build_maze(ep.walls)
        assert len(ep.ghost) == len(ep.pacman) == len(ep.moves) + 1
        for t, frame in enumerate(ep.frames):
            assert frame.shape == (15, 19) and frame.t == t and frame.episode is ep
            assert (frame == gw.PACMAN).sum() == 1 and (frame == gw.GHOST).sum() == 1
            assert frame[ep.ghost[t]] == gw.GHOST and frame[ep.pacman[t]] == gw.PACMAN
            # the label is a function of the map alone: learnable by imitation
            assert gw.agent_move(frame, maze) == ep.moves[t]
            if t % 10 == 0:  # the walls it needs are in the map too
                assert gw.agent_move(frame) == ep.moves[t]
        for (r0, c0), (r1, c1) in zip(ep.pacman, ep.pacman[1:], strict=False):
            assert abs(r0 - r1) + abs(c0 - c1) == 1
        for (r0, c0), (r1, c1) in zip(ep.ghost, ep.ghost[1:], strict=False):
            # one step, or eaten and sent back to its home cell
            assert abs(r0 - r1) + abs(c0 - c1) <= 1 or (r1, c1) == ep.ghost[0]
    frame = data.frames[5]
    back = pickle.loads(pickle.dumps(frame))
    assert back.t == frame.t and np.array_equal(back, frame)
    assert np.bincount(data.moves, minlength=4).min() > 0.1 * len(data.moves)


def test_agent_by_hand() -> None:
    # nearest dot, ties to the earlier move (← before →)
    assert gw.agent_move(_map("#######", "#. P .#", "#######")) == 0
    # the dot on the left is too close to the ghost: go right
    assert gw.agent_move(_map("#########", "#G. P  .#", "#########")) == 2
    # a pill is food too
    assert gw.agent_move(_map("#####", "#P o#", "#####")) == 2
    # no safe food: step away from the ghost
    assert gw.agent_move(_map("#####", "#GP #", "#####")) == 2
    # vertical moves
    assert gw.agent_move(_map("###", "#P#", "# #", "#.#", "###")) == 3


def test_flee_agent_by_hand() -> None:
    corridor = _map("#########", "#..G.P..#", "#########")
    # the ghost two steps to the left: run right, although a dot lies on each side
    assert gw.flee_move(corridor) == 2
    assert gw.agent_move(np.where(corridor == gw.GHOST, gw.EMPTY, corridor)) == 0  # ghost gone
    far = _map("############", "#G.......P.#", "############")
    assert gw.flee_move(far, radius=6) == 0  # 8 steps away: the nearest dot, ties to the left
    assert gw.flee_move(far, radius=8) == 2  # within the radius: away from the ghost
    room = _map("#######", "#     #", "# G P.#", "#     #", "#######")
    # up, right and down all lead away; the dot breaks the tie, else the earlier move
    assert gw.flee_move(room) == 2
    assert gw.flee_move(np.where(room == gw.DOT, gw.EMPTY, room)) == 1
    with pytest.raises(ValueError, match="no PacMan"):
        gw.flee_move(_map("#####", "#G .#", "#####"))


def test_episodes_of_another_agent() -> None:
    flee = functools.partial(gw.flee_move, radius=8)
    data = gw.generate(3, seed=3, agent=flee)
    for ep in data.episodes:
        maze = gw.build_maze(ep.walls)
        assert all(flee(f, maze) == m for f, m in zip(ep.frames, ep.moves, strict=True))
    plain = gw.generate(3, seed=3)
    assert [e.moves for e in plain.episodes] != [e.moves for e in data.episodes]


def test_simulated_ghost_by_hand() -> None:
    corridor = _map("#########", "#G     P#", "#########")
    assert gw.simulate_ghost(corridor, 0) == (1, 1)
    assert gw.simulate_ghost(corridor, 3) == (1, 4)
    assert gw.simulate_ghost(corridor, 10) == (1, 7)  # it stops on PacMan
    h = gw.GhostInNSteps(3)
    assert np.argwhere(h.mask(corridor)).tolist() == [[1, 4]]  # plain map: simulated
    with pytest.raises(ValueError, match="mode='simulated'"):
        gw.GhostInNSteps(3, mode="recorded").mask(corridor)


def test_ghost_in_n_steps_reads_the_recorded_future(data: gw.GridData) -> None:
    ghost_now = gw.ghost()
    for ep in data.episodes[:2]:
        last = len(ep.moves)
        for n in (0, 1, 2, 4, 8):
            h = gw.ghost_in_n_steps(n)
            for t in range(0, last, 3):
                got = np.argwhere(h.mask(ep.frames[t])).tolist()
                assert got == [list(ep.ghost[min(t + n, last)])]
                if t + n < last:  # the future map shows the ghost exactly there
                    np.testing.assert_array_equal(h(ep.frames[t]), ghost_now(ep.frames[t + n]))
    # dilation, names, fingerprints and the engine's validation
    frame = data.frames[0]
    assert gw.ghost_in_n_steps(2, radius=1).mask(frame).sum() in (4, 6, 9)
    assert gw.ghost_in_n_steps(4).name == "ghost_in_4_steps"
    assert gw.ghost(radius=1).name == "ghost_r1"
    fps = {gw.ghost_in_n_steps(n).fingerprint() for n in (1, 2, 4, 8)}
    fps.add(gw.ghost_in_n_steps(1, radius=1).fingerprint())
    assert len(fps) == 5
    assert evaluate_family(gw.ghost_in_n_steps(4), frame, n_pixels(frame), 0).shape == (285, 1)


def test_one_hot_encoding(data: gw.GridData) -> None:
    x = gw.one_hot(data.frames[:3])
    assert x.shape == (3, 6, 15, 19) and x.dtype == np.float32
    assert (x.sum(1) == 1).all()
    np.testing.assert_array_equal(x[0, gw.GHOST], data.frames[0] == gw.GHOST)
