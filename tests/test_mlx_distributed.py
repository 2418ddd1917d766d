"""The order of ``ppermute``'s sends and receives over mlx processes (``fnarray.lowering.mlx.spmd``), checked
without processes: a simulation with blocking (rendezvous) sends, the worst case of MLX's ring backend, must
complete every transfer of every permutation the plan accepts. The two-process runs are in test_distributed.py."""

from __future__ import annotations

import itertools
import random

import pytest

pytest.importorskip("mlx.core")

from fnarray.lowering.mlx.spmd import ppermute_plan  # noqa: E402


def _simulate(perm, n):
    """Run every rank's plan with rendezvous sends; return the (source, destination) pairs delivered."""
    ops = {}
    for r in range(n):
        plan = ppermute_plan(perm, n, r)
        if plan is None:
            return None
        src, dst, recv_first = plan
        if src == r:
            ops[r] = []
            continue
        seq = [("recv", src), ("send", dst)] if recv_first else [("send", dst), ("recv", src)]
        ops[r] = [op for op in seq if op[1] is not None]
    done = set()
    while any(ops.values()):
        progress = False
        for a in range(n):
            if ops[a] and ops[a][0][0] == "send":
                b = ops[a][0][1]
                if ops[b] and ops[b][0] == ("recv", a):
                    ops[a].pop(0)
                    ops[b].pop(0)
                    done.add((a, b))
                    progress = True
        if not progress:
            raise AssertionError(f"ppermute {perm} over {n} processes deadlocks: pending {ops}")
    return done


def _neighbour_perms(n, rng, count):
    pairs = [(s, d) for s in range(n) for d in range(n) if s == d or (d - s) % n in (1, n - 1)]
    for _ in range(count):
        rng.shuffle(pairs)
        perm, srcs, dsts = [], set(), set()
        for s, d in pairs:
            if s not in srcs and d not in dsts and rng.random() < 0.7:
                perm.append((s, d))
                srcs.add(s)
                dsts.add(d)
        yield perm


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_ppermute_plan_never_deadlocks(n):
    rng = random.Random(n)
    perms = [[(i, (i + 1) % n) for i in range(n)], [(i, (i - 1) % n) for i in range(n)],
             [(i, i) for i in range(n)], [(0, 1)]] + list(_neighbour_perms(n, rng, 200))
    for perm in perms:
        done = _simulate(perm, n)
        assert done == {(s, d) for s, d in perm if s != d}, (perm, done)


def test_ppermute_plan_routes_other_pairs_through_all_gather():
    assert ppermute_plan([(i, (i + 2) % 4) for i in range(4)], 4, 0) is None
    assert ppermute_plan([(0, 2)], 5, 1) is None  # the same answer on every rank, also those not in a pair
    for perm in itertools.permutations(range(3)):  # 3 processes: every pair is a ring neighbour
        assert _simulate(list(enumerate(perm)), 3) is not None
