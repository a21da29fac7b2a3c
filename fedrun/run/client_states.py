"""Per-client persistent state, stored compactly: one stacked tensor tree with a leading [N] dimension.

No model object per client: c_i, h_i, momentum buffers... live as rows of tensors on the compute
device (or in host memory when ``offload``), gathered for a round's cohort and written back after.
"""

from __future__ import annotations

import torch

from fedrun.core.tree import Tree, tree_map


class ClientStates:
    def __init__(self, template: Tree, n_clients: int, device: torch.device, offload: bool = False) -> None:
        self.device = device
        self.home = torch.device("cpu") if offload else device
        self.rows: Tree = tree_map(
            lambda t: t.detach().to(self.home).unsqueeze(0).repeat((n_clients,) + (1,) * t.dim()), template
        )

    def __bool__(self) -> bool:
        return bool(self.rows)

    def gather(self, clients: torch.Tensor) -> Tree:
        idx = clients.to(self.home)
        return tree_map(lambda t: t.index_select(0, idx).to(self.device), self.rows)

    def scatter(self, clients: torch.Tensor, values: Tree) -> None:
        """Write the rows of ``clients``; ``values`` may hold only some keys (the upload pipeline's ``_upload``)."""
        idx = clients.to(self.home)
        tree_map(lambda v, t: t.index_copy_(0, idx, v.detach().to(self.home)), values, self.rows)

    def state_dict(self) -> Tree:
        return self.rows

    def load_state_dict(self, rows: Tree) -> None:
        self.rows = tree_map(lambda t: t.to(self.home), rows)
