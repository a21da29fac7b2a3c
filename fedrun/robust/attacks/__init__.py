"""Data and model poisoning attacks, one module each (Fang et al.'s two in one), registered in
:data:`fedrun.robust.base.ATTACKS`."""
