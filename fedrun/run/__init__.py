"""One run: the composition root (experiment.py), the round loop, run state and checkpoints, the summary, the
recorder.
"""
