"""Reinforcement learning on a release: reward functions with TRL's signature
(``steptp.rl.reward``), read by ``GRPOTrainer`` on the release's ``prompts`` config, and an HTTP
environment for multi-step RL over the same judge (``steptp.rl.env``, ``steptp env serve``)."""

from .env import Env, make_server, open_judge
from .reward import SCORES, MeasuredReward, judge_completions, reward

__all__ = ["SCORES", "Env", "MeasuredReward", "judge_completions", "make_server", "open_judge", "reward"]
