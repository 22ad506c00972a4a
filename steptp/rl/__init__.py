"""Reinforcement learning on a release: reward functions with TRL's signature
(``steptp.rl.reward``), read by ``GRPOTrainer`` on the release's ``prompts`` config."""

from .reward import SCORES, MeasuredReward, judge_completions, reward

__all__ = ["SCORES", "MeasuredReward", "judge_completions", "reward"]
