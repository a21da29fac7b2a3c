"""Which device a job runs on: ``hardware.device=auto`` spreads the jobs of a local sweep over the GPUs.

Under a parallel launcher (``hydra/launcher=joblib``, ``submitit_local``, ``ray``) several jobs of one
multirun run at once on one machine. With ``auto`` job ``n`` takes GPU ``n % n_gpus``, so four jobs on
a 4-GPU box use one GPU each instead of all piling onto GPU 0. A scheduler that gives each job its own
GPUs (SLURM sets ``CUDA_VISIBLE_DEVICES``) leaves one visible GPU: every job then takes ``cuda:0``,
its own. Outside a multirun ``auto`` is ``cuda`` when there is a GPU and ``cpu`` otherwise.
"""

from __future__ import annotations


def job_device(job_num: int | None, n_gpus: int) -> str:
    """The device for job ``job_num`` of a multirun (None: not in a multirun) on a machine with ``n_gpus``."""
    if n_gpus <= 0:
        return "cpu"
    if job_num is None:
        return "cuda"
    return f"cuda:{job_num % n_gpus}"


def multirun_job_num() -> int | None:
    """This process's job number when it runs a job of a Hydra multirun, else None."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return None
    return int(hc.job.num)
