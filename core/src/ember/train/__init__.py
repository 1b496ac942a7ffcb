"""Training: checkpoints, the Learner and its builder, metrics, and the ``ember train`` command."""
