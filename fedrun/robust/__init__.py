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
- :mod:`fedrun.robust.malicious`: the seeded set of malicious clients;
- what puts them in a run (the capabilities ``attack`` and ``defence``, fedrun/capabilities/, hold them):
  :mod:`~fedrun.robust.settings` (the two sections), :mod:`~fedrun.robust.stages` (a model attack and a defence as
  upload stages), :mod:`~fedrun.robust.poison` (the attackers' poisoned samples, the triggered test split) and
  :mod:`~fedrun.robust.root` (FLTrust's root update).

The rules and attacks import only from ``core/`` and ``config/`` (and torch, numpy); the run-side modules also from
``data/``, ``algorithms/`` and ``upload/``, the layers below this one (docs/design.md).
"""
