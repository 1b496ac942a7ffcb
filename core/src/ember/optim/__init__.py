"""Optimizers, learning-rate schedules and gradient clipping (``ember.optim``).

>>> import ember as em
>>> dev = em.Device.cpu().autodiff()
>>> w = em.tensor([1.0, -2.0], device=dev, requires_grad=True)
>>> opt = em.optim.Adam([w], lr=0.1)
>>> for _ in range(3):
...     opt.zero_grad()
...     (w * w).sum().backward()
...     opt.step()
>>> [round(x, 4) for x in w.tolist()]
[0.7016, -1.7006]
"""

from . import lr_scheduler
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .clip import NonFiniteGradientError, clip_grad_norm_, clip_grad_value_
from .optimizer import Optimizer, OptimizerStateError
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = [
    "Optimizer",
    "OptimizerStateError",
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "Adagrad",
    "clip_grad_norm_",
    "clip_grad_value_",
    "NonFiniteGradientError",
    "lr_scheduler",
]
