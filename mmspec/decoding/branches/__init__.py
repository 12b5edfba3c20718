"""Branches: exact candidate branches at a Jacobi window's likely rejection points, fed
under tree attention beside the window's drafts (see `tree` for how and why it stays exact).

    setting.py     BranchSetting (m x D x c), the nodes it adds, whether a session runs it
    candidates.py  what branches see of the windows (Windows) and each slot's candidates
    tree.py        Branches: extend the forward, merge the verifications, keep the cache
"""

from mmspec.decoding.branches.candidates import Windows, branch_candidates, neighbour_sources
from mmspec.decoding.branches.setting import BranchSetting, branch_nodes, check_branches
from mmspec.decoding.branches.tree import BranchCarry, BranchNodes, Branches, CacheMoves

__all__ = ["BranchCarry", "BranchNodes", "BranchSetting", "Branches", "CacheMoves", "Windows", "branch_candidates",
           "branch_nodes", "check_branches", "neighbour_sources"]
