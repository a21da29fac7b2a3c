"""Pre-aggregators in front of any defence, registered in :data:`fedrun.robust.base.PREAGGREGATORS`."""
