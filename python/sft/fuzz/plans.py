"""Random plans from the search space of a program, applicable by construction.

A plan is drawn the way `search.strategy.search_plan` builds one, decision by decision, each on the program
as the decisions before it left it:

- expand: a random subset of the contractions `expandable` names;
- orders: for each chain `space.chains.chain_sites` finds in the expanded program, sometimes a
  random order other than the written one that `Chain.is_order` accepts;
- options: one of the target's backend option sets (16 on the host: flags and driver),
  drawn more often among those that keep IREE's contraction codegen (`keeps_tiles`);
- tiles (only under `keeps_tiles`, as the search requires): for each kernel of
  `contraction_kernels` in the reordered program that the search would tile too, sometimes a
  random candidate of its `tile_space` other than 0 (IREE's own config). The search tiles the
  kernels `search.exhaustive.as_compiled` keeps: those IREE compiles as a dispatch with the same
  loop extents, read from IREE's profile of the program (`search.strategy.iree_view`, one cached
  `--compile-to=executable-configurations` run); with `all_kernels=True` every kernel may be
  tiled (the space as `space/` states it, without IREE's word).

So a drawn plan should always apply. The one exception is a fusion group (`groups`, not in the
search space yet), drawn here now and then as a run of consecutive op ids: it may fail the
convexity rule, which is the plan's fault (check.py counts it as skipped).
"""

from __future__ import annotations

from ..program import to_sft
from ..search.strategy import iree_view
from ..errors import SftError
from ..passes.common import compute_ops
from ..passes.expand_batch import ExpandBatchPass, expandable
from ..passes.reassociate import ReassociatePass
from ..decisions.orders import Tree
from ..plan import Plan
from ..space.chains import chain_sites
from ..space.kernels import contraction_kernels
from ..search.exhaustive import as_compiled
from ..space.options import ModuleOptions
from ..targets import Target
from .choosers import Chooser

P_EXPAND, P_REORDER, P_TILE, P_GROUP = 0.5, 0.6, 0.7, 0.1


def random_tree(leaves: list[int], ch: Chooser) -> Tree:
    if len(leaves) == 1:
        return leaves[0]
    split = ch.int(1, len(leaves) - 1)
    return (random_tree(leaves[:split], ch), random_tree(leaves[split:], ch))


def draw_order(chain, ch: Chooser) -> Tree | None:
    """A legal order of the chain other than the written one, or None (a few tries)."""
    for _ in range(4):
        leaves = list(range(len(chain.operands)))
        for i in range(len(leaves) - 1, 0, -1):
            j = ch.int(0, i)
            leaves[i], leaves[j] = leaves[j], leaves[i]
        tree = random_tree(leaves, ch)
        if tree != chain.written and chain.is_order(tree):
            return tree
    return None


def compute_op_count(module) -> int:
    return len(compute_ops(module))


def draw_plan(sft_text: str, ch: Chooser, target: Target, all_kernels: bool = False) -> Plan:
    """A random plan for the program; every sft call it makes is one the search makes too."""
    module = to_sft(sft_text)
    expand = tuple(i for i in expandable(module) if ch.flag(P_EXPAND))
    ExpandBatchPass(expand)(module)
    orders = []
    for site in chain_sites(module):
        tree = draw_order(site.chain, ch) if ch.flag(P_REORDER) else None
        if tree is not None:
            orders.append((site.chain.op_id, tree))
    orders = tuple(orders)
    ReassociatePass(orders)(module)
    spaces = list(target.options)
    options = spaces[ch.int(0, len(spaces) - 1)]
    if ch.flag(0.4):  # more often than 4 in 16: the option sets under which tiles apply
        options = ch.pick([o for o in spaces if o.keeps_tiles])
    groups = ()
    count = compute_op_count(module)
    if count >= 2 and ch.flag(P_GROUP):
        first = ch.int(0, count - 2)
        groups = (tuple(range(first, ch.int(first + 1, count - 1) + 1)),)
    tiles = []
    kernels = contraction_kernels(module) if (target.codegen is not None and options.keeps_tiles
                                              and ch.flag(P_TILE)) else []
    if all_kernels:  # the passes tile only kernels whose summed loops are innermost
        kernels = [k for k in kernels if k.reductions_innermost]
    elif kernels:
        try:
            kernels, profiles = iree_view(module, target, [ModuleOptions()])  # consumes the module
            kernels = as_compiled(kernels, profiles[()], target)[0]
        except SftError:
            kernels = []  # IREE refuses the program itself: compiling it will say so
    for kernel in kernels:
        space = target.codegen.space(kernel)
        if ch.flag(P_TILE) and len(space) > 1:
            tiles.append((kernel.op_id, space.config(ch.int(1, len(space) - 1))))
    return Plan(expand=expand, orders=orders, groups=groups, tiles=tuple(tiles),
                flags=options.flags, driver=options.driver)
