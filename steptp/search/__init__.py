"""Search over rewrite sequences: policies (beam, MCTS, greedy, random walks), a cost model that
ranks candidates before measuring, and the steps/trajectories tables.

    from steptp.search import search_kernel, Budget
    steps, traj = search_kernel(program, kernel_id, "beam", Budget(64, 120), seed=0)
"""

from .evaluator import Evaluator, InProcessEvaluator, MeasurerEvaluator, default_evaluator
from .run import Budget, Node, Search, SearchResult, kernel_id_of, trajectory_id
from .policies import MCTS, POLICIES, Beam, Greedy, Policy, RandomWalk, make_policy
from .kernel import search_kernel, settler

__all__ = ["Evaluator", "InProcessEvaluator", "MeasurerEvaluator", "default_evaluator", "Budget",
           "Node", "Search", "SearchResult", "kernel_id_of", "search_kernel", "settler", "trajectory_id", "MCTS", "POLICIES", "Beam", "Greedy", "Policy",
           "RandomWalk", "make_policy"]
