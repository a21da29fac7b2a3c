"""Robust federated learning (issue 52): Byzantine-robust aggregation rules and poisoning attacks as pure, batched
functions of a cohort's flat uploads, each with a registered settings dataclass.

- :mod:`fedrun.robust.base`: the contracts (:class:`~fedrun.robust.base.Defence`,
  :class:`~fedrun.robust.base.PreAggregator`, :class:`~fedrun.robust.base.Attack`), their registries
  (``DEFENCES``, ``PREAGGREGATORS``, ``ATTACKS``), :func:`~fedrun.robust.base.robust_aggregate` (pre-aggregators
  then a defence) and :func:`~fedrun.robust.base.refusal` (can a cohort of n uploads with f Byzantine be handled);
- ``defences/``: mean, coordinate-wise median, trimmed mean, Krum and Multi-Krum, Bulyan, geometric median (RFA),
  centered clipping, norm bounding with weak DP noise, FLTrust;
- ``preagg/``: nearest-neighbour mixing (NNM) and bucketing, in front of any defence;
- ``attacks/``: label flipping and a pixel-pattern backdoor (on a batch), sign flipping, Gaussian noise, scaling
  (model replacement), A Little Is Enough, inner-product manipulation, min-max and min-sum, Fang et al.'s Krum
  and trimmed-mean attacks (on the uploads);
- :mod:`fedrun.robust.malicious`: the seeded set of malicious clients.

This layer imports only from ``core/`` and ``config/`` (and torch, numpy); wiring it into a round is the run's.
"""
