"""Perplexity and multiple-choice accuracy, under the paper's or lm-eval's protocol."""

from accelstudy.evaluate.meters import Meter
from accelstudy.evaluate.runner import PROTOCOLS, evaluate_task

__all__ = ["PROTOCOLS", "Meter", "evaluate_task"]
